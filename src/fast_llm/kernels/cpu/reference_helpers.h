// Helpers shared by the CPU reference kernels: argument checks, and reading / writing small tensors (weights,
// statistics, rotary tables, parameter gradients) of any floating dtype and any strides as plain vectors.
//
// `supports` functions say what a variant cannot run (a dtype, a layout) with the `*_reason` helpers; the kernels
// themselves check what no variant can run (wrong shapes, tensors on another device) with the `check_*` helpers,
// which throw `[op] what` errors:
//   [rms_norm_forward] weight has shape (3), expected (4)
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels::cpu {

inline void check_defined_on_cpu(std::string_view op, std::string_view name, const Tensor& tensor) {
  FLM_CHECK(tensor.defined(), op, "{} is undefined", name);
  FLM_CHECK(tensor.device().is_cpu(), op, "{} is on {}, expected cpu", name, tensor.device().str());
}

// A tensor whose shape is fixed by the others.
inline void check_shape(std::string_view op, std::string_view name, const Tensor& tensor, const Shape& expected) {
  check_defined_on_cpu(op, name, tensor);
  FLM_CHECK(tensor.shape() == expected, op, "{} has shape {}, expected {}", name, tensor.shape().str(), expected.str());
}

// A tensor that sets the shapes of the others: only its rank is fixed. `layout` names the dimensions: "(rows, hidden)".
inline void check_rank(std::string_view op, std::string_view name, const Tensor& tensor, int rank,
                       std::string_view layout) {
  check_defined_on_cpu(op, name, tensor);
  FLM_CHECK(tensor.rank() == rank, op, "{} has shape {}, expected {}", name, tensor.shape().str(), layout);
}

// float32, float64, bfloat16 or float16.
inline std::optional<std::string> floating_dtype_reason(std::string_view name, const Tensor& tensor) {
  if (is_supported_floating(tensor.dtype())) return std::nullopt;
  return fmt::format("{} has dtype {}; supported: float32, float64, bfloat16, float16", name,
                     dtype_name(tensor.dtype()));
}

// float32 or float64 (saved statistics, parameter gradients, rotary tables).
inline std::optional<std::string> float32_or_float64_reason(std::string_view name, const Tensor& tensor) {
  if (tensor.dtype() == DType::float32 || tensor.dtype() == DType::float64) return std::nullopt;
  return fmt::format("{} has dtype {}; supported: float32, float64", name, dtype_name(tensor.dtype()));
}

// `tensor` must have the dtype of `reference_tensor` (the reference kernels do not mix dtypes there).
inline std::optional<std::string> same_dtype_reason(std::string_view name, const Tensor& tensor,
                                                    std::string_view reference_name, const Tensor& reference_tensor) {
  if (tensor.dtype() == reference_tensor.dtype()) return std::nullopt;
  return fmt::format("{} has dtype {}, {} has {}; they must match", name, dtype_name(tensor.dtype()), reference_name,
                     dtype_name(reference_tensor.dtype()));
}

// Offset (in elements) of the element with row-major linear index `linear` of a tensor with `shape` and `strides`.
inline int64_t strided_offset(const Shape& shape, const Shape& strides, int64_t linear) {
  int64_t offset = 0;
  for (int dim = shape.rank() - 1; dim >= 0; --dim) {
    offset += (linear % shape[dim]) * strides[dim];
    linear /= shape[dim];
  }
  return offset;
}

// All elements of a floating tensor (any rank and strides) in row-major order, converted to Compute.
template <class Compute>
std::vector<Compute> read_values(const Tensor& tensor) {
  std::vector<Compute> values(size_t(tensor.numel()));
  if (values.empty()) return values;
  visit_floating_dtype(tensor.dtype(), [&]<class T>(std::type_identity<T>) {
    const T* data = tensor.data_as<T>();
    for (int64_t index = 0; index < tensor.numel(); ++index)
      values[size_t(index)] = Compute(load_value(data[strided_offset(tensor.shape(), tensor.strides(), index)]));
  });
  return values;
}

// Writes `values` (row-major order) into a floating tensor of any rank and strides: `=`, or `+=` with `accumulate`.
template <class Compute>
void write_values(const Tensor& tensor, std::span<const Compute> values, bool accumulate) {
  FLM_ASSERT(int64_t(values.size()) == tensor.numel(), "write_values: {} values for shape {}", values.size(),
             tensor.shape().str());
  if (values.empty()) return;
  visit_floating_dtype(tensor.dtype(), [&]<class T>(std::type_identity<T>) {
    T* data = tensor.data_as<T>();
    for (int64_t index = 0; index < tensor.numel(); ++index) {
      T& element = data[strided_offset(tensor.shape(), tensor.strides(), index)];
      double value = double(values[size_t(index)]);
      if (accumulate) value += double(load_value(element));
      element = store_value<T>(value);
    }
  });
}

}  // namespace fast_llm::kernels::cpu
