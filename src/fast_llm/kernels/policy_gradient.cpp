// The contract of policy_gradient_forward_backward (kernels/policy_gradient.h), checked once per call by the entry
// function. Label and document values are the data's: the CPU reference checks them.
#include "fast_llm/kernels/policy_gradient.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {

void check_policy_gradient_forward_backward(const PolicyGradientArgs& args) {
  const OpContract contract("policy_gradient_forward_backward", args.logits.device());
  const Shape tokens{
      check_head_loss_operands(contract, args.logits, args.labels, args.loss_sum, args.grad_logits)};
  contract.shape("advantages", args.advantages, tokens);
  contract.dtype("advantages", args.advantages, {DType::float32});
  contract.shape("old_log_probabilities", args.old_log_probabilities, tokens);
  contract.dtype("old_log_probabilities", args.old_log_probabilities, {DType::float32});
  contract.shape("label_documents", args.label_documents, tokens);
  contract.dtype("label_documents", args.label_documents, {DType::int32});
  FLM_CHECK(args.num_documents >= 0, contract.op(), "num_documents is {}", args.num_documents);
  if (args.row_coefficients != nullptr) {
    contract.shape("row_coefficients", *args.row_coefficients, tokens);
    contract.dtype("row_coefficients", *args.row_coefficients, {DType::float32, DType::float64});
  }
  if (args.metric_sums != nullptr) {
    contract.shape("metric_sums", *args.metric_sums, Shape{kPolicyMetricCount});
    contract.dtype("metric_sums", *args.metric_sums, {DType::float32, DType::float64});
  }
  contract.loss_sum("max_advantage", args.max_advantage);
  contract.loss_sum("min_advantage", args.min_advantage);
  FLM_CHECK(args.epsilon_low >= 0.0 && args.epsilon_high >= 0.0, contract.op(),
            "epsilon_low {} and epsilon_high {} must be non-negative", args.epsilon_low, args.epsilon_high);
  FLM_CHECK(!args.softcap || *args.softcap > 0.0, contract.op(), "softcap is {}, expected a positive number",
            args.softcap.value_or(0.0));
}

}  // namespace fast_llm::kernels
