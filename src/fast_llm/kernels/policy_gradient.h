// Op: policy_gradient_forward_backward. The clipped policy-gradient losses of Fast-LLM's GRPO and GSPO on a chunk of
// logits, with the gradient of the logits computed in the same pass (no autograd through softmax), and the sums behind
// their logged metrics. With z = logits * logits_scale_factor (then softcap * tanh(z / softcap) if a softcap is set)
// and, for each unmasked label y_t (labels < 0 are masked):
//   new log-prob   l_t = z_t[y_t] - logsumexp(z_t)
//   log-ratio      d_t = l_t - old_log_probability_t
//   per token (GRPO):    r_t = exp(d_t),                     a_t = advantage_t
//   per document (GSPO): r_t = exp(mean_{u in s} d_u),      a_t = mean_{u in s} advantage_u   (s: t's document,
//                        means over its unmasked labels in this call: the whole micro-batch, one call)
//   loss_t = -min(r_t a_t, clip(r_t, 1 - epsilon_low, 1 + epsilon_high) a_t)
// loss_sum += sum_t loss_t (for GSPO, the document's loss counted once per label: length-proportional, Fast-LLM's
// n_s * loss_s); the caller divides (GRPO: by the labels in the step, GSPO: by the documents in the step).
// The gradient written to grad_logits (=) is grad_weight * d(sum_t loss_t)/d logits:
//   d loss / d l_t = -c_t,  c_t = (max(a_t, 0) [r_t <= 1 + epsilon_high] + min(a_t, 0) [r_t >= 1 - epsilon_low]) r_t
//   (GSPO: d l_t enters r through the document mean, and n_s cancels the 1 / n_s), so
//   grad z_t = grad_weight * c_t * (softmax(z_t) - onehot(y_t)), chained through softcap and logits_scale_factor;
//   masked rows get 0. grad_logits may be the logits tensor itself (in place).
// Metric sums (+=, indices PolicyMetric), with document weights w_t = 1 / (unmasked labels of t's document) on
// unmasked labels: the per-document means are sum_t w_t x_t (the caller divides by the documents in the step):
//   new_logprobs sum w l; old_logprobs sum w old; ratio_new_old sum w r; ratio_new_old_sum sum v r;
//   ratio_new_old_squared_sum sum v r^2 (v = 1 per label for GRPO, w for GSPO); kl_new_old sum w (r - log r - 1);
//   clipped_ratio_fraction sum w [r < 1 - epsilon_low or r > 1 + epsilon_high]; advantage sum w a; num_tokens
//   (unmasked labels); num_segments (documents with labels); entropy sum w (logsumexp(z) - sum_k softmax_k z_k).
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
  double epsilon_low = 0.2;
  double epsilon_high = 0.2;
  double logits_scale_factor = 1.0;
  std::optional<double> softcap = std::nullopt;
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
