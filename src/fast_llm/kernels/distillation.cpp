// The contract of distillation_forward_backward (kernels/distillation.h), checked once per call by the entry function.
#include "fast_llm/kernels/distillation.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {

void check_distillation_forward_backward(const DistillationArgs& args) {
  const OpContract contract("distillation_forward_backward", args.logits.device());
  check_head_loss_operands(contract, args.logits, args.labels, args.loss_sum, args.grad_logits);
  contract.on_device("target_logits", args.target_logits);
  contract.shape("target_logits", args.target_logits, args.logits.shape());
  contract.floating("target_logits", args.target_logits);
  FLM_CHECK(args.grad_logits == nullptr || !args.accumulate_gradient || args.grad_logits->data() != args.logits.data(),
            contract.op(), "accumulate_gradient needs a gradient buffer other than the logits");
  FLM_CHECK(args.temperature > 0.0, contract.op(), "temperature is {}, expected a positive number", args.temperature);
  FLM_CHECK(!args.softcap || *args.softcap > 0.0, contract.op(), "softcap is {}, expected a positive number",
            args.softcap.value_or(0.0));
}

}  // namespace fast_llm::kernels
