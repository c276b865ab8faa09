#include "fast_llm/kernels/label_log_probabilities.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {

void check_label_log_probabilities(const LabelLogProbabilitiesArgs& args) {
  const OpContract contract("label_log_probabilities", args.logits.device());
  contract.on_device("logits", args.logits);
  contract.rank("logits", args.logits, 2, "(rows, vocab)");
  contract.floating("logits", args.logits);
  FLM_CHECK(args.logits.size(1) > 0, contract.op(), "logits need a vocabulary, got shape {}",
            args.logits.shape().str());
  const int64_t rows = args.logits.size(0);
  contract.on_device("labels", args.labels);
  contract.shape("labels", args.labels, Shape{rows});
  contract.dtype("labels", args.labels, {DType::int64});
  contract.on_device("output", args.output);
  contract.shape("output", args.output, Shape{rows});
  contract.dtype("output", args.output, {DType::float32, DType::float64});
}

}  // namespace fast_llm::kernels
