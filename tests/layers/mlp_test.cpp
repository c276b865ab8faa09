// MLP: layout (fused [gate; up] layer_1, transposed layer_2), forward against the formula for one activation, backward
// against finite differences for every activation, gated or not, with and without biases; recomputation levels;
// refused variants.
#include <gtest/gtest.h>

#include <cmath>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/mlp/mlp.h"
#include "layer_test_util.h"

namespace fast_llm::layers {
namespace {

using namespace testing;

struct MlpHolder : config::Config {
  config::Dynamic<MlpBaseConfig> mlp;
  void visit(config::Visitor& v) override { v(mlp, "mlp", "", config::Hint::core); }
};

MlpHolder mlp_config(const std::string& yaml) { return load_config<MlpHolder>("mlp: " + yaml); }

TEST(Mlp, LayoutAndNames) {
  MlpHolder config = mlp_config("{intermediate_size: 6, gated: true, add_linear_biases: true}");
  Mlp mlp("decoder.0.mlp", config.mlp.get(), 4, 1.0);
  auto parameters = mlp.parameters();
  ASSERT_EQ(parameters.size(), 4u);
  EXPECT_EQ(parameters[0]->meta.name, "decoder.0.mlp.layer_1.weight");
  EXPECT_EQ(parameters[0]->meta.shape, (Shape{12, 4}));  // [gate; up] = [2 I, H]
  EXPECT_EQ(parameters[1]->meta.name, "decoder.0.mlp.layer_1.bias");
  EXPECT_EQ(parameters[1]->meta.shape, (Shape{12}));
  EXPECT_EQ(parameters[2]->meta.name, "decoder.0.mlp.layer_2.weight");
  EXPECT_EQ(parameters[2]->meta.shape, (Shape{6, 4}));  // transposed: [I, H]
  EXPECT_EQ(parameters[3]->meta.name, "decoder.0.mlp.layer_2.bias");
  EXPECT_EQ(parameters[3]->meta.shape, (Shape{4}));
  EXPECT_NEAR(parameters[2]->meta.initialization.std, 0.5, 1e-15);  // hidden_size^-0.5
  EXPECT_EQ(mlp.flops(3), 6.0 * 3 * (4 * 12 + 6 * 4));
}

// Gated silu, written out: y = (silu(x Wg^T) * (x Wu^T)) W2.
TEST(Mlp, GatedForwardIsFormula) {
  MlpHolder config = mlp_config("{intermediate_size: 3, gated: true, add_linear_biases: false}");
  Mlp mlp("mlp", config.mlp.get(), 2, 1.0);
  bind_parameters(mlp, 3);
  Tensor input = random_tensor(Shape{4, 2}, 4);
  auto output = values_of(mlp.forward(input, nullptr, {}));
  auto x = values_of(input);
  auto w1 = values_of(mlp.parameters()[0]->weight), w2 = values_of(mlp.parameters()[1]->weight);
  for (int t = 0; t < 4; ++t)
    for (int h = 0; h < 2; ++h) {
      double expected = 0;
      for (int i = 0; i < 3; ++i) {
        double gate = 0, up = 0;
        for (int k = 0; k < 2; ++k) {
          gate += x[t * 2 + k] * w1[i * 2 + k];
          up += x[t * 2 + k] * w1[(3 + i) * 2 + k];
        }
        expected += gate / (1 + std::exp(-gate)) * up * w2[i * 2 + h];
      }
      EXPECT_NEAR(output[size_t(t * 2 + h)], expected, 1e-12);
    }
}

struct MlpCase {
  std::string name;
  std::string yaml;
};

void PrintTo(const MlpCase& test_case, std::ostream* stream) { *stream << test_case.yaml; }


class MlpTest : public ::testing::TestWithParam<MlpCase> {};

TEST_P(MlpTest, BackwardMatchesFiniteDifferences) {
  MlpHolder config = mlp_config(GetParam().yaml);
  Mlp mlp("mlp", config.mlp.get(), 4, 1.0);
  bind_parameters(mlp, 5);
  Tensor input = random_tensor(Shape{6, 4}, 6, 1.5);
  Mlp::Saved saved;
  Tensor output = mlp.forward(input, &saved, {});
  std::vector<double> output_weights = random_values(output.numel(), 7);
  Tensor grad_input = mlp.backward(tensor_from(output_weights, output.shape()), saved, {});
  auto objective = [&] { return dot(mlp.forward(input, nullptr, {}), output_weights); };
  expect_gradient(objective, input, grad_input, "input");
  for (Parameter* parameter : mlp.parameters())
    expect_gradient(objective, parameter->weight, parameter->grad, parameter->meta.name);
}

std::vector<MlpCase> mlp_cases() {
  std::vector<MlpCase> cases;
  for (std::string activation : {"gelu", "silu", "relu", "squared_relu", "sigmoid", "identity"}) {
    cases.push_back({activation + "_gated",
                     "{intermediate_size: 5, gated: true, add_linear_biases: false, activation: " + activation + "}"});
    cases.push_back({activation + "_biases",
                     "{intermediate_size: 5, gated: false, add_linear_biases: true, activation: " + activation + "}"});
  }
  cases.push_back({"layer_2_bias_only",
                   "{intermediate_size: 5, gated: true, add_linear_biases: false, layer_2: {bias: {enabled: true}}}"});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Activations, MlpTest, ::testing::ValuesIn(mlp_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Mlp, RefusesMoe) { EXPECT_THROW(Mlp("mlp", mlp_config("{type: moe}").mlp.get(), 4, 1.0), NotSupportedError); }

// Recomputation keeps less (nothing of the activation, or of layer_1 either with `full`) and gives bit for bit the
// gradients of keeping everything: backward reruns the same kernels on the same inputs.
TEST(Mlp, RecomputationKeepsLessAndGivesTheSameGradients) {
  struct Result {
    std::vector<double> grad_input;
    std::vector<std::vector<double>> grads;
  };
  auto run = [](const std::string& level, bool expect_hidden, bool expect_activated) {
    MlpHolder config = mlp_config("{intermediate_size: 5, gated: true, add_linear_biases: true, recompute_level: " +
                                  level + "}");
    Mlp mlp("mlp", config.mlp.get(), 4, 1.0);
    bind_parameters(mlp, 8);
    Tensor input = random_tensor(Shape{6, 4}, 9, 1.5);
    Mlp::Saved saved;
    Tensor output = mlp.forward(input, &saved, {});
    EXPECT_EQ(saved.hidden.defined(), expect_hidden) << level;
    EXPECT_EQ(saved.activated.defined(), expect_activated) << level;
    Result result{.grad_input = values_of(mlp.backward(tensor_from(random_values(output.numel(), 10), output.shape()),
                                                       std::move(saved), {})),
                  .grads = {}};
    for (Parameter* parameter : mlp.parameters()) result.grads.push_back(values_of(parameter->grad));
    return result;
  };
  const Result kept = run("none", true, true);
  for (const auto& [level, hidden] : {std::pair{"activation", true}, std::pair{"activation_and_input", true},
                                      std::pair{"full", false}}) {
    const Result recomputed = run(level, hidden, false);
    EXPECT_EQ(recomputed.grad_input, kept.grad_input) << level;
    EXPECT_EQ(recomputed.grads, kept.grads) << level;
  }
}

}  // namespace
}  // namespace fast_llm::layers
