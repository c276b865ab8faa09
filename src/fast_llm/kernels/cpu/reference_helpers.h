// Helpers shared by the CPU reference kernels: reading / writing small tensors (weights, statistics, rotary tables,
// parameter gradients, loss sums) of any floating dtype and any strides as plain vectors, and the row math the loss
// heads share (scaled logits, logsumexp, the cross-entropy gradient, the distillation loss). The arguments have met the
// op's contract (kernels/contract.h) before a kernel runs.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/kernels/distillation.h"
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

// log(sum_k exp(v_k)), stably: m + log(sum_k exp(v_k - m)) with m = max_k v_k, summed in order. `values` non-empty.
template <class Compute>
Compute logsumexp(const std::vector<Compute>& values) {
  const Compute max_value = *std::max_element(values.begin(), values.end());
  Compute sum = 0;
  for (const Compute value : values) sum += std::exp(value - max_value);
  return max_value + std::log(sum);
}

// The gradient of a row's softmax cross-entropy, w (lse - z_y) + w_z lse^2 (the z-loss only with `z_loss_weight`):
// d/dz_k = w (softmax_k - [k == y]) + w_z 2 lse softmax_k, times dz_k/dx_k, stored into the row of gradients starting
// at `grad_row` with element step `column_stride`. `label_column` may lie outside the row (a vocabulary slice that
// does not hold the label). With `extra_grad_z` (another loss's d/dz_k of the row, already weighted) it is added to
// d/dz_k before the product with dz_k/dx_k (one rounding on store).
template <class Compute, class T>
void cross_entropy_gradient_row(const std::vector<Compute>& z, const std::vector<Compute>& dz_dx, Compute logsumexp,
                                int64_t label_column, Compute weight, std::optional<Compute> z_loss_weight,
                                T* grad_row, int64_t column_stride,
                                const std::vector<Compute>* extra_grad_z = nullptr) {
  for (size_t column = 0; column < z.size(); ++column) {
    const Compute softmax = std::exp(z[column] - logsumexp);
    Compute grad_z = weight * (softmax - (int64_t(column) == label_column ? Compute(1) : Compute(0)));
    if (z_loss_weight) grad_z += *z_loss_weight * Compute(2) * logsumexp * softmax;
    if (extra_grad_z != nullptr) grad_z += (*extra_grad_z)[column];
    grad_row[int64_t(column) * column_stride] = store_value<T>(grad_z * dz_dx[column]);
  }
}

// values -> log_softmax(values), in place.
template <class Compute>
void log_softmax_in_place(std::vector<Compute>& values) {
  const Compute values_logsumexp = logsumexp(values);
  for (Compute& value : values) value -= values_logsumexp;
}

// One row of the distillation loss (kernels/distillation.h), from the model's z (scaled and softcapped) and the
// teacher's row of logits `target_row` (z.size() values): t_k = target_k * `target_scale` (s / temperature, rounded to
// Compute as z is); returns the row's loss; with `grad_z`, writes d loss / dz_k times `weight` into it. The math runs in fp64 whatever Compute is: the row's sums taken one after another in fp32 round by
// up to ~length x epsilon, which at 200,003 logits moved the reverse-KL loss by 3e-4, far from the GPU's tree sums (the
// reference must be the accurate side of a comparison).
template <class Compute>
Compute distillation_row(const std::vector<Compute>& z, const double* target_row, Compute target_scale,
                         DistillationLossType loss_type, Compute weight, std::vector<Compute>* grad_z) {
  std::vector<double> log_q(z.begin(), z.end()), log_p(z.size());
  for (size_t k = 0; k < z.size(); ++k) log_p[k] = double(Compute(target_row[k]) * target_scale);
  log_softmax_in_place(log_q);
  log_softmax_in_place(log_p);
  double loss = 0;
  for (size_t k = 0; k < z.size(); ++k) {
    switch (loss_type) {
      case DistillationLossType::cross_entropy: loss -= std::exp(log_p[k]) * log_q[k]; break;
      case DistillationLossType::forward_kl: loss += std::exp(log_p[k]) * (log_p[k] - log_q[k]); break;
      case DistillationLossType::reverse_kl: loss += std::exp(log_q[k]) * (log_q[k] - log_p[k]); break;
    }
  }
  if (grad_z == nullptr) return Compute(loss);
  for (size_t k = 0; k < z.size(); ++k) {
    const double q = std::exp(log_q[k]);
    const double derivative = loss_type == DistillationLossType::reverse_kl ? q * (log_q[k] - log_p[k] - loss)
                                                                            : q - std::exp(log_p[k]);
    (*grad_z)[k] = Compute(double(weight) * derivative);
  }
  return Compute(loss);
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

// Adds the sum of `per_row` (in fp64, in row order: deterministic) to the one-element tensor `sum`.
inline void add_row_sum(const Tensor& sum, const std::vector<double>& per_row) {
  double total = 0;
  for (const double value : per_row) total += value;
  write_values<double>(sum, std::vector<double>{total}, /*accumulate=*/true);
}

}  // namespace fast_llm::kernels::cpu
