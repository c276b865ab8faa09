// Op: label_log_probabilities. Each row's log-probability of its label under the softmax of its logits:
//   output_r = log_softmax(logits_r)[label_r] = logits_r[label_r] - logsumexp(logits_r),   0 where label_r < 0
// with no scale factor or softcap (the caller passes the logits as its model computes them, e.g.
// LanguageModelHead::logits). A frozen reference model hands the dpo loss (kernels/dpo.h) these instead of its
// logits: one number per row, so its (rows, vocab) logits need to exist only one chunk of rows at a time.
// A label must be < vocab. Rows are independent; each variant is deterministic.
#pragma once

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

struct LabelLogProbabilitiesArgs {
  const Tensor& logits;  // (rows, vocab) floating
  const Tensor& labels;  // (rows) int64; < 0 masked
  Tensor& output;        // (rows) float32 or float64, =
  Stream stream = {};
};

struct LabelLogProbabilities {
  static constexpr std::string_view name = "label_log_probabilities";
  using Args = LabelLogProbabilitiesArgs;
};

// The contract above, checked once by the entry function: throws `[label_log_probabilities] ...`.
void check_label_log_probabilities(const LabelLogProbabilitiesArgs& args);

inline void label_log_probabilities(const LabelLogProbabilitiesArgs& args) {
  check_label_log_probabilities(args);
  dispatch<LabelLogProbabilities>(args, args.logits.device());
}

}  // namespace fast_llm::kernels
