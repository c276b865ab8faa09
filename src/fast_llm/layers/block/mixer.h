// The token-mixing half of a decoder block (`mixer:`): a Layer on (tokens, hidden), built from its config's `type:` by
// the mixer registry (block/sublayer_registry.h) and registered by each implementation in its own file:
//   FLM_REGISTER_SUBLAYER(Mixer, Attention, AttentionConfig, "attention");
// As every Layer, it keeps its own saved state per micro-batch from forward to backward. Forward returns a tensor the
// block owns: the block applies dropout and adds the residual into it in place.
#pragma once

#include <cstdint>
#include <string_view>

#include "fast_llm/layers/block/mixer_config.h"
#include "fast_llm/layers/block/sublayer_registry.h"
#include "fast_llm/layers/layer.h"

namespace fast_llm::layers {

class Mixer : public Layer {
 public:
  using Config = MixerConfig;
  static constexpr std::string_view kKind = "mixer";

  using Layer::Layer;
  // Whether the layer splits its work over SublayerArguments::tensor_parallel (the block refuses it otherwise).
  virtual bool supports_tensor_parallelism() const { return false; }
  // Weights that take part in matmuls, for the model's FLOPs per token.
  virtual int64_t matmul_weight_count() const = 0;
  // Model FLOPs per token of forward + backward besides the 6 x matmul weights (attention: the query-key and
  // probability-value products), in documents of `sequence_length` tokens.
  virtual double mixing_flops_per_token(int64_t sequence_length) const = 0;
};

}  // namespace fast_llm::layers
