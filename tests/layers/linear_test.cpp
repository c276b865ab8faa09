// Linear module: forward against the definition, backward against finite differences (input, weight, bias), the
// transposed storage of mlp.layer_2, output ranges, and gradient accumulation.
#include <gtest/gtest.h>

#include <cmath>

#include "fast_llm/layers/common/linear.h"
#include "layer_test_util.h"

namespace fast_llm::layers {
namespace {

using namespace testing;

LinearOptions options(int64_t input, int64_t output, bool bias, bool transposed) {
  return {.input_size = input,
          .output_size = output,
          .bias = bias,
          .transposed_weight = transposed,
          .weight = {.initialization = Initialization::normal(0.5), .lr_scale = 2.0, .weight_decay = true},
          .bias_settings = {.initialization = Initialization::fill(0.0), .lr_scale = 2.0, .weight_decay = false}};
}

struct LinearCase {
  bool bias;
  bool transposed;
};

void PrintTo(const LinearCase& test_case, std::ostream* stream) {
  *stream << (test_case.bias ? "bias" : "no bias") << (test_case.transposed ? ", transposed" : "");
}

class LinearTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearTest, ForwardIsDefinitionAndBackwardMatchesFiniteDifferences) {
  const auto [has_bias, transposed] = GetParam();
  const int64_t tokens = 5, input_size = 4, output_size = 3;
  Linear linear("layer", options(input_size, output_size, has_bias, transposed));
  bind_parameters(linear, 11);
  EXPECT_EQ(linear.weight().meta.name, "layer.weight");
  EXPECT_EQ(linear.weight().meta.shape,
            transposed ? (Shape{input_size, output_size}) : (Shape{output_size, input_size}));
  ASSERT_EQ(linear.has_bias(), has_bias);
  if (has_bias) {
    EXPECT_EQ(linear.bias()->meta.name, "layer.bias");
    EXPECT_FALSE(linear.bias()->meta.weight_decay);
  }

  Tensor input = random_tensor(Shape{tokens, input_size}, 12);
  Tensor output = linear.forward(input, {});
  ASSERT_EQ(output.shape(), (Shape{tokens, output_size}));
  // y[t, o] = sum_i x[t, i] W(o, i) + b[o], written out.
  auto x = values_of(input), w = values_of(linear.weight().weight), y = values_of(output);
  std::vector<double> b = has_bias ? values_of(linear.bias()->weight) : std::vector<double>(output_size, 0.0);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t o = 0; o < output_size; ++o) {
      double expected = b[size_t(o)];
      for (int64_t i = 0; i < input_size; ++i)
        expected += x[size_t(t * input_size + i)] *
                    w[size_t(transposed ? i * output_size + o : o * input_size + i)];
      EXPECT_NEAR(y[size_t(t * output_size + o)], expected, 1e-12);
    }

  std::vector<double> output_weights = random_values(tokens * output_size, 13);
  Tensor grad_output = tensor_from(output_weights, Shape{tokens, output_size});
  Tensor grad_input = linear.backward(grad_output, input, {});
  auto objective = [&] { return dot(linear.forward(input, {}), output_weights); };
  expect_gradient(objective, input, grad_input, "input");
  expect_gradient(objective, linear.weight().weight, linear.weight().grad, "weight");
  if (has_bias) expect_gradient(objective, linear.bias()->weight, linear.bias()->grad, "bias");

  // Parameter gradients accumulate; grad_input accumulates only when asked.
  std::vector<double> weight_grad = values_of(linear.weight().grad);
  Tensor accumulated = Tensor::empty(input.shape(), DType::float64);
  accumulated.copy_bytes_from(grad_input);
  linear.backward(grad_output, input, &accumulated, /*accumulate_grad_input=*/true, {});
  auto once = values_of(grad_input), twice = values_of(accumulated), weight_twice = values_of(linear.weight().grad);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-12);
  for (size_t i = 0; i < weight_grad.size(); ++i) EXPECT_NEAR(weight_twice[i], 2 * weight_grad[i], 1e-12);
  EXPECT_EQ(linear.flops(10), 6.0 * 10 * input_size * output_size);
}

INSTANTIATE_TEST_SUITE_P(Variants, LinearTest,
                         ::testing::Values(LinearCase{false, false}, LinearCase{true, false}, LinearCase{false, true},
                                           LinearCase{true, true}));

