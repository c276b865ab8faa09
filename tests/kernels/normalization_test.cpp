// Tests of the CPU reference rms_norm / layer_norm (kernels/cpu/normalization.cpp): forward against hand-computed
// values and a naive formula written here, backward against central finite differences in fp64 for every option,
// 16-bit and fp32 inputs against fp64, strided rows, the residual form against the axpys and plain ops it replaces,
// and errors.
#include "fast_llm/kernels/normalization.h"

#include <gtest/gtest.h>

#include <cmath>

#include "fast_llm/kernels/pointwise.h"

#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

// ---------------------------------------------------------------------------------------------------------------------
// Independent formulas, in double, on row-major values.

std::vector<double> naive_rms_norm(const std::vector<double>& x, int64_t rows, int64_t hidden,
                                   const std::vector<double>* weight, double epsilon, bool zero_centered) {
  std::vector<double> y(x.size());
  for (int64_t row = 0; row < rows; ++row) {
    double mean_square = 0;
    for (int64_t column = 0; column < hidden; ++column) mean_square += std::pow(x[size_t(row * hidden + column)], 2);
    mean_square /= double(hidden);
    const double rms = std::sqrt(mean_square + epsilon);
    for (int64_t column = 0; column < hidden; ++column) {
      const double w = weight ? (*weight)[size_t(column)] + (zero_centered ? 1.0 : 0.0) : 1.0;
      y[size_t(row * hidden + column)] = x[size_t(row * hidden + column)] / rms * w;
    }
  }
  return y;
}

std::vector<double> naive_layer_norm(const std::vector<double>& x, int64_t rows, int64_t hidden,
                                     const std::vector<double>* weight, const std::vector<double>* bias, double epsilon,
                                     bool zero_centered) {
  std::vector<double> y(x.size());
  for (int64_t row = 0; row < rows; ++row) {
    const double* values = x.data() + row * hidden;
    double mean = 0;
    for (int64_t column = 0; column < hidden; ++column) mean += values[column] / double(hidden);
    double variance = 0;
    for (int64_t column = 0; column < hidden; ++column) variance += std::pow(values[column] - mean, 2) / double(hidden);
    for (int64_t column = 0; column < hidden; ++column) {
      const double w = weight ? (*weight)[size_t(column)] + (zero_centered ? 1.0 : 0.0) : 1.0;
      const double b = bias ? (*bias)[size_t(column)] : 0.0;
      y[size_t(row * hidden + column)] = (values[column] - mean) / std::sqrt(variance + epsilon) * w + b;
    }
  }
  return y;
}

// ---------------------------------------------------------------------------------------------------------------------
// Calls of the reference variant.

void rms_forward(const Tensor& input, const Tensor* weight, const Tensor& output, const Tensor& inverse_rms,
                 double epsilon, bool zero_centered) {
  Tensor output_handle = output, inverse_rms_handle = inverse_rms;
  run_reference<RmsNormForward>({.input = input,
                                 .weight = weight,
                                 .output = output_handle,
                                 .inverse_rms = inverse_rms_handle,
                                 .epsilon = epsilon,
                                 .zero_centered = zero_centered});
}

void rms_backward(const Tensor& grad_output, const Tensor& input, const Tensor* weight, const Tensor& inverse_rms,
                  const Tensor& grad_input, Tensor* grad_weight, bool zero_centered) {
  Tensor grad_input_handle = grad_input;
  run_reference<RmsNormBackward>({.grad_output = grad_output,
                                  .input = input,
                                  .weight = weight,
                                  .inverse_rms = inverse_rms,
                                  .grad_input = grad_input_handle,
                                  .grad_weight = grad_weight,
                                  .zero_centered = zero_centered});
}

void layer_forward(const Tensor& input, const Tensor* weight, const Tensor* bias, const Tensor& output,
                   const Tensor& mean, const Tensor& inverse_std, double epsilon, bool zero_centered) {
  Tensor output_handle = output, mean_handle = mean, inverse_std_handle = inverse_std;
  run_reference<LayerNormForward>({.input = input,
                                   .weight = weight,
                                   .bias = bias,
                                   .output = output_handle,
                                   .mean = mean_handle,
                                   .inverse_std = inverse_std_handle,
                                   .epsilon = epsilon,
                                   .zero_centered = zero_centered});
}

void layer_backward(const Tensor& grad_output, const Tensor& input, const Tensor* weight, const Tensor& mean,
                    const Tensor& inverse_std, const Tensor& grad_input, Tensor* grad_weight, Tensor* grad_bias,
                    bool zero_centered) {
  Tensor grad_input_handle = grad_input;
  run_reference<LayerNormBackward>({.grad_output = grad_output,
                                    .input = input,
                                    .weight = weight,
                                    .mean = mean,
                                    .inverse_std = inverse_std,
                                    .grad_input = grad_input_handle,
                                    .grad_weight = grad_weight,
                                    .grad_bias = grad_bias,
                                    .zero_centered = zero_centered});
}

