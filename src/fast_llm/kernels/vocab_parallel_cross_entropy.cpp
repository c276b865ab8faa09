// The contracts of the vocabulary-parallel cross-entropy passes (kernels/vocab_parallel_cross_entropy.h), checked once
// per call by the entry functions.
#include "fast_llm/kernels/vocab_parallel_cross_entropy.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {

namespace {

// The logits, labels and settings every pass reads; returns the tokens.
int64_t check_slice(const OpContract& contract, const VocabParallelLogits& slice) {
  contract.rank("logits", slice.logits, 2, "(tokens, vocab slice)");
  contract.floating("logits", slice.logits);
  FLM_CHECK(slice.logits.size(1) > 0, contract.op(), "logits has shape {}: the vocabulary slice is empty",
            slice.logits.shape().str());
  contract.shape("labels", slice.labels, Shape{slice.logits.size(0)});
  contract.dtype("labels", slice.labels, {DType::int64});
  FLM_CHECK(slice.vocab_begin >= 0, contract.op(), "vocab_begin is {}, expected a non-negative number",
            slice.vocab_begin);
  FLM_CHECK(!slice.softcap || *slice.softcap > 0.0, contract.op(), "softcap is {}, expected a positive number",
            slice.softcap.value_or(0.0));
  return slice.logits.size(0);
}

// Row statistics are float64 for float64 logits, float32 otherwise.
void check_statistics(const OpContract& contract, std::string_view name, const Tensor& tensor, const Shape& shape,
                      const Tensor& logits) {
  contract.shape(name, tensor, shape);
  contract.dtype(name, tensor, {logits.dtype() == DType::float64 ? DType::float64 : DType::float32});
  contract.contiguous(name, tensor);
}

}  // namespace

void check_vocab_parallel_logits_max(const VocabParallelMaxArgs& args) {
  const OpContract contract("vocab_parallel_logits_max", args.slice.logits.device());
  const int64_t tokens = check_slice(contract, args.slice);
  check_statistics(contract, "row_max", args.row_max, Shape{tokens}, args.slice.logits);
}

void check_vocab_parallel_logits_sums(const VocabParallelSumsArgs& args) {
  const OpContract contract("vocab_parallel_logits_sums", args.slice.logits.device());
  const int64_t tokens = check_slice(contract, args.slice);
  check_statistics(contract, "row_max", args.row_max, Shape{tokens}, args.slice.logits);
  check_statistics(contract, "sums", args.sums, Shape{2, tokens}, args.slice.logits);
}

void check_vocab_parallel_cross_entropy(const VocabParallelCrossEntropyArgs& args) {
  const OpContract contract("vocab_parallel_cross_entropy", args.slice.logits.device());
  const int64_t tokens = check_slice(contract, args.slice);
  check_statistics(contract, "row_max", args.row_max, Shape{tokens}, args.slice.logits);
  check_statistics(contract, "sums", args.sums, Shape{2, tokens}, args.slice.logits);
  contract.loss_sum("label_loss_sum", args.label_loss_sum);
  contract.loss_sum("z_loss_sum", args.z_loss_sum);
  if (args.grad_logits != nullptr) {
    contract.shape("grad_logits", *args.grad_logits, args.slice.logits.shape());
    contract.same_dtype("grad_logits", *args.grad_logits, "logits", args.slice.logits);
  }
  FLM_CHECK(args.z_loss_sum != nullptr || args.z_loss_weight == 0.0, contract.op(),
            "z_loss_weight is {} but no z_loss_sum is given", args.z_loss_weight);
}

}  // namespace fast_llm::kernels
