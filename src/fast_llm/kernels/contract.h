// The checks an op's entry function makes once, before dispatch: the op's contract (shapes, dtypes, devices), as the
// op's header states it. Each op has one check function in kernels/<op>.cpp built from these; a failed check throws
// `[op] what`, naming the argument:
//   [rms_norm_forward] weight has shape (3), expected (4)
// Variants do not check the contract again: their `supports` states only their own limits (dtypes, layouts, sizes).
#pragma once

#include <initializer_list>
#include <string_view>

#include "fast_llm/core/device.h"
#include "fast_llm/core/dtype.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

class OpContract {
 public:
  // Every tensor of the call must be on `device`, the one the op dispatches on.
  OpContract(std::string_view op, Device device) : op_(op), device_(device) {}

  std::string_view op() const { return op_; }

  // `tensor` is defined and on the op's device.
  void on_device(std::string_view name, const Tensor& tensor) const;
  // ... with rank `rank` (a tensor that sets the sizes of the others); `layout` names its dimensions: "(rows, hidden)".
  void rank(std::string_view name, const Tensor& tensor, int rank, std::string_view layout) const;
  // ... with shape `expected` (a tensor whose shape the others fix).
  void shape(std::string_view name, const Tensor& tensor, const Shape& expected) const;
  // The same for an optional tensor: nothing to check when it is null.
  void shape(std::string_view name, const Tensor* tensor, const Shape& expected) const;

  // float32, float64, bfloat16 or float16.
  void floating(std::string_view name, const Tensor& tensor) const;
  // One of `supported`.
  void dtype(std::string_view name, const Tensor& tensor, std::initializer_list<DType> supported) const;
  // The dtype of `reference`.
  void same_dtype(std::string_view name, const Tensor& tensor, std::string_view reference_name,
                  const Tensor& reference) const;
  void contiguous(std::string_view name, const Tensor& tensor) const;
  // A loss's sum to add to: shape (1), float32 or float64. The same for an optional one: nothing to check when null.
  void loss_sum(std::string_view name, const Tensor& tensor) const;
  void loss_sum(std::string_view name, const Tensor* tensor) const;

 private:
  std::string_view op_;
  Device device_;
};

// The operands every loss over a chunk of head logits shares: logits (tokens, vocab) floating with a vocabulary,
// labels (tokens) int64, loss_sum a float32 or float64 scalar, and grad_logits (when given) of the logits' shape and
// dtype. Returns the token count.
int64_t check_head_loss_operands(const OpContract& contract, const Tensor& logits, const Tensor& labels,
                                 const Tensor& loss_sum, const Tensor* grad_logits);

}  // namespace fast_llm::kernels