std::vector<double> plus(std::vector<double> values, double offset) {
  for (double& value : values) value += offset;
  return values;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------------------------------
// rms_norm

TEST(RmsNormReference, ForwardHandChecked) {
  // Row 0: mean(x^2) = 4, 1/rms = 0.5.  Row 1: mean(x^2) = (9 + 16) / 4 = 6.25, 1/rms = 0.4.
  for (DType dtype : {DType::float64, DType::float32, DType::bfloat16, DType::float16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor input = make_tensor({2, -2, 2, -2, 3, 4, 0, 0}, Shape{2, 4}, dtype);
    Tensor weight = make_tensor({1, 2, 0.5, -1}, Shape{4}, DType::float32);
    Tensor output = filled(Shape{2, 4}, dtype, kNaN), inverse_rms = filled(Shape{2}, DType::float32, kNaN);
    rms_forward(input, &weight, output, inverse_rms, /*epsilon=*/0, /*zero_centered=*/false);
    expect_near(output, {1, -2, 0.5, 1, 1.2, 3.2, 0, 0}, 0, dtype_tolerance(dtype), "output");
    expect_near(inverse_rms, {0.5, 0.4}, 0, 1e-7, "inverse_rms");

    // zero_centered: the effective weight is 1 + w, so w - 1 gives the same result.
    Tensor shifted_weight = make_tensor({0, 1, -0.5, -2}, Shape{4}, DType::float32);
    rms_forward(input, &shifted_weight, output, inverse_rms, 0, /*zero_centered=*/true);
    expect_near(output, {1, -2, 0.5, 1, 1.2, 3.2, 0, 0}, 0, dtype_tolerance(dtype), "zero-centered output");

    // No weight; epsilon 12 makes row 0's 1/rms = 1 / sqrt(4 + 12) = 0.25.
    rms_forward(input, nullptr, output, inverse_rms, /*epsilon=*/12, false);
    expect_near(output, {0.5, -0.5, 0.5, -0.5, 3 / std::sqrt(18.25), 4 / std::sqrt(18.25), 0, 0}, 0,
                dtype_tolerance(dtype), "output without weight");
    expect_near(inverse_rms, {0.25, 1 / std::sqrt(18.25)}, 0, 1e-7, "inverse_rms with epsilon");
  }
}

TEST(RmsNormReference, ForwardMatchesNaiveFormulaOnStridedRows) {
  const int64_t rows = 6, hidden = 7;
  // Rows of a wider buffer (row stride 10) and an output that is a transposed view (column stride 6).
  Tensor wide_input = random_tensor(Shape{rows, 10}, DType::float64, 11);
  Tensor input = wide_input.slice(1, 2, 2 + hidden);
  Tensor weight = random_tensor(Shape{hidden}, DType::float64, 12);
  Tensor output_storage = filled(Shape{hidden, rows}, DType::float64, kNaN);
  Tensor output = output_storage.transpose(0, 1);
  Tensor inverse_rms = filled(Shape{rows}, DType::float64, kNaN);
  ASSERT_FALSE(input.is_contiguous());
  ASSERT_FALSE(output.is_contiguous());
  for (bool zero_centered : {false, true}) {
    rms_forward(input, &weight, output, inverse_rms, 1e-3, zero_centered);
    std::vector<double> weight_values = values_of(weight);
    expect_near(output, naive_rms_norm(values_of(input), rows, hidden, &weight_values, 1e-3, zero_centered), 1e-14,
                1e-12, "output");
  }
}

TEST(RmsNormReference, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 4, hidden = 6;
  const double epsilon = 0.1;  // large enough that misplacing it would show
  for (bool has_weight : {true, false}) {
    for (bool zero_centered : {false, true}) {
      SCOPED_TRACE(fmt::format("weight {}, zero_centered {}", has_weight, zero_centered));
      Tensor input = random_tensor(Shape{rows, hidden}, DType::float64, 1);
      Tensor weight = random_tensor(Shape{hidden}, DType::float64, 2, 0.5, 1.5);
      const Tensor* weight_pointer = has_weight ? &weight : nullptr;
      Tensor probe = random_tensor(Shape{rows, hidden}, DType::float64, 3);
      const std::vector<double> probe_values = values_of(probe);
      Tensor output = filled(Shape{rows, hidden}, DType::float64, kNaN);
      Tensor inverse_rms = filled(Shape{rows}, DType::float64, kNaN);
      // loss = sum(y * probe), so dloss/dy = probe.
      auto loss = [&] {
        rms_forward(input, weight_pointer, output, inverse_rms, epsilon, zero_centered);
        return dot(values_of(output), probe_values);
      };
      const std::vector<double> expected_grad_input = finite_difference_gradient(input, loss);
      const std::vector<double> expected_grad_weight = finite_difference_gradient(weight, loss);

      loss();  // leaves the statistics of the unperturbed input
      Tensor grad_input = filled(Shape{rows, hidden}, DType::float64, kNaN);
      Tensor grad_weight = filled(Shape{hidden}, DType::float64, 0.25);  // += onto 0.25
      rms_backward(probe, input, weight_pointer, inverse_rms, grad_input, has_weight ? &grad_weight : nullptr,
                   zero_centered);
      expect_near(grad_input, expected_grad_input, 1e-8, 1e-7, "grad_input");
      if (has_weight) expect_near(grad_weight, plus(expected_grad_weight, 0.25), 1e-8, 1e-7, "grad_weight");
    }
  }
}

TEST(RmsNormReference, BackwardWithFloat32StatisticsAndGradients) {
  // The header's layout: fp32 inverse_rms and an fp32 gradient buffer, here with fp64 activations.
  const int64_t rows = 3, hidden = 5;
  Tensor input = random_tensor(Shape{rows, hidden}, DType::float64, 21);
  Tensor weight = random_tensor(Shape{hidden}, DType::float64, 22);
  Tensor probe = random_tensor(Shape{rows, hidden}, DType::float64, 23);
  Tensor output = filled(Shape{rows, hidden}, DType::float64, kNaN);
  Tensor inverse_rms = filled(Shape{rows}, DType::float32, kNaN);
  auto loss = [&] {
    rms_forward(input, &weight, output, inverse_rms, 1e-5, false);
    return dot(values_of(output), values_of(probe));
  };
  const std::vector<double> expected_grad_input = finite_difference_gradient(input, loss);
  const std::vector<double> expected_grad_weight = finite_difference_gradient(weight, loss);
  loss();
  Tensor grad_input = filled(Shape{rows, hidden}, DType::float64, kNaN);
  Tensor grad_weight = filled(Shape{hidden}, DType::float32, 0);
  rms_backward(probe, input, &weight, inverse_rms, grad_input, &grad_weight, false);
  expect_near(grad_input, expected_grad_input, 1e-6, 1e-6, "grad_input");
  expect_near(grad_weight, expected_grad_weight, 1e-6, 1e-6, "grad_weight");
}

TEST(RmsNormReference, LowPrecisionMatchesFloat64) {
  const int64_t rows = 8, hidden = 32;
  for (DType dtype : kLowPrecisionDTypes) {
    for (bool zero_centered : {false, true}) {
      SCOPED_TRACE(fmt::format("{}, zero_centered {}", dtype_name(dtype), zero_centered));
      // Inputs drawn in the low precision dtype, so the fp64 run sees exactly the same values.
      Tensor input = random_tensor(Shape{rows, hidden}, dtype, 31);
      Tensor grad_output = random_tensor(Shape{rows, hidden}, dtype, 32);
      Tensor weight = random_tensor(Shape{hidden}, DType::float32, 33);
      Tensor input64 = converted(input, DType::float64), grad_output64 = converted(grad_output, DType::float64);

      Tensor output = Tensor::empty(Shape{rows, hidden}, dtype),
             inverse_rms = Tensor::empty(Shape{rows}, DType::float32);
      Tensor output64 = Tensor::empty(Shape{rows, hidden}, DType::float64);
      Tensor inverse_rms64 = Tensor::empty(Shape{rows}, DType::float64);
      rms_forward(input, &weight, output, inverse_rms, 1e-5, zero_centered);
      rms_forward(input64, &weight, output64, inverse_rms64, 1e-5, zero_centered);
      const double tolerance = dtype_tolerance(dtype);
      expect_near(output, values_of(output64), tolerance, tolerance, "output");
      expect_near(inverse_rms, values_of(inverse_rms64), 0, 1e-6, "inverse_rms");

      Tensor grad_input = Tensor::empty(Shape{rows, hidden}, dtype);
      Tensor grad_input64 = Tensor::empty(Shape{rows, hidden}, DType::float64);
      Tensor grad_weight = filled(Shape{hidden}, DType::float32, 0);
      Tensor grad_weight64 = filled(Shape{hidden}, DType::float64, 0);
      rms_backward(grad_output, input, &weight, inverse_rms, grad_input, &grad_weight, zero_centered);
      rms_backward(grad_output64, input64, &weight, inverse_rms64, grad_input64, &grad_weight64, zero_centered);
      expect_near(grad_input, values_of(grad_input64), tolerance, tolerance, "grad_input");
      expect_near(grad_weight, values_of(grad_weight64), 1e-5, 1e-5, "grad_weight");
    }
  }
}

TEST(RmsNormReference, ShapeErrors) {
  Tensor input = random_tensor(Shape{2, 4}, DType::float32, 41);
  Tensor output = Tensor::empty(Shape{2, 4}, DType::float32), inverse_rms = Tensor::empty(Shape{2}, DType::float32);
  Tensor short_weight = Tensor::empty(Shape{3}, DType::float32);
  expect_error(
      [&] {
        rms_norm_forward({.input = input, .weight = &short_weight, .output = output, .inverse_rms = inverse_rms});
      },
      "[rms_norm_forward] weight has shape (3), expected (4)");
  Tensor wrong_output = Tensor::empty(Shape{4, 2}, DType::float32);
  expect_error(
      [&] {
        rms_norm_forward({.input = input, .weight = nullptr, .output = wrong_output, .inverse_rms = inverse_rms});
      },
      "[rms_norm_forward] output has shape (4, 2), expected (2, 4)");
  Tensor wrong_statistics = Tensor::empty(Shape{4}, DType::float32);
  expect_error(
      [&] { rms_norm_forward({.input = input, .weight = nullptr, .output = output, .inverse_rms = wrong_statistics}); },
      "[rms_norm_forward] inverse_rms has shape (4), expected (2)");
  Tensor input3 = Tensor::empty(Shape{2, 2, 4}, DType::float32);
  expect_error(
      [&] { rms_norm_forward({.input = input3, .weight = nullptr, .output = output, .inverse_rms = inverse_rms}); },
      "[rms_norm_forward] input has shape (2, 2, 4), expected (rows, hidden)");

  Tensor grad_input = Tensor::empty(Shape{2, 4}, DType::float32), grad_weight = Tensor::empty(Shape{4}, DType::float32);
  expect_error(
      [&] {
        rms_norm_backward({.grad_output = input,
                           .input = input,
                           .weight = nullptr,
                           .inverse_rms = inverse_rms,
                           .grad_input = grad_input,
                           .grad_weight = &grad_weight});
      },
      "[rms_norm_backward] grad_weight is given without a weight");
  Tensor short_grad_output = Tensor::empty(Shape{1, 4}, DType::float32);
  expect_error(
      [&] {
        rms_norm_backward({.grad_output = short_grad_output,
                           .input = input,
                           .weight = nullptr,
                           .inverse_rms = inverse_rms,
                           .grad_input = grad_input,
                           .grad_weight = nullptr});
      },
      "[rms_norm_backward] grad_output has shape (1, 4), expected (2, 4)");
}

TEST(RmsNormReference, DtypeErrors) {
  Tensor input = Tensor::empty(Shape{2, 4}, DType::float32), output = Tensor::empty(Shape{2, 4}, DType::float32);
  Tensor int_input = Tensor::empty(Shape{2, 4}, DType::int32);
  Tensor inverse_rms = Tensor::empty(Shape{2}, DType::float32),
         bf16_statistics = Tensor::empty(Shape{2}, DType::bfloat16);
  expect_error(
      [&] { rms_norm_forward({.input = int_input, .weight = nullptr, .output = output, .inverse_rms = inverse_rms}); },
      "[rms_norm_forward] input has dtype int32; supported: float32, float64, bfloat16, float16");
  expect_error(
      [&] { rms_norm_forward({.input = input, .weight = nullptr, .output = output, .inverse_rms = bf16_statistics}); },
      "[rms_norm_forward] inverse_rms has dtype bfloat16; supported: float32, float64");
  Tensor bf16_output = Tensor::empty(Shape{2, 4}, DType::bfloat16);
  expect_error(
      [&] { rms_norm_forward({.input = input, .weight = nullptr, .output = bf16_output, .inverse_rms = inverse_rms}); },
      "[rms_norm_forward] output has dtype bfloat16, input has float32; they must match");

  Tensor weight = Tensor::empty(Shape{4}, DType::float32), bf16_grad_weight = Tensor::empty(Shape{4}, DType::bfloat16);
  expect_error(
      [&] {
        rms_norm_backward({.grad_output = input,
                           .input = input,
                           .weight = &weight,
                           .inverse_rms = inverse_rms,
                           .grad_input = output,
                           .grad_weight = &bf16_grad_weight});
      },
      "[rms_norm_backward] grad_weight has dtype bfloat16; supported: float32, float64");
}

// The reference takes every call the contract allows: it declines nothing.
TEST(NormalizationReference, SupportsTheWholeContract) {
  EXPECT_EQ(reference_variant<RmsNormForward>().supports, nullptr);
  EXPECT_EQ(reference_variant<RmsNormBackward>().supports, nullptr);
  EXPECT_EQ(reference_variant<LayerNormForward>().supports, nullptr);
  EXPECT_EQ(reference_variant<LayerNormBackward>().supports, nullptr);
}

// ---------------------------------------------------------------------------------------------------------------------
// layer_norm

TEST(LayerNormReference, ForwardHandChecked) {
  // Row 0: mean 2, var 1.  Row 1: mean 2, var 4.  With epsilon 0: xhat = [-1, 1, -1, 1] and [-1, -1, 1, 1].
  for (DType dtype : {DType::float64, DType::float32, DType::bfloat16, DType::float16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor input = make_tensor({1, 3, 1, 3, 0, 0, 4, 4}, Shape{2, 4}, dtype);
    Tensor weight = make_tensor({1, 2, 3, 4}, Shape{4}, DType::float32);
    Tensor bias = make_tensor({0.5, 0, -0.5, 1}, Shape{4}, DType::float32);
    Tensor output = filled(Shape{2, 4}, dtype, kNaN);
    Tensor mean = filled(Shape{2}, DType::float32, kNaN), inverse_std = filled(Shape{2}, DType::float32, kNaN);
    layer_forward(input, &weight, &bias, output, mean, inverse_std, 0, false);
    expect_near(output, {-0.5, 2, -3.5, 5, -0.5, -2, 2.5, 5}, 0, dtype_tolerance(dtype), "output");
    expect_near(mean, {2, 2}, 0, 1e-7, "mean");
    expect_near(inverse_std, {1, 0.5}, 0, 1e-7, "inverse_std");

    Tensor shifted_weight = make_tensor({0, 1, 2, 3}, Shape{4}, DType::float32);
    layer_forward(input, &shifted_weight, &bias, output, mean, inverse_std, 0, /*zero_centered=*/true);
    expect_near(output, {-0.5, 2, -3.5, 5, -0.5, -2, 2.5, 5}, 0, dtype_tolerance(dtype), "zero-centered output");

    // No weight, no bias; epsilon 3: 1/std = 1 / sqrt(1 + 3) = 0.5 and 1 / sqrt(4 + 3).
    layer_forward(input, nullptr, nullptr, output, mean, inverse_std, 3, false);
    const double s = 1 / std::sqrt(7.0);
    expect_near(output, {-0.5, 0.5, -0.5, 0.5, -2 * s, -2 * s, 2 * s, 2 * s}, 0, dtype_tolerance(dtype),
                "output without weight and bias");
    expect_near(inverse_std, {0.5, s}, 0, 1e-7, "inverse_std with epsilon");
  }
}

TEST(LayerNormReference, ForwardMatchesNaiveFormulaOnStridedRows) {
  const int64_t rows = 5, hidden = 9;
  Tensor wide_input = random_tensor(Shape{rows, 12}, DType::float64, 51, -2, 3);
  Tensor input = wide_input.slice(1, 3, 3 + hidden);
  Tensor weight = random_tensor(Shape{hidden}, DType::float64, 52);
  Tensor bias = random_tensor(Shape{hidden}, DType::float64, 53);
  Tensor output = filled(Shape{rows, hidden}, DType::float64, kNaN);
  Tensor mean = Tensor::empty(Shape{rows}, DType::float64), inverse_std = Tensor::empty(Shape{rows}, DType::float64);
  ASSERT_FALSE(input.is_contiguous());
  for (bool zero_centered : {false, true}) {
    layer_forward(input, &weight, &bias, output, mean, inverse_std, 1e-2, zero_centered);
    std::vector<double> weight_values = values_of(weight), bias_values = values_of(bias);
    expect_near(output,
                naive_layer_norm(values_of(input), rows, hidden, &weight_values, &bias_values, 1e-2, zero_centered),
                1e-14, 1e-12, "output");
  }
}

TEST(LayerNormReference, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 4, hidden = 6;
  const double epsilon = 0.1;
  for (bool has_weight : {true, false}) {
    for (bool has_bias : {true, false}) {
      for (bool zero_centered : {false, true}) {
        SCOPED_TRACE(fmt::format("weight {}, bias {}, zero_centered {}", has_weight, has_bias, zero_centered));
        Tensor input = random_tensor(Shape{rows, hidden}, DType::float64, 61, -1, 2);
        Tensor weight = random_tensor(Shape{hidden}, DType::float64, 62, 0.5, 1.5);
        Tensor bias = random_tensor(Shape{hidden}, DType::float64, 63);
        const Tensor* weight_pointer = has_weight ? &weight : nullptr;
        const Tensor* bias_pointer = has_bias ? &bias : nullptr;
        Tensor probe = random_tensor(Shape{rows, hidden}, DType::float64, 64);
        const std::vector<double> probe_values = values_of(probe);
        Tensor output = filled(Shape{rows, hidden}, DType::float64, kNaN);
        Tensor mean = filled(Shape{rows}, DType::float64, kNaN),
               inverse_std = filled(Shape{rows}, DType::float64, kNaN);
        auto loss = [&] {
          layer_forward(input, weight_pointer, bias_pointer, output, mean, inverse_std, epsilon, zero_centered);
          return dot(values_of(output), probe_values);
        };
        const std::vector<double> expected_grad_input = finite_difference_gradient(input, loss);
        const std::vector<double> expected_grad_weight = finite_difference_gradient(weight, loss);
        const std::vector<double> expected_grad_bias = finite_difference_gradient(bias, loss);

        loss();
        Tensor grad_input = filled(Shape{rows, hidden}, DType::float64, kNaN);
        Tensor grad_weight = filled(Shape{hidden}, DType::float64, 0.25);
        Tensor grad_bias = filled(Shape{hidden}, DType::float64, -0.5);
        layer_backward(probe, input, weight_pointer, mean, inverse_std, grad_input, has_weight ? &grad_weight : nullptr,
                       has_bias ? &grad_bias : nullptr, zero_centered);
        expect_near(grad_input, expected_grad_input, 1e-8, 1e-7, "grad_input");
        if (has_weight) expect_near(grad_weight, plus(expected_grad_weight, 0.25), 1e-8, 1e-7, "grad_weight");
        if (has_bias) expect_near(grad_bias, plus(expected_grad_bias, -0.5), 1e-8, 1e-7, "grad_bias");
      }
    }
  }
}

TEST(LayerNormReference, LowPrecisionMatchesFloat64) {
  const int64_t rows = 8, hidden = 32;
  for (DType dtype : kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor input = random_tensor(Shape{rows, hidden}, dtype, 71, -1, 2);
    Tensor grad_output = random_tensor(Shape{rows, hidden}, dtype, 72);
    Tensor weight = random_tensor(Shape{hidden}, DType::float32, 73);
    Tensor bias = random_tensor(Shape{hidden}, DType::float32, 74);
    Tensor input64 = converted(input, DType::float64), grad_output64 = converted(grad_output, DType::float64);

    Tensor output = Tensor::empty(Shape{rows, hidden}, dtype);
    Tensor mean = Tensor::empty(Shape{rows}, DType::float32), inverse_std = Tensor::empty(Shape{rows}, DType::float32);
    Tensor output64 = Tensor::empty(Shape{rows, hidden}, DType::float64);
    Tensor mean64 = Tensor::empty(Shape{rows}, DType::float64);
    Tensor inverse_std64 = Tensor::empty(Shape{rows}, DType::float64);
    layer_forward(input, &weight, &bias, output, mean, inverse_std, 1e-5, false);
    layer_forward(input64, &weight, &bias, output64, mean64, inverse_std64, 1e-5, false);
    const double tolerance = dtype_tolerance(dtype);
    expect_near(output, values_of(output64), tolerance, tolerance, "output");
    expect_near(mean, values_of(mean64), 1e-6, 1e-6, "mean");
    expect_near(inverse_std, values_of(inverse_std64), 0, 1e-6, "inverse_std");

    Tensor grad_input = Tensor::empty(Shape{rows, hidden}, dtype);
    Tensor grad_input64 = Tensor::empty(Shape{rows, hidden}, DType::float64);
    Tensor grad_weight = filled(Shape{hidden}, DType::float32, 0), grad_bias = filled(Shape{hidden}, DType::float32, 0);
    Tensor grad_weight64 = filled(Shape{hidden}, DType::float64, 0);
    Tensor grad_bias64 = filled(Shape{hidden}, DType::float64, 0);
    layer_backward(grad_output, input, &weight, mean, inverse_std, grad_input, &grad_weight, &grad_bias, false);
    layer_backward(grad_output64, input64, &weight, mean64, inverse_std64, grad_input64, &grad_weight64, &grad_bias64,
                   false);
    expect_near(grad_input, values_of(grad_input64), tolerance, tolerance, "grad_input");
    expect_near(grad_weight, values_of(grad_weight64), 1e-5, 1e-5, "grad_weight");
    expect_near(grad_bias, values_of(grad_bias64), 1e-5, 1e-5, "grad_bias");
  }
}

TEST(LayerNormReference, ShapeErrors) {
  Tensor input = random_tensor(Shape{3, 4}, DType::float32, 81);
  Tensor output = Tensor::empty(Shape{3, 4}, DType::float32);
  Tensor mean = Tensor::empty(Shape{3}, DType::float32), inverse_std = Tensor::empty(Shape{3}, DType::float32);
  Tensor long_bias = Tensor::empty(Shape{5}, DType::float32);
  expect_error(
      [&] {
        layer_norm_forward({.input = input,
                            .weight = nullptr,
                            .bias = &long_bias,
                            .output = output,
                            .mean = mean,
                            .inverse_std = inverse_std});
      },
      "[layer_norm_forward] bias has shape (5), expected (4)");
  Tensor short_mean = Tensor::empty(Shape{2}, DType::float32);
  expect_error(
      [&] {
        layer_norm_forward({.input = input,
                            .weight = nullptr,
                            .bias = nullptr,
                            .output = output,
                            .mean = short_mean,
                            .inverse_std = inverse_std});
      },
      "[layer_norm_forward] mean has shape (2), expected (3)");
  Tensor empty_rows = Tensor::empty(Shape{3, 0}, DType::float32);
  expect_error(
      [&] {
        layer_norm_forward({.input = empty_rows,
                            .weight = nullptr,
                            .bias = nullptr,
                            .output = empty_rows,
                            .mean = mean,
                            .inverse_std = inverse_std});
      },
      "[layer_norm_forward] input has shape (3, 0): hidden size must be positive");

  Tensor grad_input = Tensor::empty(Shape{3, 4}, DType::float32), grad_bias = Tensor::empty(Shape{3}, DType::float32);
  expect_error(
      [&] {
        layer_norm_backward({.grad_output = input,
                             .input = input,
                             .weight = nullptr,
                             .mean = mean,
                             .inverse_std = inverse_std,
                             .grad_input = grad_input,
                             .grad_weight = nullptr,
                             .grad_bias = &grad_bias});
      },
      "[layer_norm_backward] grad_bias has shape (3), expected (4)");
}

// ---------------------------------------------------------------------------------------------------------------------
// Residual form

// What the residual form replaces, done step by step: sum = input + residual (an axpy), the plain forward of the sum,
// the plain backward, then grad_input += grad_residual (an axpy).
struct SteppedNorm {
  Tensor sum, output, first_statistic, second_statistic, grad_input, grad_weight, grad_bias;
};

SteppedNorm stepped_norm(bool layer_norm, const Tensor& input, const Tensor& residual, const Tensor& weight,
                         const Tensor& bias, const Tensor& grad_output, const Tensor& grad_residual) {
  const Shape rows{input.size(0)}, hidden{input.size(1)};
  SteppedNorm result{.sum = converted(input, input.dtype()),
                     .output = filled(input.shape(), input.dtype(), kNaN),
                     .first_statistic = filled(rows, DType::float32, kNaN),
                     .second_statistic = filled(rows, DType::float32, kNaN),
                     .grad_input = filled(input.shape(), input.dtype(), kNaN),
                     .grad_weight = filled(hidden, DType::float32, 0.5),
                     .grad_bias = filled(hidden, DType::float32, 0.5)};
  axpy({.input = residual, .output = result.sum});
  if (layer_norm) {
    layer_forward(result.sum, &weight, &bias, result.output, result.first_statistic, result.second_statistic, 1e-5,
                  false);
    layer_backward(grad_output, result.sum, &weight, result.first_statistic, result.second_statistic,
                   result.grad_input, &result.grad_weight, &result.grad_bias, false);
  } else {
    rms_forward(result.sum, &weight, result.output, result.first_statistic, 1e-5, false);
    rms_backward(grad_output, result.sum, &weight, result.first_statistic, result.grad_input, &result.grad_weight,
                 false);
  }
  axpy({.input = grad_residual, .output = result.grad_input});
  return result;
}

// The residual form gives the stepped results bit for bit (the same additions, rounded once each), out of place and in
// place (`sum` is the input), except grad_input in 16-bit dtypes, which it rounds once where the steps round twice.
TEST(NormalizationReference, ResidualFormIsTheAdditionThenThePlainOp) {
  const int64_t rows = 5, hidden = 7;
  uint64_t seed = 170;
  for (DType dtype : {DType::float64, DType::float32, DType::bfloat16, DType::float16}) {
    for (bool layer_norm : {false, true}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {}{}", dtype_name(dtype), layer_norm ? "layer_norm" : "rms_norm",
                                 in_place ? " in place" : ""));
        const Tensor input = random_tensor(Shape{rows, hidden}, dtype, ++seed, -2, 2);
        const Tensor residual = random_tensor(Shape{rows, hidden}, dtype, ++seed, -2, 2);
        const Tensor weight = random_tensor(Shape{hidden}, DType::float32, ++seed, 0.5, 1.5);
        const Tensor bias = random_tensor(Shape{hidden}, DType::float32, ++seed);
        const Tensor grad_output = random_tensor(Shape{rows, hidden}, dtype, ++seed);
        const Tensor grad_residual = random_tensor(Shape{rows, hidden}, dtype, ++seed);
        const SteppedNorm expected =
            stepped_norm(layer_norm, input, residual, weight, bias, grad_output, grad_residual);

        // In place, the input is a copy that becomes the sum.
        Tensor sum = in_place ? converted(input, dtype) : filled(input.shape(), dtype, kNaN);
        const Tensor fused_input = in_place ? sum : input;
        Tensor output = filled(input.shape(), dtype, kNaN);
        Tensor first_statistic = filled(Shape{rows}, DType::float32, kNaN);
        Tensor second_statistic = filled(Shape{rows}, DType::float32, kNaN);
        Tensor grad_input = filled(input.shape(), dtype, kNaN);
        Tensor grad_weight = filled(Shape{hidden}, DType::float32, 0.5);
        Tensor grad_bias = filled(Shape{hidden}, DType::float32, 0.5);
        if (layer_norm) {
          run_reference<LayerNormForward>({.input = fused_input,
                                           .weight = &weight,
                                           .bias = &bias,
                                           .output = output,
                                           .mean = first_statistic,
                                           .inverse_std = second_statistic,
                                           .residual = &residual,
                                           .sum = &sum});
          run_reference<LayerNormBackward>({.grad_output = grad_output,
                                            .input = sum,
                                            .weight = &weight,
                                            .mean = first_statistic,
                                            .inverse_std = second_statistic,
                                            .grad_input = grad_input,
                                            .grad_weight = &grad_weight,
                                            .grad_bias = &grad_bias,
                                            .grad_residual = &grad_residual});
          expect_near(second_statistic, values_of(expected.second_statistic), 0, 0, "inverse_std");
          expect_near(grad_bias, values_of(expected.grad_bias), 0, 0, "grad_bias");
        } else {
          run_reference<RmsNormForward>({.input = fused_input,
                                         .weight = &weight,
                                         .output = output,
                                         .inverse_rms = first_statistic,
                                         .residual = &residual,
                                         .sum = &sum});
          run_reference<RmsNormBackward>({.grad_output = grad_output,
                                          .input = sum,
                                          .weight = &weight,
                                          .inverse_rms = first_statistic,
                                          .grad_input = grad_input,
                                          .grad_weight = &grad_weight,
                                          .grad_residual = &grad_residual});
        }
        expect_near(sum, values_of(expected.sum), 0, 0, "sum");
        expect_near(output, values_of(expected.output), 0, 0, "output");
        expect_near(first_statistic, values_of(expected.first_statistic), 0, 0, "first statistic");
        expect_near(grad_weight, values_of(expected.grad_weight), 0, 0, "grad_weight");
        const bool exact = dtype == DType::float32 || dtype == DType::float64;
        const double tolerance = exact ? 0 : dtype_tolerance(dtype);
        expect_near(grad_input, values_of(expected.grad_input), tolerance, tolerance, "grad_input");
      }
    }
  }
}