// Running two halves of the output features gives the two halves of the full output and of the full gradients.
TEST(Linear, OutputRangesAreBlocksOfTheFullLayer) {
  const int64_t tokens = 4, input_size = 3, output_size = 6;
  Linear linear("key_value", options(input_size, output_size, true, false));
  bind_parameters(linear, 21);
  Tensor input = random_tensor(Shape{tokens, input_size}, 22);
  Tensor full = linear.forward(input, {});
  Tensor first = linear.forward(input, {}, Linear::OutputRange{0, 2});
  Tensor second = linear.forward(input, {}, Linear::OutputRange{2, 6});
  auto full_values = values_of(full), first_values = values_of(first), second_values = values_of(second);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t o = 0; o < 2; ++o) EXPECT_EQ(first_values[size_t(t * 2 + o)], full_values[size_t(t * 6 + o)]);
    for (int64_t o = 0; o < 4; ++o) EXPECT_EQ(second_values[size_t(t * 4 + o)], full_values[size_t(t * 6 + 2 + o)]);
  }
  std::vector<double> weights_first = random_values(tokens * 2, 23), weights_second = random_values(tokens * 4, 24);
  Tensor grad_input = zeros(input.shape());
  linear.backward(tensor_from(weights_first, Shape{tokens, 2}), input, &grad_input, true, {}, Linear::OutputRange{0, 2});
  linear.backward(tensor_from(weights_second, Shape{tokens, 4}), input, &grad_input, true, {},
                  Linear::OutputRange{2, 6});
  auto objective = [&] {
    return dot(linear.forward(input, {}, Linear::OutputRange{0, 2}), weights_first) +
           dot(linear.forward(input, {}, Linear::OutputRange{2, 6}), weights_second);
  };
  expect_gradient(objective, input, grad_input, "input");
  expect_gradient(objective, linear.weight().weight, linear.weight().grad, "weight");
  expect_gradient(objective, linear.bias()->weight, linear.bias()->grad, "bias");
}

// The first accumulation of a training step (Parameter::grad_started false, as the engine leaves it instead of zeroing)
// writes the gradient: stale values, NaN included, never leak into it, whether one call covers the whole weight or
// output ranges cover it in parts; the second accumulation adds.
TEST(Linear, TheStepsFirstAccumulationOverwritesStaleGradients) {
  const int64_t tokens = 4, input_size = 3, output_size = 6;
  for (const bool ranges : {false, true}) {
    SCOPED_TRACE(ranges ? "output ranges" : "whole weight");
    Linear linear("key_value", options(input_size, output_size, true, false));
    bind_parameters(linear, 41);
    EXPECT_TRUE(linear.weight().tracks_grad_start);
    EXPECT_TRUE(linear.bias()->tracks_grad_start);
    Tensor input = random_tensor(Shape{tokens, input_size}, 42);
    const std::vector<double> grad_values = random_values(tokens * output_size, 43);
    std::vector<double> first, second;  // output columns [0, 2) and [2, 6)
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t o = 0; o < output_size; ++o)
        (o < 2 ? first : second).push_back(grad_values[size_t(t * output_size + o)]);
    const auto accumulate = [&] {
      if (!ranges) {
        linear.backward(tensor_from(grad_values, Shape{tokens, output_size}), input, {});
        return;
      }
      linear.backward(tensor_from(first, Shape{tokens, 2}), input, {}, Linear::OutputRange{0, 2});
      linear.backward(tensor_from(second, Shape{tokens, 4}), input, {}, Linear::OutputRange{2, 6});
    };
    accumulate();  // from zeros, started: the reference gradient
    const std::vector<double> weight_once = values_of(linear.weight().grad), bias_once = values_of(linear.bias()->grad);
    for (Parameter* parameter : linear.parameters()) {
      std::vector<double> nan(size_t(parameter->grad.numel()), std::nan(""));
      parameter->grad = tensor_from(nan, parameter->meta.shape);
      parameter->grad_started = false;
    }
    accumulate();
    EXPECT_EQ(values_of(linear.weight().grad), weight_once);
    EXPECT_EQ(values_of(linear.bias()->grad), bias_once);
    EXPECT_TRUE(linear.weight().grad_started);
    accumulate();
    const std::vector<double> weight_twice = values_of(linear.weight().grad);
    for (size_t i = 0; i < weight_once.size(); ++i) EXPECT_DOUBLE_EQ(weight_twice[i], 2 * weight_once[i]);
  }
}

// A frozen parameter (no gradient tensor) is skipped; the input gradient is still computed.
TEST(Linear, FrozenWeightGetsNoGradient) {
  Linear linear("layer", options(3, 2, true, false));
  bind_parameters(linear, 31);
  linear.weight().grad = Tensor();
  Tensor input = random_tensor(Shape{4, 3}, 32);
  Tensor grad_input = linear.backward(random_tensor(Shape{4, 2}, 33), input, {});
  EXPECT_GT(max_abs(values_of(grad_input)), 0.0);
  EXPECT_GT(max_abs(values_of(linear.bias()->grad)), 0.0);
}

}  // namespace
}  // namespace fast_llm::layers
