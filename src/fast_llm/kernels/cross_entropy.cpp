// The contract of cross_entropy_forward_backward (kernels/cross_entropy.h), checked once per call by the entry
// function. The labels' values are the data's, not the call's: the CPU reference checks them against the vocabulary.
#include "fast_llm/kernels/cross_entropy.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {

void check_cross_entropy_forward_backward(const CrossEntropyArgs& args) {
  const OpContract contract("cross_entropy_forward_backward", args.logits.device());
  contract.rank("logits", args.logits, 2, "(tokens, vocab)");
  contract.floating("logits", args.logits);
  FLM_CHECK(args.logits.size(1) > 0, contract.op(), "logits has shape {}: the vocabulary is empty",
            args.logits.shape().str());
  contract.shape("labels", args.labels, Shape{args.logits.size(0)});
  contract.dtype("labels", args.labels, {DType::int64});
  contract.loss_sum("label_loss_sum", args.label_loss_sum);
  contract.loss_sum("z_loss_sum", args.z_loss_sum);
  if (args.grad_logits != nullptr) {
    contract.shape("grad_logits", *args.grad_logits, args.logits.shape());
    contract.same_dtype("grad_logits", *args.grad_logits, "logits", args.logits);
  }
  if (args.row_gradient_weights != nullptr) {
    contract.shape("row_gradient_weights", *args.row_gradient_weights, Shape{args.logits.size(0)});
    contract.dtype("row_gradient_weights", *args.row_gradient_weights, {DType::float32, DType::float64});
    FLM_CHECK(args.grad_logits != nullptr, contract.op(), "row_gradient_weights are given but no grad_logits");
  }
  if (args.distillation != nullptr) {
    const CrossEntropyDistillation& distillation = *args.distillation;
    contract.on_device("distillation.target_logits", distillation.target_logits);
    contract.shape("distillation.target_logits", distillation.target_logits, args.logits.shape());
    contract.floating("distillation.target_logits", distillation.target_logits);
    contract.loss_sum("distillation.loss_sum", &distillation.loss_sum);
    FLM_CHECK(distillation.temperature > 0.0, contract.op(),
              "distillation.temperature is {}, expected a positive number", distillation.temperature);
  }
  FLM_CHECK(args.z_loss_sum != nullptr || args.z_loss_weight == 0.0, contract.op(),
            "z_loss_weight is {} but no z_loss_sum is given", args.z_loss_weight);
  FLM_CHECK(!args.softcap || *args.softcap > 0.0, contract.op(), "softcap is {}, expected a positive number",
            args.softcap.value_or(0.0));
}

}  // namespace fast_llm::kernels