TEST(NormalizationReference, ResidualFormErrors) {
  Tensor input = random_tensor(Shape{2, 4}, DType::float32, 180);
  Tensor output = Tensor::empty(Shape{2, 4}, DType::float32), inverse_rms = Tensor::empty(Shape{2}, DType::float32);
  Tensor sum = Tensor::empty(Shape{2, 4}, DType::float32), short_residual = Tensor::empty(Shape{1, 4}, DType::float32);
  expect_error(
      [&] {
        rms_norm_forward(
            {.input = input, .weight = nullptr, .output = output, .inverse_rms = inverse_rms, .residual = &input});
      },
      "[rms_norm_forward] residual and sum must be given together");
  expect_error(
      [&] {
        rms_norm_forward({.input = input,
                          .weight = nullptr,
                          .output = output,
                          .inverse_rms = inverse_rms,
                          .residual = &short_residual,
                          .sum = &sum});
      },
      "[rms_norm_forward] residual has shape (1, 4), expected (2, 4)");
  Tensor mean = Tensor::empty(Shape{2}, DType::float32), grad_input = Tensor::empty(Shape{2, 4}, DType::float32);
  expect_error(
      [&] {
        layer_norm_backward({.grad_output = input,
                             .input = input,
                             .weight = nullptr,
                             .mean = mean,
                             .inverse_std = inverse_rms,
                             .grad_input = grad_input,
                             .grad_weight = nullptr,
                             .grad_bias = nullptr,
                             .grad_residual = &short_residual});
      },
      "[layer_norm_backward] grad_residual has shape (1, 4), expected (2, 4)");
  Tensor bf16_residual = Tensor::empty(Shape{2, 4}, DType::bfloat16);
  expect_error(
      [&] {
        layer_norm_forward({.input = input,
                            .weight = nullptr,
                            .bias = nullptr,
                            .output = output,
                            .mean = mean,
                            .inverse_std = inverse_rms,
                            .residual = &bf16_residual,
                            .sum = &sum});
      },
      "[layer_norm_forward] residual has dtype bfloat16, input has float32; they must match");
  expect_error(
      [&] {
        rms_norm_backward({.grad_output = input,
                           .input = input,
                           .weight = nullptr,
                           .inverse_rms = inverse_rms,
                           .grad_input = grad_input,
                           .grad_weight = nullptr,
                           .grad_residual = &bf16_residual});
      },
      "[rms_norm_backward] grad_residual has dtype bfloat16, input has float32; they must match");
}

TEST(NormalizationReference, Registered) {
  std::set<std::string> expected = {"rms_norm_forward:cpu:reference", "rms_norm_backward:cpu:reference",
                                    "layer_norm_forward:cpu:reference", "layer_norm_backward:cpu:reference"};
  for (const KernelInfo& info : all_kernels()) {
    if (!expected.contains(info.id())) continue;
    EXPECT_EQ(info.kind, KernelKind::baseline) << info.id();
    EXPECT_EQ(info.priority, 0) << info.id();
    expected.erase(info.id());
  }
  EXPECT_TRUE(expected.empty()) << "not registered: " << fmt::format("{}", fmt::join(expected, ", "));
}

}  // namespace
}  // namespace fast_llm::kernels
