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
// Gradient addend: another loss's gradient of the logits that is not of that form (distillation's), given as a
// tensor of the logits' shape and dtype, is added to the gradient as it is written (one rounding, as an axpy after
// this op would give), so the head needs no separate pass to add it. Masked rows still get 0 (their addend is not
// read: the distillation loss masks the same rows). It may not be the logits or grad_logits.
#pragma once

#include <optional>

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

struct CrossEntropyArgs {
  const Tensor& logits;     // (tokens, vocab)
  const Tensor& labels;     // (tokens) int64; < 0 masked
  Tensor& label_loss_sum;   // (1) fp32 or fp64, +=
  Tensor* z_loss_sum;       // (1) fp32 or fp64, +=, or nullptr (no z-loss)
  Tensor* grad_logits;      // (tokens, vocab) =, or nullptr (forward only, e.g. validation)
  double label_weight = 1.0;   // multiplies the label-loss gradient (loss weight / labels in step)
  const Tensor* row_gradient_weights = nullptr;  // (tokens) fp32 or fp64: c_r added to label_weight, or nullptr
  const Tensor* gradient_addend = nullptr;       // (tokens, vocab) the logits' dtype, added to the gradient, or nullptr
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
