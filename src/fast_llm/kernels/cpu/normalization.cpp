// CPU reference of rms_norm and layer_norm (kernels/normalization.h).
//
// One row at a time over (rows, hidden) tensors of any strides; math in fp32 for fp32 / bf16 / fp16 inputs (rounded
// on store) and in fp64 for fp64 inputs. Weight and bias may have any floating dtype. Saved statistics are written in
// the dtype of their tensor: fp32 as the header asks, or fp64 (exact fp64 tests). Backward writes grad_input (=) and
// adds grad_weight / grad_bias (+=, fp32 or fp64); the parameter gradients are summed over rows column by column in a
// pass of their own, before grad_input is written, so the sums are deterministic. In the residual form the forward
// first writes the row of input + residual to `sum` (rounded to the dtype, as an axpy into input would) and normalises
// what it wrote; the backward adds grad_residual to the norm's gradient before rounding it.
#include "fast_llm/kernels/normalization.h"

#include <cmath>
#include <vector>

#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/kernels/cpu/reference_helpers.h"

namespace fast_llm::kernels::cpu {
namespace {

// The weight each column is multiplied by: w, 1 + w (zero_centered), or 1 without a weight.
template <class Compute>
std::vector<Compute> effective_weight(const Tensor* weight, bool zero_centered, int64_t hidden) {
  if (weight == nullptr) return std::vector<Compute>(size_t(hidden), Compute(1));
  std::vector<Compute> values = read_values<Compute>(*weight);
  if (zero_centered)
    for (Compute& value : values) value += Compute(1);
  return values;
}

// sum[row] = input[row] + residual[row], rounded to T; reads each element before writing it, so `sum` may be `input`.
template <class T>
void add_residual_row(const Tensor& input, const Tensor& residual, Tensor& sum, int64_t row) {
  using Compute = ComputeType<T>;
  const T* x = input.data_as<T>() + row * input.stride(0);
  const T* r = residual.data_as<T>() + row * residual.stride(0);
  T* s = sum.data_as<T>() + row * sum.stride(0);
  const int64_t x_column = input.stride(1), r_column = residual.stride(1), s_column = sum.stride(1);
  for (int64_t column = 0; column < input.size(1); ++column)
    s[column * s_column] = store_value<T>(Compute(load_value(x[column * x_column])) + load_value(r[column * r_column]));
}

// ---------------------------------------------------------------------------------------------------------------------
// rms_norm

void rms_norm_forward_reference(const RmsNormForwardArgs& args) {
  const int64_t rows = args.input.size(0), hidden = args.input.size(1);
  visit_floating_dtype(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const std::vector<Compute> weight = effective_weight<Compute>(args.weight, args.zero_centered, hidden);
    std::vector<Compute> inverse_rms(static_cast<size_t>(rows));
    // The rows normalised: the input, or in the residual form `sum`, each row written just before it is read.
    const Tensor& normalized = args.sum != nullptr ? *args.sum : args.input;
    const T* input = normalized.data_as<T>();  // (rows, hidden)
    T* output = args.output.data_as<T>();      // (rows, hidden)
    const int64_t input_row = normalized.stride(0), input_column = normalized.stride(1);
    const int64_t output_row = args.output.stride(0), output_column = args.output.stride(1);
#pragma omp parallel for
    for (int64_t row = 0; row < rows; ++row) {
      if (args.residual != nullptr) add_residual_row<T>(args.input, *args.residual, *args.sum, row);
      // inverse_rms = 1 / sqrt(mean(x^2) + eps);  y = x * inverse_rms * w
      Compute sum_squares = 0;
      for (int64_t column = 0; column < hidden; ++column) {
        const Compute x = load_value(input[row * input_row + column * input_column]);
        sum_squares += x * x;
      }
      const Compute inverse = Compute(1) / std::sqrt(sum_squares / Compute(hidden) + Compute(args.epsilon));
      for (int64_t column = 0; column < hidden; ++column) {
        const Compute x = load_value(input[row * input_row + column * input_column]);
        output[row * output_row + column * output_column] = store_value<T>(x * inverse * weight[size_t(column)]);
      }
      inverse_rms[size_t(row)] = inverse;
    }
    write_values<Compute>(args.inverse_rms, inverse_rms, /*accumulate=*/false);
  });
}

void rms_norm_backward_reference(const RmsNormBackwardArgs& args) {
  const int64_t rows = args.input.size(0), hidden = args.input.size(1);
  visit_floating_dtype(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const std::vector<Compute> weight = effective_weight<Compute>(args.weight, args.zero_centered, hidden);
    const std::vector<Compute> inverse_rms = read_values<Compute>(args.inverse_rms);  // (rows)
    const T* input = args.input.data_as<T>();                                         // (rows, hidden)
    const T* grad_output = args.grad_output.data_as<T>();                             // (rows, hidden)
    T* grad_input = args.grad_input.data_as<T>();                                     // (rows, hidden)
    const int64_t input_row = args.input.stride(0), input_column = args.input.stride(1);
    const int64_t grad_output_row = args.grad_output.stride(0), grad_output_column = args.grad_output.stride(1);
    const int64_t grad_input_row = args.grad_input.stride(0), grad_input_column = args.grad_input.stride(1);
    auto x_at = [&](int64_t row, int64_t column) { return load_value(input[row * input_row + column * input_column]); };
    auto g_at = [&](int64_t row, int64_t column) {
      return load_value(grad_output[row * grad_output_row + column * grad_output_column]);
    };
    // grad_input = the norm's gradient, plus grad_residual's element in the residual form.
    auto store_grad_input = [&](int64_t row, int64_t column, Compute value) {
      if (const Tensor* residual = args.grad_residual)
        value += load_value(residual->data_as<T>()[row * residual->stride(0) + column * residual->stride(1)]);
      grad_input[row * grad_input_row + column * grad_input_column] = store_value<T>(value);
    };

    // grad_w_j += sum over rows of g_j * x_j * r (the same with zero_centered: d(1 + w)/dw = 1).
    if (args.grad_weight != nullptr) {
      std::vector<Compute> grad_weight(static_cast<size_t>(hidden));
#pragma omp parallel for
      for (int64_t column = 0; column < hidden; ++column) {
        Compute sum = 0;
        for (int64_t row = 0; row < rows; ++row)
          sum += g_at(row, column) * x_at(row, column) * inverse_rms[size_t(row)];
        grad_weight[size_t(column)] = sum;
      }
      write_values<Compute>(*args.grad_weight, grad_weight, /*accumulate=*/true);
    }

    // y_j = x_j r w_j with r = (mean(x^2) + eps)^(-1/2), so dr/dx_k = -r^3 x_k / n and
    //   grad_x_k = r (g_k w_k - x_k r^2 mean_j(g_j w_j x_j)).
#pragma omp parallel for
    for (int64_t row = 0; row < rows; ++row) {
      const Compute r = inverse_rms[size_t(row)];
      Compute sum_gwx = 0;
      for (int64_t column = 0; column < hidden; ++column)
        sum_gwx += g_at(row, column) * weight[size_t(column)] * x_at(row, column);
      const Compute mean_gwx = sum_gwx / Compute(hidden);
      for (int64_t column = 0; column < hidden; ++column) {
        const Compute value = r * (g_at(row, column) * weight[size_t(column)] - x_at(row, column) * r * r * mean_gwx);
        store_grad_input(row, column, value);
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------------
// layer_norm

void layer_norm_forward_reference(const LayerNormForwardArgs& args) {
  const int64_t rows = args.input.size(0), hidden = args.input.size(1);
  visit_floating_dtype(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const std::vector<Compute> weight = effective_weight<Compute>(args.weight, args.zero_centered, hidden);
    const std::vector<Compute> bias =
        args.bias != nullptr ? read_values<Compute>(*args.bias) : std::vector<Compute>(size_t(hidden), Compute(0));
    std::vector<Compute> means(static_cast<size_t>(rows)), inverse_stds(static_cast<size_t>(rows));
    // The rows normalised: the input, or in the residual form `sum`, each row written just before it is read.
    const Tensor& normalized = args.sum != nullptr ? *args.sum : args.input;
    const T* input = normalized.data_as<T>();  // (rows, hidden)
    T* output = args.output.data_as<T>();      // (rows, hidden)
    const int64_t input_row = normalized.stride(0), input_column = normalized.stride(1);
    const int64_t output_row = args.output.stride(0), output_column = args.output.stride(1);
#pragma omp parallel for
    for (int64_t row = 0; row < rows; ++row) {
      if (args.residual != nullptr) add_residual_row<T>(args.input, *args.residual, *args.sum, row);
      // mean = sum(x) / n;  var = sum((x - mean)^2) / n (biased);  s = 1 / sqrt(var + eps);  y = (x - mean) s w + b
      Compute sum = 0;
      for (int64_t column = 0; column < hidden; ++column)
        sum += load_value(input[row * input_row + column * input_column]);
      const Compute mean = sum / Compute(hidden);
      Compute sum_squares = 0;
      for (int64_t column = 0; column < hidden; ++column) {
        const Compute centered = load_value(input[row * input_row + column * input_column]) - mean;
        sum_squares += centered * centered;
      }
      const Compute inverse_std = Compute(1) / std::sqrt(sum_squares / Compute(hidden) + Compute(args.epsilon));
      for (int64_t column = 0; column < hidden; ++column) {
        const Compute normalized = (load_value(input[row * input_row + column * input_column]) - mean) * inverse_std;
        output[row * output_row + column * output_column] =
            store_value<T>(normalized * weight[size_t(column)] + bias[size_t(column)]);
      }
      means[size_t(row)] = mean;
      inverse_stds[size_t(row)] = inverse_std;
    }
    write_values<Compute>(args.mean, means, /*accumulate=*/false);
    write_values<Compute>(args.inverse_std, inverse_stds, /*accumulate=*/false);
  });
}

void layer_norm_backward_reference(const LayerNormBackwardArgs& args) {
  const int64_t rows = args.input.size(0), hidden = args.input.size(1);
  visit_floating_dtype(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const std::vector<Compute> weight = effective_weight<Compute>(args.weight, args.zero_centered, hidden);
    const std::vector<Compute> means = read_values<Compute>(args.mean);                // (rows)
    const std::vector<Compute> inverse_stds = read_values<Compute>(args.inverse_std);  // (rows)
    const T* input = args.input.data_as<T>();                                          // (rows, hidden)
    const T* grad_output = args.grad_output.data_as<T>();                              // (rows, hidden)
    T* grad_input = args.grad_input.data_as<T>();                                      // (rows, hidden)
    const int64_t input_row = args.input.stride(0), input_column = args.input.stride(1);
    const int64_t grad_output_row = args.grad_output.stride(0), grad_output_column = args.grad_output.stride(1);
    const int64_t grad_input_row = args.grad_input.stride(0), grad_input_column = args.grad_input.stride(1);
    // xhat = (x - mean) s
    auto normalized_at = [&](int64_t row, int64_t column) {
      return (load_value(input[row * input_row + column * input_column]) - means[size_t(row)]) *
             inverse_stds[size_t(row)];
    };
    auto g_at = [&](int64_t row, int64_t column) {
      return load_value(grad_output[row * grad_output_row + column * grad_output_column]);
    };
    // grad_input = the norm's gradient, plus grad_residual's element in the residual form.
    auto store_grad_input = [&](int64_t row, int64_t column, Compute value) {
      if (const Tensor* residual = args.grad_residual)
        value += load_value(residual->data_as<T>()[row * residual->stride(0) + column * residual->stride(1)]);
      grad_input[row * grad_input_row + column * grad_input_column] = store_value<T>(value);
    };

    // grad_w += sum over rows of g xhat;  grad_b += sum over rows of g.
    if (args.grad_weight != nullptr || args.grad_bias != nullptr) {
      std::vector<Compute> grad_weight(static_cast<size_t>(hidden)), grad_bias(static_cast<size_t>(hidden));
#pragma omp parallel for
      for (int64_t column = 0; column < hidden; ++column) {
        Compute sum_g_normalized = 0, sum_g = 0;
        for (int64_t row = 0; row < rows; ++row) {
          sum_g_normalized += g_at(row, column) * normalized_at(row, column);
          sum_g += g_at(row, column);
        }
        grad_weight[size_t(column)] = sum_g_normalized;
        grad_bias[size_t(column)] = sum_g;
      }
      if (args.grad_weight != nullptr) write_values<Compute>(*args.grad_weight, grad_weight, /*accumulate=*/true);
      if (args.grad_bias != nullptr) write_values<Compute>(*args.grad_bias, grad_bias, /*accumulate=*/true);
    }

    // y = xhat w + b with xhat = (x - mean) s. With h = g w:
    //   grad_x = s (h - mean(h) - xhat mean(h xhat)).
#pragma omp parallel for
    for (int64_t row = 0; row < rows; ++row) {
      Compute sum_h = 0, sum_h_normalized = 0;
      for (int64_t column = 0; column < hidden; ++column) {
        const Compute h = g_at(row, column) * weight[size_t(column)];
        sum_h += h;
        sum_h_normalized += h * normalized_at(row, column);
      }
      const Compute mean_h = sum_h / Compute(hidden), mean_h_normalized = sum_h_normalized / Compute(hidden);
      for (int64_t column = 0; column < hidden; ++column) {
        const Compute h = g_at(row, column) * weight[size_t(column)];
        const Compute value = inverse_stds[size_t(row)] * (h - mean_h - normalized_at(row, column) * mean_h_normalized);
        store_grad_input(row, column, value);
      }
    }
  });
}

}  // namespace

FLM_REGISTER_KERNEL(RmsNormForward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &rms_norm_forward_reference, "plain loops, one row at a time; fp32 math (fp64 for fp64 inputs)");
FLM_REGISTER_KERNEL(RmsNormBackward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &rms_norm_backward_reference, "plain loops; grad_weight summed column by column (deterministic)");
FLM_REGISTER_KERNEL(LayerNormForward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &layer_norm_forward_reference,
                    "plain loops, two-pass mean and variance; fp32 math (fp64 for fp64 inputs)");
FLM_REGISTER_KERNEL(LayerNormBackward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &layer_norm_backward_reference,
                    "plain loops; grad_weight and grad_bias summed column by column (deterministic)");

}  // namespace fast_llm::kernels::cpu
