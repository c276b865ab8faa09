// The contract of distillation_forward_backward (kernels/distillation.h), checked once per call by the entry function.
#include "fast_llm/kernels/distillation.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {

void check_distillation_forward_backward(const DistillationArgs& args) {
  const OpContract contract("distillation_forward_backward", args.logits.device());
  contract.rank("logits", args.logits, 2, "(tokens, vocab)");
  contract.floating("logits", args.logits);
  FLM_CHECK(args.logits.size(1) > 0, contract.op(), "logits has shape {}: the vocabulary is empty",
            args.logits.shape().str());
  contract.on_device("target_logits", args.target_logits);
  contract.shape("target_logits", args.target_logits, args.logits.shape());
  contract.floating("target_logits", args.target_logits);
  contract.shape("labels", args.labels, Shape{args.logits.size(0)});
  contract.dtype("labels", args.labels, {DType::int64});
  contract.shape("loss_sum", args.loss_sum, Shape{1});
  contract.dtype("loss_sum", args.loss_sum, {DType::float32, DType::float64});
  if (args.grad_logits != nullptr) {
    contract.shape("grad_logits", *args.grad_logits, args.logits.shape());
    contract.same_dtype("grad_logits", *args.grad_logits, "logits", args.logits);
    FLM_CHECK(!args.accumulate_gradient || args.grad_logits->data() != args.logits.data(), contract.op(),
              "accumulate_gradient needs a gradient buffer other than the logits");
  }
  FLM_CHECK(args.temperature > 0.0, contract.op(), "temperature is {}, expected a positive number", args.temperature);
  FLM_CHECK(!args.softcap || *args.softcap > 0.0, contract.op(), "softcap is {}, expected a positive number",
            args.softcap.value_or(0.0));
}

}  // namespace fast_llm::kernels
