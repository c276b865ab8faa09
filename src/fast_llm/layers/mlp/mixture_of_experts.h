// Dropless mixture of experts (Fast-LLM's `type: moe`, the registered `moe` MlpBase): each token goes to its shared
// experts and to the top_k of the router, and its output is the score-weighted sum of those experts' MLPs. No token is
// ever dropped: the permuted buffers hold exactly tokens * (shared + top_k) rows, grouped by expert.
//
// Parameters (Fast-LLM's layout, under the MLP's name, e.g. `decoder.3.mlp`; experts E includes the shared ones, the
// routed ones are numbered first, I = intermediate_size, H = hidden):
//   router.weight   [routed, H]                        logits = router_input_scale * x R^T, fp32 (fp64 for fp64)
//   layer_1.weight  [E * 2I, H] gated ([gate; up] per expert), [E * I, H] otherwise: expert e's rows from e * (2)I
//   layer_2.weight  [E * I, H]: expert e's down projection TRANSPOSED, rows [e * I, (e + 1) * I)
// No biases. Data path (kernels/moe.h ops, gemms on views of the weights and of the permuted buffers per expert):
//   forward:  logits -> [jitter] -> route -> dispatch map -> offsets to the host (the gemms need the row counts) ->
//             permute x -> per expert h_e = x_e W1_e^T -> act -> scale rows by the scores -> y_e = a_e W2_e -> unpermute
//   backward: permute grad -> per expert grad W2_e += (s a)_e^T g_e, g_a = g_e W2_e^T -> scale_rows_backward (grad of a
//             and of the scores) -> act' -> grad W1_e += dh_e^T x_e, dx_e = dh_e W1_e -> unpermute, plus the router's
//             path: route backward (scores, load-balancing and z losses) -> grad of the logits -> router gradients.
// Forward keeps the unscaled activation and recomputes the scaled one for W2's gradient; `recompute_level` drops
// more: `activation` the activation, `activation_and_input` also the permuted input, `full` also layer_1's output.
// Losses: `load_balancing_loss` (aux_loss routing) and `router_z_loss` (z_loss_coefficient > 0) are added to the
// step's loss sums as the mean over the step's micro-batches (LayerContext::micro_batches_in_step), summed over the
// MoE layers; their gradients are coefficient x (routed experts, for aux) x loss_scale / micro-batches in the step.
// `implementation` (auto, dropless, looped) all run this one path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fast_llm/kernels/activation.h"
#include "fast_llm/kernels/moe.h"
#include "fast_llm/layers/common/linear.h"
#include "fast_llm/layers/mlp/config.h"
#include "fast_llm/layers/mlp/mlp_base.h"
#include "fast_llm/layers/saved_per_micro_batch.h"

namespace fast_llm::layers {

class MoeMlp : public MlpBase {
 public:
  MoeMlp(std::string name, const MoeMlpConfig& config, int64_t hidden_size, double lr_scale);
  // As the block's MLP.
  MoeMlp(const MoeMlpConfig& config, const SublayerArguments& arguments);

  // What backward needs from forward (routing always; the buffers as recompute_level allows).
  struct Saved {
    Tensor input;          // (tokens, hidden)
    Tensor logits;         // (tokens, routed) fp32 (fp64 for fp64), as routed (after jitter)
    Tensor jitter;         // (tokens * routed, 1) the noise factors; undefined without jitter
    Tensor experts;        // (tokens, slots) int32
    Tensor scores;         // (tokens, slots) dtype of logits
    Tensor expert_counts;  // (routed) fp32
    Tensor rows;           // (tokens, slots) int32
    std::vector<int64_t> offsets;  // (experts + 1) on the host
    Tensor permuted;       // (tokens * slots, hidden); kept up to recompute_level activation
    Tensor hidden;         // (tokens * slots, (2) I) layer_1 output; not kept with recompute_level full
    Tensor activated;      // (tokens * slots, I) unscaled activation; kept with recompute_level none only
  };

  Tensor forward(LayerContext& context, const Tensor& input) override;
  Tensor backward(LayerContext& context, const Tensor& grad_output) override;

  double flops(const MicroBatch& batch) const override {
    return 6.0 * double(batch.num_tokens()) * double(matmul_weight_count());
  }
  bool uses_dropout() const override { return jitter_eps_ > 0.0; }
  bool reads_device_values_on_host() const override { return true; }
  // The router and the layer_1 / layer_2 weights of the (shared + top_k) experts a token uses.
  int64_t matmul_weight_count() const override;
  int64_t slots() const { return int64_t(shared_experts_) + top_k_; }
  int64_t experts() const { return experts_; }
  int64_t intermediate_size() const { return intermediate_size_; }
  MlpRecomputeLevel recompute_level() const { return recompute_level_; }

 private:
  Tensor forward(const LayerContext& context, const Tensor& input, Saved* saved);
  Tensor backward(const LayerContext& context, const Tensor& grad_output, Saved saved);

  // logits (tokens, routed) = router_input_scale * input R^T, in the logits' dtype.
  Tensor router_logits(const Tensor& input, Stream stream);
  // The (tokens * routed, 1) jitter factors uniform(1 - eps, 1 + eps) of this micro-batch in `dtype` (the logits').
  Tensor jitter_factors(const LayerContext& context, int64_t tokens, DType dtype) const;
  // Multiplies `values` (tokens, routed) element-wise by `factors` (tokens * routed, 1), in place.
  void multiply_by_jitter(Tensor& values, const Tensor& factors, Stream stream) const;
  // permuted (tokens * slots, hidden) = input rows in expert order.
  Tensor permute(const Tensor& input, const Tensor& rows, Stream stream) const;
  // Per expert with rows: hidden_e = permuted_e W1_e^T.
  Tensor first_projection(const Tensor& permuted, const std::vector<int64_t>& offsets, Stream stream);
  Tensor activate(const Tensor& hidden, Stream stream) const;
  Tensor scaled(const Tensor& activated, const Tensor& rows, const Tensor& scores, Stream stream) const;
  // Rows [offsets[e], offsets[e + 1]) of `buffer`.
  static Tensor expert_rows(const Tensor& buffer, const std::vector<int64_t>& offsets, int64_t expert);
  // Expert e's block of rows of a weight (or its gradient) of `rows_per_expert` rows per expert.
  static Tensor expert_weight(const Tensor& weight, int64_t rows_per_expert, int64_t expert);
  DType logits_dtype(DType compute_dtype) const;

  int64_t hidden_size_;
  int64_t intermediate_size_;
  bool gated_;
  kernels::ActivationType activation_;
  MlpRecomputeLevel recompute_level_;
  int experts_;
  int shared_experts_;
  int routed_experts_;
  int top_k_;
  kernels::MoeRouting routing_;
  double auxiliary_loss_coefficient_;
  double z_loss_coefficient_;
  double router_input_scale_;
  double jitter_eps_;
  Linear router_;
  Linear layer_1_;
  Linear layer_2_;
  SavedPerMicroBatch<Saved> saved_;
};

}  // namespace fast_llm::layers
