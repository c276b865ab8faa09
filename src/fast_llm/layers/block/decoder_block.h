// Decoder block (Fast-LLM's `type: decoder`), a Layer on the residual stream (tokens, hidden):
//   h = x + dropout(mixer(norm_1(x)))
//   y = h + dropout(mlp(norm_2(h)))
// The addition after the mixer is done in place on the mixer output by norm_2, in the pass that normalises the sum
// (Normalization::add_and_forward); the one after the MLP is an axpy on the MLP output (no copy). In backward each
// norm adds the skip connection's gradient to its own in the same pass. Dropout uses seeds derived from the
// micro-batch's dropout seed and the block's name, so backward regenerates the same masks.
// Parameters: `<name>.norm_1.*`, `<name>.mixer.*` (attention), `<name>.norm_2.*`, `<name>.mlp.*`.
// Backward returns the gradient of x (=), accumulating parameter gradients (+=). Saved state is kept per
// micro-batch (context.batch.index) from forward to backward.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "fast_llm/layers/attention/attention.h"
#include "fast_llm/layers/block/config.h"
#include "fast_llm/layers/common/normalization.h"
#include "fast_llm/layers/layer.h"
#include "fast_llm/layers/mlp/mlp.h"

namespace fast_llm::layers {

class DecoderBlock : public Layer {
 public:
  // `lr_scale`: product of the enclosing scales (model, decoder). `rotary`: shared rotary tables, or null.
  // Refused: mixers other than attention, post-mixer / post-MLP norms, a learned output scale, activation
  // distillation.
  DecoderBlock(std::string name, const DecoderBlockConfig& config, int64_t hidden_size, double lr_scale,
               std::shared_ptr<Rotary> rotary = nullptr);

  Tensor forward(LayerContext& context, const Tensor& input) override;
  Tensor backward(LayerContext& context, const Tensor& grad_output) override;
  double flops(const MicroBatch& batch) const override;
  bool uses_dropout() const override { return dropout_ > 0.0; }

  Attention& mixer() { return *mixer_; }
  const Attention& mixer() const { return *mixer_; }
  Mlp& mlp() { return *mlp_; }
  int64_t matmul_weight_count() const { return mixer_->matmul_weight_count() + mlp_->matmul_weight_count(); }

 private:
  struct Saved {
    Normalization::Saved norm_1;
    Attention::Saved mixer;
    Normalization::Saved norm_2;
    Mlp::Saved mlp;
    uint64_t dropout_seed = 0;
  };

  double dropout_;
  Normalization norm_1_;
  std::unique_ptr<Attention> mixer_;
  Normalization norm_2_;
  std::unique_ptr<Mlp> mlp_;
  std::map<int64_t, Saved> saved_;
};

}  // namespace fast_llm::layers
