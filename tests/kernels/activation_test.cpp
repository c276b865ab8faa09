// Tests of the CPU reference activation_forward / activation_backward (kernels/cpu/activation.cpp): published values
// of each activation, gated rows [gate | up], strided views against formulas written here, backward against central
// finite differences in fp64 (every activation, gated or not), 16-bit and fp32 against fp64, and errors.
#include "fast_llm/kernels/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

constexpr ActivationType kTypes[] = {ActivationType::gelu,         ActivationType::silu,    ActivationType::relu,
                                     ActivationType::squared_relu, ActivationType::sigmoid, ActivationType::identity};

std::string_view type_name(ActivationType type) {
  switch (type) {
    case ActivationType::gelu: return "gelu";
    case ActivationType::silu: return "silu";
    case ActivationType::relu: return "relu";
    case ActivationType::squared_relu: return "squared_relu";
    case ActivationType::sigmoid: return "sigmoid";
    case ActivationType::identity: return "identity";
  }
  return "?";
}

// The activations as written in their papers, in double.
double naive_activation(ActivationType type, double x) {
  switch (type) {
    case ActivationType::gelu:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * std::pow(x, 3))));
    case ActivationType::silu: return x / (1 + std::exp(-x));
    case ActivationType::relu: return std::max(x, 0.0);
    case ActivationType::squared_relu: return std::pow(std::max(x, 0.0), 2);
    case ActivationType::sigmoid: return 1 / (1 + std::exp(-x));
    case ActivationType::identity: return x;
  }
  return NAN;
}

void forward(ActivationType type, bool gated, const Tensor& input, const Tensor& output) {
  Tensor output_handle = output;
  run_reference<ActivationForward>({.type = type, .gated = gated, .input = input, .output = output_handle});
}

void backward(ActivationType type, bool gated, const Tensor& grad_output, const Tensor& input,
              const Tensor& grad_input) {
  Tensor grad_input_handle = grad_input;
  run_reference<ActivationBackward>(
      {.type = type, .gated = gated, .grad_output = grad_output, .input = input, .grad_input = grad_input_handle});
}

// Random values in [-2, 2] at least 0.05 away from 0 (relu's kink, where finite differences do not apply).
Tensor random_away_from_zero(const Shape& shape, DType dtype, uint64_t seed) {
  std::vector<double> values = uniform_values(shape.numel(), seed, -1.95, 1.95);
  for (double& value : values) value += value < 0 ? -0.05 : 0.05;
  return make_tensor(values, shape, dtype);
}

TEST(ActivationReference, ForwardHandChecked) {
  // Reference values: gelu (tanh approximation), silu = x sigmoid(x), sigmoid, at x = -2, -0.5, 1, 3.
  const std::vector<std::pair<ActivationType, std::vector<double>>> cases = {
      {ActivationType::gelu, {-0.04540230591222494, -0.15428599017485606, 0.8411919906082768, 2.996362607918227}},
      {ActivationType::silu, {-0.2384058440442351, -0.1887703343990727, 0.7310585786300049, 2.8577223804673}},
      {ActivationType::sigmoid, {0.11920292202211755, 0.3775406687981454, 0.7310585786300049, 0.9525741268224334}},
      {ActivationType::relu, {0, 0, 1, 3}},
      {ActivationType::squared_relu, {0, 0, 1, 9}},
      {ActivationType::identity, {-2, -0.5, 1, 3}},
  };
  for (DType dtype : {DType::float64, DType::float32, DType::bfloat16, DType::float16}) {
    for (const auto& [type, expected] : cases) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dtype), type_name(type)));
      Tensor input = make_tensor({-2, -0.5, 1, 3}, Shape{1, 4}, dtype);
      Tensor output = filled(Shape{1, 4}, dtype, NAN);
      forward(type, false, input, output);
      expect_near(output, expected, 1e-15, dtype_tolerance(dtype), "plain");

      // Gated: [gate | up] = [-2, -0.5, 1, 3 | 1, 2, -1, 0.5]  ->  act(gate) * up.
      Tensor gated_input = make_tensor({-2, -0.5, 1, 3, 1, 2, -1, 0.5}, Shape{1, 8}, dtype);
      forward(type, true, gated_input, output);
      expect_near(output, {expected[0], 2 * expected[1], -expected[2], 0.5 * expected[3]}, 1e-15,
                  dtype_tolerance(dtype), "gated");
    }
  }
}

TEST(ActivationReference, StridedViewsMatchFormula) {
  const int64_t tokens = 4, size = 6;
  for (ActivationType type : kTypes) {
    SCOPED_TRACE(type_name(type));
    // Gated input as columns [1, 13) of a wider buffer; output as a transposed view.
    Tensor wide = random_tensor(Shape{tokens, 15}, DType::float64, 201, -3, 3);
    Tensor input = wide.slice(1, 1, 1 + 2 * size);
    Tensor output_storage = filled(Shape{size, tokens}, DType::float64, NAN);
    Tensor output = output_storage.transpose(0, 1);
    forward(type, true, input, output);
    const std::vector<double> x = values_of(input);
    std::vector<double> expected;
    for (int64_t token = 0; token < tokens; ++token)
      for (int64_t column = 0; column < size; ++column)
        expected.push_back(naive_activation(type, x[size_t(token * 2 * size + column)]) *
                           x[size_t(token * 2 * size + size + column)]);
    expect_near(output, expected, 1e-14, 1e-12, "gated, strided");
  }
}

