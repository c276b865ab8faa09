// The contract of activation_distillation_forward_backward (kernels/activation_distillation.h).
#include "fast_llm/kernels/activation_distillation.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {

void check_activation_distillation_forward_backward(const ActivationDistillationArgs& args) {
  const OpContract contract("activation_distillation_forward_backward", args.student.device());
  contract.rank("student", args.student, 2, "(tokens, hidden)");
  contract.floating("student", args.student);
  contract.on_device("teacher", args.teacher);
  contract.shape("teacher", args.teacher, args.student.shape());
  contract.floating("teacher", args.teacher);
  contract.loss_sum("loss_sum", args.loss_sum);
  if (args.grad != nullptr) {
    contract.shape("grad", *args.grad, args.student.shape());
    contract.same_dtype("grad", *args.grad, "student", args.student);
  }
}

}  // namespace fast_llm::kernels
