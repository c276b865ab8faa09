// Op: distillation_forward_backward. Knowledge distillation on a chunk of logits against a reference (teacher) model's
// logits of the same tokens, with the gradient of the logits computed in the same pass (Fast-LLM's `distillation`
// loss, reference/fast-llm.md §4):
//   z = logits * s;  z = softcap * tanh(z / softcap) if a softcap is set     q = softmax(z)    (the trained model)
//   t = target_logits * s / temperature                                      p = softmax(t)    (the teacher)
//   cross_entropy  loss_t = -sum_k p_k log q_k                 d/dz = q - p
//   forward_kl     loss_t =  sum_k p_k (log p_k - log q_k)     d/dz = q - p
//   reverse_kl     loss_t =  sum_k q_k (log q_k - log p_k)     d/dz = q * (log q - log p - loss_t)
// with s the logits_scale_factor (Fast-LLM scales the teacher's logits by s / temperature, the model's by s only).
// Only tokens whose label is >= 0 count (the loss is masked by the labels, as Fast-LLM's); their losses are SUMMED into
// loss_sum (+=) and the caller divides by the labels in the step. The gradient weight * d/dz * dz/dlogits goes to
// grad_logits: written (=; masked rows get 0) or, with accumulate_gradient, added (+=; masked rows untouched), so the
// label loss's gradient and this one can share one buffer. grad_logits may be the logits tensor itself (in place; not
// with accumulate_gradient).
#pragma once

#include <optional>

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

enum class DistillationLossType { cross_entropy, forward_kl, reverse_kl };

struct DistillationArgs {
  const Tensor& logits;         // (tokens, vocab)
  const Tensor& target_logits;  // (tokens, vocab) the teacher's, any floating dtype
  const Tensor& labels;         // (tokens) int64; < 0 masked
  Tensor& loss_sum;             // (1) fp32 or fp64, +=
  Tensor* grad_logits;          // (tokens, vocab), or nullptr (forward only)
  DistillationLossType loss_type = DistillationLossType::cross_entropy;
  double temperature = 1.0;
  double weight = 1.0;  // multiplies the gradient (loss weight / labels in step)
  double logits_scale_factor = 1.0;
  std::optional<double> softcap = std::nullopt;
  bool accumulate_gradient = false;
  Stream stream = {};
};

struct DistillationForwardBackward {
  static constexpr std::string_view name = "distillation_forward_backward";
  using Args = DistillationArgs;
};

// The contract above, checked once by the entry function: throws `[distillation_forward_backward] ...`.
void check_distillation_forward_backward(const DistillationArgs& args);

inline void distillation_forward_backward(const DistillationArgs& args) {
  check_distillation_forward_backward(args);
  dispatch<DistillationForwardBackward>(args, args.logits.device());
}

}  // namespace fast_llm::kernels
