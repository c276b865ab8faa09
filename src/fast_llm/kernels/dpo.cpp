// The contract of dpo_forward_backward (kernels/dpo.h), checked once per call by the entry function.
#include "fast_llm/kernels/dpo.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {

void check_dpo_forward_backward(const DpoArgs& args) {
  const OpContract contract("dpo_forward_backward", args.logits.device());
  check_head_loss_operands(contract, args.logits, args.labels, args.loss_sum, args.grad_logits);
  contract.on_device("reference_log_probabilities", args.reference_log_probabilities);
  contract.shape("reference_log_probabilities", args.reference_log_probabilities, Shape{args.logits.size(0)});
  contract.dtype("reference_log_probabilities", args.reference_log_probabilities, {DType::float32, DType::float64});
  FLM_CHECK(args.grad_logits == nullptr || !args.accumulate_gradient || args.grad_logits->data() != args.logits.data(),
            contract.op(), "accumulate_gradient needs a gradient buffer other than the logits");
  const int64_t rows = args.logits.size(0);
  if (args.row_coefficients != nullptr) {
    contract.shape("row_coefficients", *args.row_coefficients, Shape{rows});
    contract.dtype("row_coefficients", *args.row_coefficients, {DType::float32, DType::float64});
  }
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
