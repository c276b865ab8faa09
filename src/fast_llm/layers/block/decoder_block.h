// Decoder block (Fast-LLM's `type: decoder`), a Layer on the residual stream (tokens, hidden):
//   h = x + dropout(mixer(norm_1(x)))
//   y = h + dropout(mlp(norm_2(h)))
// The mixer and the MLP are whatever their configs' `type:` selects (block/mixer.h, mlp/mlp_base.h), built through
// their registries (block/sublayer_registry.h): the block knows only the two interfaces.
// The addition after the mixer is done in place on the mixer output by norm_2, in the pass that normalises the sum
// (Normalization::add_and_forward); the one after the MLP is an axpy on the MLP output (no copy). In backward each
// norm adds the skip connection's gradient to its own in the same pass. Dropout uses seeds derived from the
// micro-batch's dropout seed and the block's name, so backward regenerates the same masks.
// Parameters: `<name>.norm_1.*`, `<name>.mixer.*`, `<name>.norm_2.*`, `<name>.mlp.*`, in that order.
// Backward returns the gradient of x (=), accumulating parameter gradients (+=). The block keeps its norms' state per
// micro-batch (context.batch.index) from forward to backward; the mixer and the MLP keep their own.
// Activation distillation (Fast-LLM's block `distillation_model`, training only): the mixer output m (before dropout)
// is compared with the same block's mixer output of the named reference model
// (MicroBatch::reference_mixer_outputs): loss = mean over tokens of ||m_t - teacher_t||_2, added (divided by the
// micro-batches in the step, as the MoE router losses) to the normalised loss `activation_distillation_loss`; its
// gradient, times distillation_loss_weight, is kept from forward and added to the mixer output's gradient in backward.
// With LayerContext::mixer_outputs set (a reference model's forward), the block stores a copy of its mixer output.
// Output on the loss rows (the last block, when the head computes its losses on MicroBatch::loss_rows only): the mixer
// runs on every row (a loss row attends to the keys and values of every row before it), then the mixer output and x
// are gathered at the loss rows and norm_2, the MLP and both additions run on those rows alone; the block returns
// (loss rows, hidden). Backward takes the gradient of those rows and spreads it back to every row (zero on the
// others) before the mixer's backward. With a row-wise MLP the result is the same as on every row.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "fast_llm/layers/block/config.h"
#include "fast_llm/layers/block/mixer.h"
#include "fast_llm/layers/block/shared_resources.h"
#include "fast_llm/layers/common/normalization.h"
#include "fast_llm/layers/layer.h"
#include "fast_llm/layers/mlp/mlp_base.h"
#include "fast_llm/layers/saved_per_micro_batch.h"

namespace fast_llm::layers {

class DecoderBlock : public Layer {
 public:
  // `lr_scale`: product of the enclosing scales (model, decoder). `shared`: what the blocks of the model share (rotary
  // tables), or null for this block's own. Refused: mixer and MLP types without a registered layer, post-mixer /
  // post-MLP norms, a learned output scale, activation distillation. `lora`: the model's LoRA settings (null: none).
  // `tensor_parallel`: this rank's place in the tensor-parallel group, handed to the mixer and the MLP (which must
  // support it); with sequence-tensor parallelism the block's input and output are this rank's rows of the sequence,
  // the norms work on them (their gradients partial, summed over the group by the engine) and block dropout is refused.
  DecoderBlock(std::string name, const DecoderBlockConfig& config, int64_t hidden_size, double lr_scale,
               SharedResources* shared = nullptr, const LoraConfig* lora = nullptr,
               TensorParallelism tensor_parallel = {});

  Tensor forward(LayerContext& context, const Tensor& input) override;
  Tensor backward(LayerContext& context, const Tensor& grad_output) override;
  double flops(const MicroBatch& batch) const override;
  bool uses_dropout() const override { return dropout_ > 0.0 || mixer_->uses_dropout() || mlp_->uses_dropout(); }
  bool reads_device_values_on_host() const override {
    return mixer_->reads_device_values_on_host() || mlp_->reads_device_values_on_host();
  }

  // When `predicate(batch)` holds, forward computes the output on the loss rows of `batch` only (above). Needs a
  // row-wise MLP (MlpBase::row_wise); an empty predicate (the default) computes every row always.
  using BatchPredicate = std::function<bool(const MicroBatch&)>;
  void compute_output_on_loss_rows_when(BatchPredicate predicate);
  bool computes_output_on_loss_rows(const MicroBatch& batch) const;

  Mixer& mixer() { return *mixer_; }
  const Mixer& mixer() const { return *mixer_; }
  MlpBase& mlp() { return *mlp_; }
  const MlpBase& mlp() const { return *mlp_; }
  bool distills_activations() const { return distillation_model_.has_value(); }
  int64_t matmul_weight_count() const { return mixer_->matmul_weight_count() + mlp_->matmul_weight_count(); }

 private:
  struct Saved {
    Normalization::Saved norm_1;
    Normalization::Saved norm_2;
    uint64_t dropout_seed = 0;
    Tensor distillation_grad;  // (tokens, hidden): the activation distillation's gradient of the mixer output
    bool output_on_loss_rows = false;
  };

  // The activation distillation's loss (into context.losses) and its gradient of the mixer output (see above).
  Tensor distill_activations(LayerContext& context, const Tensor& mixer_output);

  double dropout_;
  std::optional<std::string> distillation_model_;
  double distillation_loss_weight_ = 1.0;
  Normalization norm_1_;
  std::unique_ptr<Mixer> mixer_;
  Normalization norm_2_;
  std::unique_ptr<MlpBase> mlp_;
  BatchPredicate output_on_loss_rows_;
  SavedPerMicroBatch<Saved> saved_;
};

}  // namespace fast_llm::layers
