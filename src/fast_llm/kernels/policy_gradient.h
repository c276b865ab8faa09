// Op: policy_gradient_forward_backward. Fast-LLM's clipped GRPO (per-token ratio) and GSPO (per-document ratio)
// losses on a chunk of logits (scaled, optionally softcapped), with the gradient of the logits written (=) in the same
// pass (in place allowed) and the sums behind the logged metrics (+=, indices PolicyMetric). loss_sum is the sum over
// unmasked labels (GSPO: each document's loss once per label); the caller divides by the step's labels (GRPO) or
// documents (GSPO). The formulas, gradient and metric definitions: docs/post-training.md, "GRPO and GSPO formulas".
// The gradient of a row is grad_weight c_t (softmax - onehot) dz/dlogits; with row_coefficients the op adds
// (+=) grad_weight c_t there instead of (or besides) writing grad_logits, for the head to pass them to
// cross_entropy_forward_backward's row_gradient_weights (one pass writes every loss's gradient).
#pragma once

#include <optional>

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

// Indices of the metric sums, in the order Fast-LLM defines its policy metrics.
enum class PolicyMetric : int {
  new_logprobs,
  old_logprobs,
  ratio_new_old,
  ratio_new_old_sum,
  ratio_new_old_squared_sum,
  kl_new_old,
  clipped_ratio_fraction,
  advantage,
  num_tokens,
  num_segments,
  entropy,
  count
};
inline constexpr int kPolicyMetricCount = int(PolicyMetric::count);

struct PolicyGradientArgs {
  const Tensor& logits;                 // (tokens, vocab)
  const Tensor& labels;                 // (tokens) int64; < 0 masked
  const Tensor& advantages;             // (tokens) float32, aligned with the labels
  const Tensor& old_log_probabilities;  // (tokens) float32, aligned with the labels
  const Tensor& label_documents;        // (tokens) int32: document of each label in [0, num_documents), any if masked
  int64_t num_documents = 0;            // documents the labels belong to
  bool sequence_level = false;          // false: GRPO (per-token ratio), true: GSPO (per-document ratio)
  Tensor& loss_sum;                     // (1) fp32 or fp64, +=
  Tensor* metric_sums = nullptr;        // (kPolicyMetricCount) fp32 or fp64, +=, or nullptr (no metrics)
  Tensor* grad_logits = nullptr;        // (tokens, vocab) =, or nullptr (forward only)
  double grad_weight = 1.0;             // multiplies the gradient of loss_sum
  Tensor* row_coefficients = nullptr;   // (tokens) fp32 or fp64, += grad_weight c_t (0 for masked rows), or nullptr
  double epsilon_low = 0.2;
  double epsilon_high = 0.2;
  double logits_scale_factor = 1.0;
  std::optional<double> softcap = std::nullopt;
  // (1) fp32 or fp64 each, or nullptr: max= the largest (min= the smallest) advantage of an unmasked label, the token's
  // own advantage for GSPO too (as Fast-LLM); NaN advantages are skipped. Extremes, unlike sums, combine over chunks,
  // micro-batches and ranks with max / min: start them at -inf / +inf.
  Tensor* max_advantage = nullptr;
  Tensor* min_advantage = nullptr;
  Stream stream = {};
};

struct PolicyGradientForwardBackward {
  static constexpr std::string_view name = "policy_gradient_forward_backward";
  using Args = PolicyGradientArgs;
};

// The contract above, checked once by the entry function before dispatch: throws
// `[policy_gradient_forward_backward] ...`.
void check_policy_gradient_forward_backward(const PolicyGradientArgs& args);

inline void policy_gradient_forward_backward(const PolicyGradientArgs& args) {
  check_policy_gradient_forward_backward(args);
  dispatch<PolicyGradientForwardBackward>(args, args.logits.device());
}

}  // namespace fast_llm::kernels
