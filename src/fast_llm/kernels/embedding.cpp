// The contract of embedding_forward / embedding_backward (kernels/embedding.h), checked once per call by the entry
// functions. The indices' values are the data's, not the call's: the CPU reference checks them, the GPU trusts them.
#include "fast_llm/kernels/embedding.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {
namespace {

// indices (tokens) int32 or int64; returns tokens.
int64_t check_indices(const OpContract& contract, const Tensor& indices) {
  contract.rank("indices", indices, 1, "(tokens)");
  contract.dtype("indices", indices, {DType::int32, DType::int64});
  return indices.size(0);
}

}  // namespace

void check_embedding_forward(const EmbeddingForwardArgs& args) {
  const OpContract contract("embedding_forward", args.weight.device());
  const int64_t tokens = check_indices(contract, args.indices);
  contract.rank("weight", args.weight, 2, "(rows, hidden)");
  contract.floating("weight", args.weight);
  contract.shape("output", args.output, Shape{tokens, args.weight.size(1)});
  contract.same_dtype("output", args.output, "weight", args.weight);
}

void check_embedding_backward(const EmbeddingBackwardArgs& args) {
  const OpContract contract("embedding_backward", args.grad_weight.device());
  const int64_t tokens = check_indices(contract, args.indices);
  contract.rank("grad_weight", args.grad_weight, 2, "(rows, hidden)");
  contract.dtype("grad_weight", args.grad_weight, {DType::float32, DType::float64});
  contract.shape("grad_output", args.grad_output, Shape{tokens, args.grad_weight.size(1)});
  contract.floating("grad_output", args.grad_output);
}

}  // namespace fast_llm::kernels
