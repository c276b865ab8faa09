// The contract of rotary_apply (kernels/rotary.h), checked once per call by the entry function.
#include "fast_llm/kernels/rotary.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {

void check_rotary_apply(const RotaryApplyArgs& args) {
  const OpContract contract("rotary_apply", args.tensor.device());
  contract.rank("tensor", args.tensor, 3, "(tokens, heads, head_size)");
  contract.floating("tensor", args.tensor);
  const int64_t tokens = args.tensor.size(0), head_size = args.tensor.size(2);
  contract.rank("cos", args.cos, 2, "(tokens, rotary_dims / 2)");
  FLM_CHECK(args.cos.size(0) == tokens, contract.op(),
            "cos has shape {}, expected ({}, rotary_dims / 2) for tensor of shape {}", args.cos.shape().str(), tokens,
            args.tensor.shape().str());
  FLM_CHECK(2 * args.cos.size(1) <= head_size, contract.op(), "cos has shape {}: rotary_dims {} exceeds head_size {}",
            args.cos.shape().str(), 2 * args.cos.size(1), head_size);
  contract.shape("sin", args.sin, args.cos.shape());
  contract.dtype("cos", args.cos, {DType::float32, DType::float64});
  contract.dtype("sin", args.sin, {DType::float32, DType::float64});
}

}  // namespace fast_llm::kernels
