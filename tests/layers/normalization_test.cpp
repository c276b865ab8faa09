// Normalization module: parameters and their initialisation per type, forward against the formulas, backward against
// finite differences; the residual form (add_and_forward, backward with grad_residual) of every type against the
// addition then the plain forward, and against finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/common/normalization.h"
#include "layer_test_util.h"

namespace fast_llm::layers {
namespace {

using namespace testing;

struct NormHolder : config::Config {
  config::Dynamic<NormalizationConfig> normalization;
  void visit(config::Visitor& v) override { v(normalization, "normalization", "", config::Hint::core); }
};

NormHolder norm_config(const std::string& yaml) { return load_config<NormHolder>("normalization: " + yaml); }

TEST(Normalization, ParametersPerType) {
  {
    NormHolder config = norm_config("{type: layer_norm}");
    Normalization norm("decoder.0.norm_1", config.normalization.get(), 6, 0.5);
    auto parameters = norm.parameters();
    ASSERT_EQ(parameters.size(), 2u);
    EXPECT_EQ(parameters[0]->meta.name, "decoder.0.norm_1.weight");
    EXPECT_EQ(parameters[1]->meta.name, "decoder.0.norm_1.bias");
    EXPECT_EQ(parameters[0]->meta.initialization.kind, Initialization::Kind::fill);
    EXPECT_EQ(parameters[0]->meta.initialization.value, 1.0);
    EXPECT_EQ(parameters[1]->meta.initialization.value, 0.0);
    for (Parameter* parameter : parameters) {
      EXPECT_FALSE(parameter->meta.weight_decay);
      EXPECT_EQ(parameter->meta.lr_scale, 0.5);
      EXPECT_EQ(parameter->meta.shape, Shape{6});
    }
  }
  {
    NormHolder config = norm_config("{type: rms_norm, zero_centered: true, lr_scale: 3, weight: {lr_scale: 2}}");
    Normalization norm("head.final_norm", config.normalization.get(), 6, 0.5);
    auto parameters = norm.parameters();
    ASSERT_EQ(parameters.size(), 1u);
    EXPECT_EQ(parameters[0]->meta.name, "head.final_norm.weight");
    EXPECT_EQ(parameters[0]->meta.initialization.value, 0.0);  // zero-centred: 1 + w
    EXPECT_EQ(parameters[0]->meta.lr_scale, 3.0);
  }
  {
    NormHolder config = norm_config("{type: rms_norm, weight: {initialization: {type: fill, value: 2}}}");
    Normalization norm("n", config.normalization.get(), 6, 1.0);
    EXPECT_EQ(norm.parameters()[0]->meta.initialization.value, 2.0);
  }
  {
    NormHolder config = norm_config("{type: fixed_rms_norm}");
    Normalization norm("n", config.normalization.get(), 6, 1.0);
    EXPECT_TRUE(norm.parameters().empty());
  }
  {
    NormHolder config = norm_config("{type: none}");
    Normalization norm("n", config.normalization.get(), 6, 1.0);
    EXPECT_TRUE(norm.parameters().empty());
    EXPECT_TRUE(norm.is_identity());
    Tensor input = random_tensor(Shape{2, 6}, 1);
    Normalization::Saved saved;
    EXPECT_EQ(norm.forward(input, &saved, {}).data(), input.data());
  }
  {
    NormHolder config = norm_config("{type: gated_rms_norm}");
    EXPECT_THROW(Normalization("n", config.normalization.get(), 6, 1.0), NotSupportedError);
  }
}

struct NormCase {
  std::string yaml;
  bool layer_norm;
  bool zero_centered;
  bool has_weight;
};

void PrintTo(const NormCase& test_case, std::ostream* stream) { *stream << test_case.yaml; }


class NormalizationTest : public ::testing::TestWithParam<NormCase> {};

TEST_P(NormalizationTest, ForwardIsFormulaAndBackwardMatchesFiniteDifferences) {
  const NormCase& test_case = GetParam();
  const int64_t rows = 5, hidden = 6;
  NormHolder config = norm_config(test_case.yaml);
  Normalization norm("norm", config.normalization.get(), hidden, 1.0);
  bind_parameters(norm, 3);
  Tensor input = random_tensor(Shape{rows, hidden}, 4, 2.0);
  Normalization::Saved saved;
  Tensor output = norm.forward(input, &saved, {});

  // Formula, written out: (x - mean) / sqrt(var + eps) or x / sqrt(mean(x^2) + eps), times w (or 1 + w), plus b.
  auto x = values_of(input), y = values_of(output);
  std::vector<double> w(hidden, 1.0), b(hidden, 0.0);
  auto parameters = norm.parameters();
  if (test_case.has_weight) w = values_of(parameters[0]->weight);
  if (test_case.layer_norm) b = values_of(parameters[1]->weight);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, square = 0;
    for (int64_t h = 0; h < hidden; ++h) mean += x[size_t(r * hidden + h)] / double(hidden);
    const double center = test_case.layer_norm ? mean : 0.0;
    for (int64_t h = 0; h < hidden; ++h) square += std::pow(x[size_t(r * hidden + h)] - center, 2) / double(hidden);
    for (int64_t h = 0; h < hidden; ++h) {
      const double scale = test_case.zero_centered ? 1.0 + w[size_t(h)] : w[size_t(h)];
      const double expected = (x[size_t(r * hidden + h)] - center) / std::sqrt(square + 1e-5) * scale + b[size_t(h)];
      EXPECT_NEAR(y[size_t(r * hidden + h)], expected, 1e-12);
    }
  }

