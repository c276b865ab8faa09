// Op: cross_entropy_forward_backward. The language-model loss on a chunk of logits, with the gradient of the logits
// computed in the same pass (no autograd through softmax), as Fast-LLM's fused loss kernels:
//   z = logits * logits_scale_factor;  z = softcap * tanh(z / softcap) if a softcap is set
//   label loss_t = logsumexp(z_t) - z_t[label_t]          (tokens with label < 0, i.e. -100, are masked)
//   z-loss_t     = logsumexp(z_t)^2
// Losses are SUMMED over unmasked tokens into fp32/fp64 scalars (+=); the caller divides by the number of labels in
// the whole step (Fast-LLM's normalisation). The gradient written to grad_logits (=) is
//   d/dz [label_weight * loss_t + z_loss_weight * z-loss_t]  chained through softcap and logits_scale_factor,
// i.e. label_weight * (softmax - onehot) + z_loss_weight * 2 * lse * softmax, then * dz/dlogits; masked rows get 0.
// grad_logits may be the logits tensor itself (in place) to save memory.
// Per-row gradient weights: the gradient of the head's other losses whose logits gradient is, per row r,
// c_r * (softmax - onehot(label_r)) * dz/dlogits (dpo, grpo, gspo: kernels/dpo.h, kernels/policy_gradient.h, their
// `row_coefficients` outputs), is added in the same pass by giving c_r in row_gradient_weights: the row's gradient is
// then computed with label_weight + c_r in place of label_weight. They add nothing to the loss sums, and a masked row
// (label < 0) keeps a zero gradient whatever its weight (those losses mask the same rows: their c_r is 0 there).
// Distillation term: Fast-LLM's `distillation` loss against a teacher's logits of the same rows (kernels/distillation.h
// defines it: loss types cross_entropy / forward_kl / reverse_kl, temperature, the same masking by the labels, scale
// and softcap as the label loss) computed in the same pass: its per-row losses are summed into its own loss_sum (+=)
// and weight * its gradient is added to the gradient before the store (one rounding). The head's distillation thus
// needs no pass and no (tokens, vocab) buffer of its own; with no label loss it runs with label_weight 0.
#pragma once

#include <optional>

#include "fast_llm/kernels/distillation.h"
#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

// The distillation term (see the file comment); its fields mean what DistillationArgs' of the same name mean.
struct CrossEntropyDistillation {
  const Tensor& target_logits;  // (tokens, vocab) the teacher's, any floating dtype
  Tensor& loss_sum;             // (1) fp32 or fp64, +=: the sum of the unmasked rows' distillation losses
  DistillationLossType loss_type = DistillationLossType::cross_entropy;
  double temperature = 1.0;
  double weight = 1.0;  // multiplies its gradient (loss weight / labels in step)
};

struct CrossEntropyArgs {
  const Tensor& logits;     // (tokens, vocab)
  const Tensor& labels;     // (tokens) int64; < 0 masked
  Tensor& label_loss_sum;   // (1) fp32 or fp64, +=
  Tensor* z_loss_sum;       // (1) fp32 or fp64, +=, or nullptr (no z-loss)
  Tensor* grad_logits;      // (tokens, vocab) =, or nullptr (forward only, e.g. validation)
  double label_weight = 1.0;   // multiplies the label-loss gradient (loss weight / labels in step)
  const Tensor* row_gradient_weights = nullptr;  // (tokens) fp32 or fp64: c_r added to label_weight, or nullptr
  const CrossEntropyDistillation* distillation = nullptr;  // the distillation term, or nullptr
  double z_loss_weight = 0.0;  // multiplies the z-loss gradient
  double logits_scale_factor = 1.0;
  std::optional<double> softcap = std::nullopt;
  Stream stream = {};
};

struct CrossEntropyForwardBackward {
  static constexpr std::string_view name = "cross_entropy_forward_backward";
  using Args = CrossEntropyArgs;
};

// The contract above, checked once by the entry function before dispatch: throws
// `[cross_entropy_forward_backward] ...`.
void check_cross_entropy_forward_backward(const CrossEntropyArgs& args);

inline void cross_entropy_forward_backward(const CrossEntropyArgs& args) {
  check_cross_entropy_forward_backward(args);
  dispatch<CrossEntropyForwardBackward>(args, args.logits.device());
}

}  // namespace fast_llm::kernels
