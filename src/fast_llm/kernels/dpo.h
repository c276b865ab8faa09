// Op: dpo_forward_backward. Direct preference optimisation (TRL's sigmoid loss, Fast-LLM's `dpo` loss type) on the
// logits of a micro-batch, with the gradient of the logits computed in the same call:
//   log pi(t)      = log_softmax(logits_t * s)[label_t]           (the trained model; s: logits_scale_factor)
//   log pi_ref(t)  = reference_log_probabilities_t                (the frozen reference model, no gradient)
// The reference enters through its per-row log-probabilities of the labels (kernels/label_log_probabilities.h), not
// its logits: one number per row, so the reference's (rows, vocab) logits need not be kept for the step.
//   for each pair:  m = (sum_{t in chosen} log pi(t) - sum_{t in rejected} log pi(t))
//                     - (the same sums of log pi_ref)
//                   loss = -log sigmoid(beta * m)
// Spans are half-open ranges of ROWS of the logits (the rows whose labels are the span's tokens); rows whose label is
// < 0 add nothing. The pairs' losses are SUMMED into loss_sum (+=): the caller divides by the pairs in the step. The
// gradient (the sum over pairs of d loss / d logits, times `weight`) is, for a row t of the chosen (+) or rejected (-)
// span of a pair: weight * beta * sigmoid(-beta m) * (+-1) * (softmax(logits_t s) - onehot(label_t)) * s. It is
// written (=; every other row 0) or, with accumulate_gradient, added (+=; other rows untouched) to grad_logits, which
// may be the logits tensor itself (not with accumulate_gradient). A row may belong to several spans: its gradient is
// the sum. With row_coefficients the op adds (+=) each row's -weight * beta * sigmoid(-beta m) * (+-1) there (0 for
// rows of no span), so that its gradient is row_coefficients[t] * (softmax - onehot) * s: the head passes them to
// cross_entropy_forward_backward's row_gradient_weights instead of writing a gradient of its own.
#pragma once

#include <cstdint>
#include <span>

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

// One chosen / rejected pair: half-open ranges of rows of the logits.
struct PreferencePair {
  int64_t chosen_begin = 0, chosen_end = 0;
  int64_t rejected_begin = 0, rejected_end = 0;
};

struct DpoArgs {
  const Tensor& logits;  // (tokens, vocab)
  // (tokens) float32 or float64: log pi_ref(t), the reference model's log_softmax at label_t
  // (kernels/label_log_probabilities.h); read on the spans' rows whose label is >= 0.
  const Tensor& reference_log_probabilities;
  const Tensor& labels;  // (tokens) int64; < 0 masked
  std::span<const PreferencePair> pairs;
  Tensor& loss_sum;     // (1) fp32 or fp64, +=
  Tensor* grad_logits;  // (tokens, vocab), or nullptr (forward only)
  Tensor* row_coefficients = nullptr;  // (tokens) fp32 or fp64, +=, or nullptr
  double beta = 1.0;
  double weight = 1.0;  // multiplies the gradient (loss weight / pairs in step)
  double logits_scale_factor = 1.0;
  bool accumulate_gradient = false;
  Stream stream = {};
};

struct DpoForwardBackward {
  static constexpr std::string_view name = "dpo_forward_backward";
  using Args = DpoArgs;
};

// The contract above, checked once by the entry function: throws `[dpo_forward_backward] ...`.
void check_dpo_forward_backward(const DpoArgs& args);

inline void dpo_forward_backward(const DpoArgs& args) {
  check_dpo_forward_backward(args);
  dispatch<DpoForwardBackward>(args, args.logits.device());
}

}  // namespace fast_llm::kernels