  std::vector<double> output_weights = random_values(rows * hidden, 5);
  Tensor grad_input = norm.backward(tensor_from(output_weights, output.shape()), saved, {});
  auto objective = [&] { return dot(norm.forward(input, nullptr, {}), output_weights); };
  expect_gradient(objective, input, grad_input, "input");
  for (Parameter* parameter : parameters) expect_gradient(objective, parameter->weight, parameter->grad, parameter->meta.name);
}

INSTANTIATE_TEST_SUITE_P(Types, NormalizationTest,
                         ::testing::Values(NormCase{"{type: layer_norm}", true, false, true},
                                           NormCase{"{type: layer_norm, zero_centered: true}", true, true, true},
                                           NormCase{"{type: rms_norm}", false, false, true},
                                           NormCase{"{type: rms_norm, zero_centered: true}", false, true, true},
                                           NormCase{"{type: fixed_rms_norm}", false, false, false}));

// add_and_forward leaves input + residual in its input and normalises it; backward with grad_residual adds that
// gradient to grad_input. Checked against the plain forward of the sum, and against finite differences of
// dot(norm(x + r), w) + dot(x + r, v), whose gradient with respect to x is the norm's backward of w, plus v.
class NormalizationResidualTest : public ::testing::TestWithParam<std::string> {};

TEST_P(NormalizationResidualTest, AddAndForwardThenBackwardWithTheResidualGradient) {
  const int64_t rows = 5, hidden = 6;
  NormHolder config = norm_config(GetParam());
  Normalization norm("norm", config.normalization.get(), hidden, 1.0);
  bind_parameters(norm, 7);
  const Tensor input = random_tensor(Shape{rows, hidden}, 8, 2.0);
  const Tensor residual = random_tensor(Shape{rows, hidden}, 9, 2.0);
  auto copy_of = [](const Tensor& tensor) { return tensor_from(values_of(tensor), tensor.shape()); };

  Tensor sum = copy_of(input);
  Normalization::Saved saved;
  const Tensor output = norm.add_and_forward(sum, residual, &saved, {});
  const std::vector<double> x = values_of(input), r = values_of(residual);
  std::vector<double> expected_sum(x.size());
  for (size_t i = 0; i < x.size(); ++i) expected_sum[i] = x[i] + r[i];
  EXPECT_EQ(values_of(sum), expected_sum);
  EXPECT_EQ(values_of(output), values_of(norm.forward(tensor_from(expected_sum, input.shape()), nullptr, {})));

  const std::vector<double> output_weights = random_values(rows * hidden, 10);
  const std::vector<double> sum_weights = random_values(rows * hidden, 11);
  const Tensor grad_residual = tensor_from(sum_weights, input.shape());
  const Tensor grad_input = norm.backward(tensor_from(output_weights, output.shape()), saved, {}, &grad_residual);
  auto objective = [&] {
    Tensor perturbed_sum = copy_of(input);
    const Tensor perturbed_output = norm.add_and_forward(perturbed_sum, residual, nullptr, {});
    return dot(perturbed_output, output_weights) + dot(perturbed_sum, sum_weights);
  };
  expect_gradient(objective, input, grad_input, "input");
  for (Parameter* parameter : norm.parameters())
    expect_gradient(objective, parameter->weight, parameter->grad, parameter->meta.name);
}

INSTANTIATE_TEST_SUITE_P(Types, NormalizationResidualTest,
                         ::testing::Values("{type: layer_norm}", "{type: rms_norm, zero_centered: true}",
                                           "{type: fixed_rms_norm}", "{type: none}"));

}  // namespace
}  // namespace fast_llm::layers
