// The contract of dpo_forward_backward (kernels/dpo.h), checked once per call by the entry function.
#include "fast_llm/kernels/dpo.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {

void check_dpo_forward_backward(const DpoArgs& args) {
  const OpContract contract("dpo_forward_backward", args.logits.device());
  contract.rank("logits", args.logits, 2, "(tokens, vocab)");
  contract.floating("logits", args.logits);
  FLM_CHECK(args.logits.size(1) > 0, contract.op(), "logits has shape {}: the vocabulary is empty",
            args.logits.shape().str());
  contract.on_device("reference_logits", args.reference_logits);
  contract.shape("reference_logits", args.reference_logits, args.logits.shape());
  contract.floating("reference_logits", args.reference_logits);
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
  const int64_t rows = args.logits.size(0);
  for (size_t index = 0; index < args.pairs.size(); ++index) {
    const PreferencePair& pair = args.pairs[index];
    FLM_CHECK(0 <= pair.chosen_begin && pair.chosen_begin <= pair.chosen_end && pair.chosen_end <= rows &&
                  0 <= pair.rejected_begin && pair.rejected_begin <= pair.rejected_end && pair.rejected_end <= rows,
              contract.op(),
              "pair {}: chosen rows [{}, {}) or rejected rows [{}, {}) outside the {} rows of the logits",
              index, pair.chosen_begin, pair.chosen_end, pair.rejected_begin, pair.rejected_end, rows);
  }
}

}  // namespace fast_llm::kernels
