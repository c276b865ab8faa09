// Op: activation_distillation_forward_backward. Fast-LLM's activation distillation of a block's mixer output (block
// `distillation_model`, reference/fast-llm.md §4) on one micro-batch, with the gradient in the same call:
//   loss = sum_t || student_t - teacher_t ||_2          (the L2 norm per token, not squared)
//   grad_t = weight * (student_t - teacher_t) / || student_t - teacher_t ||    (0 where the norm is 0)
// The loss is SUMMED into loss_sum (+=); the caller divides by the tokens (Fast-LLM's mean) and scales the gradient
// (weight: loss weight * loss scale / (tokens * micro-batches in the step)). grad is written (=).
#pragma once

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

struct ActivationDistillationArgs {
  const Tensor& student;  // (tokens, hidden)
  const Tensor& teacher;  // (tokens, hidden) any floating dtype
  Tensor& loss_sum;       // (1) fp32 or fp64, +=
  Tensor* grad;           // (tokens, hidden) in the student's dtype, =, or nullptr
  double weight = 1.0;
  Stream stream = {};
};

struct ActivationDistillationForwardBackward {
  static constexpr std::string_view name = "activation_distillation_forward_backward";
  using Args = ActivationDistillationArgs;
};

// The contract above, checked once by the entry function: throws `[activation_distillation_forward_backward] ...`.
void check_activation_distillation_forward_backward(const ActivationDistillationArgs& args);

inline void activation_distillation_forward_backward(const ActivationDistillationArgs& args) {
  check_activation_distillation_forward_backward(args);
  dispatch<ActivationDistillationForwardBackward>(args, args.student.device());
}

}  // namespace fast_llm::kernels