TEST(ActivationReference, BackwardMatchesFiniteDifferences) {
  const int64_t tokens = 3, size = 5;
  for (ActivationType type : kTypes) {
    for (bool gated : {false, true}) {
      SCOPED_TRACE(fmt::format("{}, gated {}", type_name(type), gated));
      const Shape input_shape{tokens, gated ? 2 * size : size};
      Tensor input = random_away_from_zero(input_shape, DType::float64, 211);
      Tensor probe = random_tensor(Shape{tokens, size}, DType::float64, 212);
      Tensor output = filled(Shape{tokens, size}, DType::float64, NAN);
      auto loss = [&] {
        forward(type, gated, input, output);
        return dot(values_of(output), values_of(probe));
      };
      const std::vector<double> expected = finite_difference_gradient(input, loss);
      Tensor grad_input = filled(input_shape, DType::float64, NAN);
      backward(type, gated, probe, input, grad_input);
      expect_near(grad_input, expected, 1e-8, 1e-7, "grad_input");
    }
  }
}

TEST(ActivationReference, LowPrecisionMatchesFloat64) {
  const int64_t tokens = 6, size = 24;
  for (DType dtype : kLowPrecisionDTypes) {
    for (ActivationType type : kTypes) {
      for (bool gated : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {}, gated {}", dtype_name(dtype), type_name(type), gated));
        const Shape input_shape{tokens, gated ? 2 * size : size};
        Tensor input = random_tensor(input_shape, dtype, 221, -3, 3);
        Tensor grad_output = random_tensor(Shape{tokens, size}, dtype, 222);
        Tensor input64 = converted(input, DType::float64), grad_output64 = converted(grad_output, DType::float64);
        Tensor output = Tensor::empty(Shape{tokens, size}, dtype);
        Tensor output64 = Tensor::empty(Shape{tokens, size}, DType::float64);
        forward(type, gated, input, output);
        forward(type, gated, input64, output64);
        const double tolerance = dtype_tolerance(dtype);
        expect_near(output, values_of(output64), tolerance, tolerance, "output");
        Tensor grad_input = Tensor::empty(input_shape, dtype);
        Tensor grad_input64 = Tensor::empty(input_shape, DType::float64);
        backward(type, gated, grad_output, input, grad_input);
        backward(type, gated, grad_output64, input64, grad_input64);
        expect_near(grad_input, values_of(grad_input64), tolerance, tolerance, "grad_input");
      }
    }
  }
}

TEST(ActivationReference, Errors) {
  Tensor odd = Tensor::empty(Shape{2, 5}, DType::float32), output = Tensor::empty(Shape{2, 2}, DType::float32);
  expect_error([&] { activation_forward({.gated = true, .input = odd, .output = output}); },
               "[activation_forward] input has shape (2, 5): a gated input needs an even number of columns");
  Tensor input = Tensor::empty(Shape{2, 6}, DType::float32);
  expect_error([&] { activation_forward({.gated = true, .input = input, .output = output}); },
               "[activation_forward] output has shape (2, 2), expected (2, 3)");
  expect_error([&] { activation_forward({.gated = false, .input = input, .output = output}); },
               "[activation_forward] output has shape (2, 2), expected (2, 6)");
  Tensor grad_output = Tensor::empty(Shape{2, 3}, DType::float32),
         grad_input = Tensor::empty(Shape{2, 3}, DType::float32);
  expect_error(
      [&] {
        activation_backward({.gated = true, .grad_output = grad_output, .input = input, .grad_input = grad_input});
      },
      "[activation_backward] grad_input has shape (2, 3), expected (2, 6)");
  Tensor rank3 = Tensor::empty(Shape{1, 2, 6}, DType::float32);
  expect_error([&] { activation_forward({.gated = false, .input = rank3, .output = output}); },
               "[activation_forward] input has shape (1, 2, 6), expected (tokens, I)");

  Tensor bf16_output = Tensor::empty(Shape{2, 3}, DType::bfloat16);
  expect_error([&] { activation_forward({.gated = true, .input = input, .output = bf16_output}); },
               "[activation_forward] output has dtype bfloat16, input has float32; they must match");
  Tensor int_input = Tensor::empty(Shape{2, 6}, DType::int32), int_output = Tensor::empty(Shape{2, 6}, DType::int32);
  expect_error([&] { activation_forward({.gated = false, .input = int_input, .output = int_output}); },
               "[activation_forward] input has dtype int32; supported: float32, float64, bfloat16, float16");
}

}  // namespace
}  // namespace fast_llm::kernels
