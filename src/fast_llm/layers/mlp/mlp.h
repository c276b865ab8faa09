// Dense MLP (Fast-LLM's `type: mlp`, the registered `mlp` MlpBase): y = act(x W1^T + b1) W2 + b2, or for gated MLPs
// act(gate) * up with [gate; up] = x W1^T + b1.
//
// Parameters (Fast-LLM names under the MLP's name, e.g. `decoder.3.mlp`):
//   layer_1.weight  [2 * intermediate, hidden] gated (gate rows first) or [intermediate, hidden]   (+ layer_1.bias)
//   layer_2.weight  [intermediate, hidden]: stored TRANSPOSED, y = a W2                             (+ layer_2.bias)
// As an MlpBase (forward / backward with a LayerContext) it keeps each micro-batch's Saved itself; the explicit forms
// fill and take a Saved the caller holds. With `recompute_level` backward recomputes what forward did not keep (the
// same kernels on the same inputs: the same values): the activation output (`activation`, `activation_and_input`),
// and the first projection (`full`). Backward returns grad_input (=) and accumulates parameter gradients (+=); it
// takes the Saved by value, so each tensor is freed as soon as backward is done with it.
#pragma once

#include <optional>
#include <string>

#include "fast_llm/kernels/activation.h"
#include "fast_llm/layers/common/linear.h"
#include "fast_llm/layers/mlp/config.h"
#include "fast_llm/layers/mlp/mlp_base.h"
#include "fast_llm/layers/saved_per_micro_batch.h"

namespace fast_llm::layers {

class Mlp : public MlpBase {
 public:
  // The dense MLP only: moe and hybrid_moe and the MLP's own pre/post norms are refused. `lora` (null: none) adds LoRA
  // adapters to the layers whose `apply_peft` is true.
  // `tensor_parallel`: this rank's intermediate features (the size must divide over the ranks), layer_1
  // column-parallel (the gate and up halves split alike), layer_2 row-parallel (common/tensor_parallel.h).
  Mlp(std::string name, const MlpBaseConfig& config, int64_t hidden_size, double lr_scale,
      const LoraConfig* lora = nullptr, TensorParallelism tensor_parallel = {});
  // As the block's MLP.
  Mlp(const MlpConfig& config, const SublayerArguments& arguments);

  struct Saved {
    Tensor input;      // (tokens, hidden)
    Tensor hidden;     // (tokens, 2 * intermediate) gated, (tokens, intermediate) otherwise: layer_1 output; not kept
                       // with recompute_level full
    Tensor activated;  // (tokens, intermediate): activation output, layer_2 input; kept with recompute_level none only
    std::optional<uint64_t> dropout_seed;  // the forward's (LoRA dropout), regenerated in backward
  };

  // With tensor parallelism these gather the sequence (sequence-tensor parallelism: only this rank's rows of the input
  // are kept for backward, which gathers them again) and sum layer_2's output and the input gradient over the group;
  // the explicit forms below work on this rank's part alone.
  Tensor forward(LayerContext& context, const Tensor& input) override;
  Tensor backward(LayerContext& context, const Tensor& grad_output) override;
  bool supports_tensor_parallelism() const override { return true; }
  bool row_wise() const override { return true; }
  // (tokens, hidden) -> (tokens, hidden); `saved` may be null (validation: nothing kept). `dropout_seed`: the
  // micro-batch's in a training forward (LoRA dropout), unset otherwise.
  Tensor forward(const Tensor& input, Saved* saved, Stream stream,
                 std::optional<uint64_t> dropout_seed = std::nullopt) const;
  // `input_gradient_ready` (tensor parallelism): called with the input gradient once it is complete, before layer_1's
  // parameter gradients, so that its reduction over the group runs while they are computed.
  Tensor backward(const Tensor& grad_output, Saved saved, Stream stream,
                  const InputGradientReady& input_gradient_ready = {}) const;

  // Model FLOPs of forward + backward (recomputation excluded).
  double flops(int64_t tokens) const { return layer_1_.flops(tokens) + layer_2_.flops(tokens); }
  double flops(const MicroBatch& batch) const override { return flops(batch.num_tokens()); }
  MlpRecomputeLevel recompute_level() const { return recompute_level_; }
  bool uses_dropout() const override { return layer_1_.uses_dropout() || layer_2_.uses_dropout(); }
  Linear& layer_1() { return layer_1_; }
  Linear& layer_2() { return layer_2_; }
  int64_t matmul_weight_count() const override {
    return layer_1_.input_size() * layer_1_.output_size() + layer_2_.input_size() * layer_2_.output_size();
  }

 private:
  // act(hidden) (gated: act(gate) * up) into a new (tokens, intermediate) tensor.
  Tensor activate(const Tensor& hidden, Stream stream) const;

  int64_t intermediate_size_;  // this rank's
  bool gated_;
  kernels::ActivationType activation_;
  MlpRecomputeLevel recompute_level_;
  Linear layer_1_;
  Linear layer_2_;
  TensorParallelism tensor_parallel_;
  SavedPerMicroBatch<Saved> saved_;
};

kernels::ActivationType kernel_activation(ActivationType type);
// act(hidden) (gated: act(gate) * up, gate the first half of each row) into a new (rows, intermediate_size) tensor.
Tensor activate_mlp_hidden(const Tensor& hidden, int64_t intermediate_size, kernels::ActivationType activation,
                           bool gated, Stream stream);

}  // namespace fast_llm::layers
