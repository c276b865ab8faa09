// The feed-forward half of a decoder block (`mlp:`): a Layer on (tokens, hidden), built from its config's `type:` by
// the MLP registry (block/sublayer_registry.h) and registered by each implementation in its own file:
//   FLM_REGISTER_SUBLAYER(MlpBase, Mlp, MlpConfig, "mlp");
// As every Layer, it keeps its own saved state per micro-batch from forward to backward. Forward returns a tensor the
// block owns: the block applies dropout and adds the residual into it in place.
#pragma once

#include <cstdint>
#include <string_view>

#include "fast_llm/layers/block/sublayer_registry.h"
#include "fast_llm/layers/layer.h"
#include "fast_llm/layers/mlp/config.h"

namespace fast_llm::layers {

class MlpBase : public Layer {
 public:
  using Config = MlpBaseConfig;
  static constexpr std::string_view kKind = "MLP";

  using Layer::Layer;
  // Whether the layer splits its work over SublayerArguments::tensor_parallel (the block refuses it otherwise).
  virtual bool supports_tensor_parallelism() const { return false; }
  // Weights that take part in matmuls (for a mixture of experts: those a token uses), for the model's FLOPs per token.
  virtual int64_t matmul_weight_count() const = 0;
  // Whether each output row depends on its input row alone and the layer adds no loss (the dense MLP; not a mixture
  // of experts, whose router losses are over every row): a block may then run it on some rows only.
  virtual bool row_wise() const { return false; }
};

}  // namespace fast_llm::layers
