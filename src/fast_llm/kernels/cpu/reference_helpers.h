// Helpers shared by the CPU reference kernels: reading / writing small tensors (weights, statistics, rotary tables,
// parameter gradients) of any floating dtype and any strides as plain vectors. The arguments have met the op's
// contract (kernels/contract.h) before a kernel runs.
#pragma once

#include <cmath>
#include <optional>
#include <span>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels::cpu {

// Offset (in elements) of the element with row-major linear index `linear` of a tensor with `shape` and `strides`.
inline int64_t strided_offset(const Shape& shape, const Shape& strides, int64_t linear) {
  int64_t offset = 0;
  for (int dim = shape.rank() - 1; dim >= 0; --dim) {
    offset += (linear % shape[dim]) * strides[dim];
    linear /= shape[dim];
  }
  return offset;
}

// One row of a head's logits as its losses see them: z = x s, or c tanh(x s / c) with a softcap c, into `z`, and
// dz/dx (s, or s (1 - tanh^2)) into `dz_dx`; `row` is the row's first element, `column_stride` its element step.
template <class Compute, class T>
void scaled_logits_row(const T* row, int64_t column_stride, Compute scale, std::optional<double> softcap,
                       std::vector<Compute>& z, std::vector<Compute>& dz_dx) {
  for (size_t column = 0; column < z.size(); ++column) {
    const Compute scaled = load_value(row[int64_t(column) * column_stride]) * scale;
    if (softcap) {
      const Compute cap = Compute(*softcap), tanh = std::tanh(scaled / cap);
      z[column] = cap * tanh;
      dz_dx[column] = scale * (Compute(1) - tanh * tanh);
    } else {
      z[column] = scaled;
      dz_dx[column] = scale;
    }
  }
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
