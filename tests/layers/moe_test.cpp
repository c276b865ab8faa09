// Mixture of experts (`type: moe`) and hybrid MoE (`type: hybrid_moe`): the parameter layout, forward against an
// independent per-token loop (for each token, the sum over its slots of score x expert MLP), backward against fp64
// finite differences of the input and of every parameter (router included, with the load-balancing and z losses, shared
// experts, gated or not, sinkhorn, jitter, router_input_scale), experts that receive no token, 64 experts top-8,
// recomputation levels giving identical gradients, the logged losses, and config errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/mlp/hybrid_moe.h"
#include "fast_llm/layers/mlp/mixture_of_experts.h"
#include "layer_test_util.h"

namespace fast_llm::layers {
namespace {

using namespace testing;

struct MlpHolder : config::Config {
  config::Dynamic<MlpBaseConfig> mlp;
  void visit(config::Visitor& v) override { v(mlp, "mlp", "", config::Hint::core); }
};

MlpHolder mlp_config(const std::string& yaml) { return load_config<MlpHolder>("mlp: " + yaml); }

const MoeMlpConfig& moe_config(const MlpHolder& holder) { return dynamic_cast<const MoeMlpConfig&>(holder.mlp.get()); }

constexpr int64_t kHidden = 4;

double activation(const std::string& type, double x) {
  if (type == "silu") return x / (1 + std::exp(-x));
  if (type == "relu") return std::max(x, 0.0);
  // gelu, tanh approximation (Fast-LLM's)
  return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// The expected output of a MoE, one token at a time, from the parameter values.
std::vector<double> per_token_moe(const std::vector<double>& x, int64_t tokens, const std::vector<double>& router,
                                  const std::vector<double>& w1, const std::vector<double>& w2, int experts, int shared,
                                  int top_k, int64_t intermediate, bool gated, const std::string& act,
                                  double input_scale) {
  const int routed = experts - shared;
  std::vector<double> output(size_t(tokens * kHidden), 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    const double* xt = x.data() + t * kHidden;
    std::vector<double> logits(static_cast<size_t>(routed));
    for (int e = 0; e < routed; ++e)
      for (int64_t h = 0; h < kHidden; ++h) logits[size_t(e)] += input_scale * xt[h] * router[size_t(e * kHidden + h)];
    std::vector<int> order(static_cast<size_t>(routed));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[size_t(a)] > logits[size_t(b)]; });
    std::vector<std::pair<int, double>> slots;
    for (int s = 0; s < shared; ++s) slots.emplace_back(routed + s, 1.0);
    double sum = 0;
    for (int i = 0; i < top_k; ++i) sum += std::exp(logits[size_t(order[size_t(i)])] - logits[size_t(order[0])]);
    for (int i = 0; i < top_k; ++i)
      slots.emplace_back(order[size_t(i)], std::exp(logits[size_t(order[size_t(i)])] - logits[size_t(order[0])]) / sum);
    for (const auto& [expert, score] : slots) {
      const int64_t width = (gated ? 2 : 1) * intermediate;
      for (int64_t i = 0; i < intermediate; ++i) {
        double gate = 0, up = 0;
        for (int64_t h = 0; h < kHidden; ++h) {
          gate += xt[h] * w1[size_t((expert * width + i) * kHidden + h)];
          if (gated) up += xt[h] * w1[size_t((expert * width + intermediate + i) * kHidden + h)];
        }
        const double a = gated ? activation(act, gate) * up : activation(act, gate);
        for (int64_t h = 0; h < kHidden; ++h)
          output[size_t(t * kHidden + h)] += score * a * w2[size_t((expert * intermediate + i) * kHidden + h)];
      }
    }
  }
  return output;
}

TEST(MoeMlp, LayoutAndFlops) {
  MlpHolder config =
      mlp_config("{type: moe, experts: 6, shared_experts: 2, experts_per_token: 2, intermediate_size: 3, gated: true, "
                 "add_linear_biases: false}");
  MoeMlp moe("decoder.0.mlp", moe_config(config), kHidden, 1.0);
  auto parameters = moe.parameters();
  ASSERT_EQ(parameters.size(), 3u);
  EXPECT_EQ(parameters[0]->meta.name, "decoder.0.mlp.router.weight");
  EXPECT_EQ(parameters[0]->meta.shape, (Shape{4, kHidden}));  // routed experts only
  EXPECT_EQ(parameters[1]->meta.name, "decoder.0.mlp.layer_1.weight");
  EXPECT_EQ(parameters[1]->meta.shape, (Shape{6 * 2 * 3, kHidden}));
  EXPECT_EQ(parameters[2]->meta.name, "decoder.0.mlp.layer_2.weight");
  EXPECT_EQ(parameters[2]->meta.shape, (Shape{6 * 3, kHidden}));
  EXPECT_NEAR(parameters[0]->meta.initialization.std, 0.5, 1e-15);  // hidden_size^-0.5
  // Router + 4 active experts (2 shared, top 2) of 2I x H + I x H each.
  const int64_t active = 4 * kHidden + 4 * (6 * kHidden + 3 * kHidden);
  EXPECT_EQ(moe.matmul_weight_count(), active);
  MicroBatch batch;
  batch.tokens = zeros(Shape{5}, DType::int64);
  EXPECT_EQ(moe.flops(batch), 6.0 * 5 * double(active));
}

struct MoeCase {
  std::string name;
  std::string yaml;
  int64_t tokens = 7;
};

void PrintTo(const MoeCase& test_case, std::ostream* stream) { *stream << test_case.yaml; }

class MoeMlpTest : public ::testing::TestWithParam<MoeCase> {};

// dot(output, w) + the logged losses times their gradient factors (coefficient x routed experts for aux).
double objective(MoeMlp& moe, const MoeMlpConfig& config, const Tensor& input, const std::vector<double>& weights,
                 uint64_t seed) {
  MicroBatch batch;
  LossSums losses;
  LayerContext context = make_context(batch, /*training=*/true, &losses, 1.0, seed);
  double value = dot(moe.forward(context, input), weights);
  for (const auto& [name, sum] : losses.all()) {
    if (name == "load_balancing_loss")
      value += config.auxiliary_loss_coefficient * (config.experts - config.shared_experts) * sum.item();
    else if (name == "router_z_loss")
      value += config.z_loss_coefficient * sum.item();
  }
  return value;
}

TEST_P(MoeMlpTest, BackwardMatchesFiniteDifferences) {
  const MoeCase& test_case = GetParam();
  MlpHolder holder = mlp_config(test_case.yaml);
  const MoeMlpConfig& config = moe_config(holder);
  MoeMlp moe("mlp", config, kHidden, 1.0);
  bind_parameters(moe, 5);
  Tensor input = random_tensor(Shape{test_case.tokens, kHidden}, 6, 1.5);
  std::vector<double> weights = random_values(test_case.tokens * kHidden, 7);
  const uint64_t seed = 99;
  MicroBatch batch;
  LossSums losses;
  LayerContext context = make_context(batch, /*training=*/true, &losses, 1.0, seed);
  Tensor output = moe.forward(context, input);
  Tensor grad_input = moe.backward(context, tensor_from(weights, output.shape()));
  auto function = [&] { return objective(moe, config, input, weights, seed); };
  expect_gradient(function, input, grad_input, "input", 64);
  for (Parameter* parameter : moe.parameters())
    expect_gradient(function, parameter->weight, parameter->grad, parameter->meta.name, 256);
}

std::vector<MoeCase> moe_cases() {
  const std::string common = "type: moe, add_linear_biases: false, intermediate_size: 3";
  return {
      {"gated_shared_aux_z",
       "{" + common + ", gated: true, experts: 5, shared_experts: 1, experts_per_token: 2, "
                      "auxiliary_loss_coefficient: 0.3, z_loss_coefficient: 0.2}"},
      {"not_gated_gelu", "{" + common + ", gated: false, activation: gelu, experts: 4, experts_per_token: 2, "
                                        "auxiliary_loss_coefficient: 0.1}"},
      {"sinkhorn_top1", "{" + common + ", gated: true, experts: 4, routing: sinkhorn, z_loss_coefficient: 0.5}"},
      {"sinkhorn_top2_shared", "{" + common + ", gated: false, activation: relu, experts: 5, shared_experts: 1, "
                                              "experts_per_token: 2, routing: sinkhorn}"},
      {"input_scale_and_jitter", "{" + common + ", gated: true, experts: 4, experts_per_token: 2, "
                                                "router_input_scale: 0.5, jitter_eps: 0.1, z_loss_coefficient: 0.1}"},
      // 3 tokens, 8 experts, top 1: at least 5 experts get no token.
      {"experts_without_tokens", "{" + common + ", gated: true, experts: 8, experts_per_token: 1}", 3},
      {"fine_grained_64_top_8", "{type: moe, add_linear_biases: false, intermediate_size: 2, gated: true, experts: 64, "
                                "experts_per_token: 8, auxiliary_loss_coefficient: 0.01, z_loss_coefficient: 0.001}",
       10},
  };
}

INSTANTIATE_TEST_SUITE_P(Configs, MoeMlpTest, ::testing::ValuesIn(moe_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(MoeMlp, ForwardIsPerTokenLoop) {
  struct Case {
    std::string yaml;
    int experts, shared, top_k;
    int64_t intermediate;
    bool gated;
    std::string act;
    double input_scale;
    int64_t tokens;
  };
  for (const Case& c : {Case{"{type: moe, add_linear_biases: false, intermediate_size: 3, gated: true, experts: 5, "
                             "shared_experts: 1, experts_per_token: 2}",
                             5, 1, 2, 3, true, "silu", 1.0, 7},
                        Case{"{type: moe, add_linear_biases: false, intermediate_size: 2, gated: false, "
                             "activation: gelu, experts: 8, experts_per_token: 1, router_input_scale: 0.5}",
                             8, 0, 1, 2, false, "gelu", 0.5, 3},
                        Case{"{type: moe, add_linear_biases: false, intermediate_size: 2, gated: true, experts: 64, "
                             "experts_per_token: 8}",
                             64, 0, 8, 2, true, "silu", 1.0, 10}}) {
    SCOPED_TRACE(c.yaml);
    MlpHolder holder = mlp_config(c.yaml);
    MoeMlp moe("mlp", moe_config(holder), kHidden, 1.0);
    bind_parameters(moe, 11);
    Tensor input = random_tensor(Shape{c.tokens, kHidden}, 12, 1.5);
    MicroBatch batch;
    LayerContext context = make_context(batch, /*training=*/false);
    const std::vector<double> output = values_of(moe.forward(context, input));
    const auto parameters = moe.parameters();
    const std::vector<double> expected =
        per_token_moe(values_of(input), c.tokens, values_of(parameters[0]->weight), values_of(parameters[1]->weight),
                      values_of(parameters[2]->weight), c.experts, c.shared, c.top_k, c.intermediate, c.gated, c.act,
                      c.input_scale);
    ASSERT_EQ(output.size(), expected.size());
    for (size_t index = 0; index < output.size(); ++index) EXPECT_NEAR(output[index], expected[index], 1e-12);
  }
}

// A micro-batch without tokens: empty outputs, zero gradients.
TEST(MoeMlp, NoTokens) {
  MlpHolder holder = mlp_config("{type: moe, add_linear_biases: false, intermediate_size: 2, experts: 4, "
                                "experts_per_token: 2, z_loss_coefficient: 0.1}");
  MoeMlp moe("mlp", moe_config(holder), kHidden, 1.0);
  bind_parameters(moe, 28);
  MicroBatch batch;
  LossSums losses;
  LayerContext context = make_context(batch, /*training=*/true, &losses);
  Tensor output = moe.forward(context, zeros(Shape{0, kHidden}));
  EXPECT_EQ(output.shape(), (Shape{0, kHidden}));
  EXPECT_EQ(moe.backward(context, zeros(Shape{0, kHidden})).shape(), (Shape{0, kHidden}));
  for (Parameter* parameter : moe.parameters()) EXPECT_EQ(max_abs(values_of(parameter->grad)), 0.0);
  for (const auto& [name, sum] : losses.all()) EXPECT_EQ(sum.item(), 0.0) << name;
}

// The step's first accumulation writes the gradients: experts without tokens get zero blocks, not what was there.
TEST(MoeMlp, FirstAccumulationWritesZerosForExpertsWithoutTokens) {
  MlpHolder holder = mlp_config("{type: moe, add_linear_biases: false, intermediate_size: 2, experts: 8}");
  MoeMlp moe("mlp", moe_config(holder), kHidden, 1.0);
  bind_parameters(moe, 13);
  for (Parameter* parameter : moe.parameters()) {
    std::fill_n(parameter->grad.data_as<double>(), parameter->grad.numel(), NAN);
    parameter->grad_started = false;
  }
  Tensor input = random_tensor(Shape{2, kHidden}, 14);
  MicroBatch batch;
  LayerContext context = make_context(batch, /*training=*/true);
  Tensor output = moe.forward(context, input);
  moe.backward(context, random_tensor(output.shape(), 15));
  int zero_blocks = 0;
  for (Parameter* parameter : moe.parameters()) {
    const std::vector<double> grad = values_of(parameter->grad);
    for (double value : grad) ASSERT_TRUE(std::isfinite(value)) << parameter->meta.name;
    if (parameter->meta.name == "mlp.layer_2.weight")
      for (int64_t expert = 0; expert < 8; ++expert)
        zero_blocks += std::all_of(grad.begin() + expert * 2 * kHidden, grad.begin() + (expert + 1) * 2 * kHidden,
                                   [](double value) { return value == 0.0; });
  }
  EXPECT_GE(zero_blocks, 6);  // two tokens, top 1: at most two experts have tokens
}

// fp32 and bf16 compute (fp32 logits and scores, fp32 gradients; the router's gradient cast to the compute dtype)
// against fp64, within the compute dtype's rounding.
TEST(MoeMlp, LowPrecisionMatchesFloat64) {
  MlpHolder holder = mlp_config("{type: moe, add_linear_biases: false, intermediate_size: 4, gated: true, experts: 5, "
                                "shared_experts: 1, experts_per_token: 2, z_loss_coefficient: 0.1, jitter_eps: 0.05}");
  struct Result {
    std::vector<double> output, grad_input;
    std::vector<std::vector<double>> grads;
  };
  auto run = [&](DType dtype) {
    MoeMlp moe("mlp", moe_config(holder), kHidden, 1.0);
    bind_parameters(moe, 24, dtype, dtype == DType::float64 ? DType::float64 : DType::float32);
    Tensor input = random_tensor(Shape{6, kHidden}, 25, 1.0, dtype);
    MicroBatch batch;
    LossSums losses;
    LayerContext context = make_context(batch, /*training=*/true, &losses, 1.0, /*dropout_seed=*/26, dtype);
    Result result;
    result.output = values_of(moe.forward(context, input));
    result.grad_input = values_of(moe.backward(context, random_tensor(Shape{6, kHidden}, 27, 1.0, dtype)));
    for (Parameter* parameter : moe.parameters()) result.grads.push_back(values_of(parameter->grad));
    return result;
  };
  const Result reference = run(DType::float64);
  for (const auto& [dtype, tolerance] : {std::pair{DType::float32, 1e-5}, std::pair{DType::bfloat16, 3e-2}}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Result result = run(dtype);
    auto expect_close = [&](const std::vector<double>& actual, const std::vector<double>& expected,
                            const std::string& what) {
      ASSERT_EQ(actual.size(), expected.size()) << what;
      const double scale = std::max(1.0, max_abs(expected));
      for (size_t index = 0; index < actual.size(); ++index)
        EXPECT_NEAR(actual[index], expected[index], tolerance * scale) << what << "[" << index << "]";
    };
    expect_close(result.output, reference.output, "output");
    expect_close(result.grad_input, reference.grad_input, "grad_input");
    for (size_t parameter = 0; parameter < reference.grads.size(); ++parameter)
      expect_close(result.grads[parameter], reference.grads[parameter], "gradient " + std::to_string(parameter));
  }
}

TEST(MoeMlp, RecomputationLevelsGiveIdenticalGradients) {
  struct Result {
    std::vector<double> grad_input;
    std::vector<std::vector<double>> grads;
  };
  auto run = [](const std::string& level) {
    MlpHolder holder = mlp_config("{type: moe, add_linear_biases: false, intermediate_size: 3, gated: true, experts: 6, "
                                  "shared_experts: 1, experts_per_token: 2, z_loss_coefficient: 0.1, "
                                  "recompute_level: " + level + "}");
    MoeMlp moe("mlp", moe_config(holder), kHidden, 1.0);
    bind_parameters(moe, 16);
    Tensor input = random_tensor(Shape{9, kHidden}, 17);
    MicroBatch batch;
    LayerContext context = make_context(batch, /*training=*/true);
    Tensor output = moe.forward(context, input);
    Result result{.grad_input = values_of(moe.backward(context, random_tensor(output.shape(), 18))), .grads = {}};
    for (Parameter* parameter : moe.parameters()) result.grads.push_back(values_of(parameter->grad));
    return result;
  };
  const Result kept = run("none");
  for (const std::string level : {"activation", "activation_and_input", "full"}) {
    const Result recomputed = run(level);
    EXPECT_EQ(recomputed.grad_input, kept.grad_input) << level;
    EXPECT_EQ(recomputed.grads, kept.grads) << level;
  }
}

// The losses go to the step's sums as already-normalised values: each micro-batch adds its loss divided by the
// micro-batches in the step; validation logs them too.
TEST(MoeMlp, LogsNormalisedLosses) {
  MlpHolder holder = mlp_config("{type: moe, add_linear_biases: false, intermediate_size: 2, experts: 3, "
                                "z_loss_coefficient: 0.1}");
  MoeMlp moe("mlp", moe_config(holder), kHidden, 1.0);
  bind_parameters(moe, 19);
  Tensor input = random_tensor(Shape{5, kHidden}, 20);
  for (bool training : {true, false}) {
    MicroBatch batch;
    LossSums one, two;
    LayerContext single = make_context(batch, training, &one);
    moe.forward(single, input);
    LayerContext half = make_context(batch, training, &two);
    half.micro_batches_in_step = 2;
    moe.forward(half, input);
    ASSERT_EQ(one.all().size(), 2u);
    for (const auto& [name, sum] : one.all()) {
      EXPECT_EQ(one.normalization(name), LossNormalization::normalized) << name;
      EXPECT_GT(sum.item(), 0.0) << name;
      EXPECT_NEAR(two.all().at(name).item(), sum.item() / 2, 1e-15) << name;
      EXPECT_EQ(loss_value(LossNormalization::normalized, sum.item(), 1000), sum.item());
    }
  }
}

TEST(MoeMlp, RefusesUnsupportedSettings) {
  auto refusal = [](const std::string& yaml) -> std::string {
    MlpHolder holder = mlp_config(yaml);
    try {
      MoeMlp moe("mlp", moe_config(holder), kHidden, 1.0);
    } catch (const NotSupportedError& error) {
      return error.what();
    }
    return "(no error)";
  };
  const std::string base = "type: moe, intermediate_size: 2, experts: 4";
  EXPECT_NE(refusal("{" + base + "}").find("mlp.add_linear_biases: the mixture of experts has no biases"),
            std::string::npos);
  EXPECT_NE(refusal("{" + base + ", add_linear_biases: false, router_normalization: {type: rms_norm}}")
                .find("mlp.router_normalization"),
            std::string::npos);
  EXPECT_NE(refusal("{" + base + ", add_linear_biases: false, router_scale: {enabled: true}}").find("mlp.router_scale"),
            std::string::npos);
  EXPECT_NE(refusal("{" + base + ", add_linear_biases: false, router_per_expert_scale: {enabled: true}}")
                .find("mlp.router_per_expert_scale"),
            std::string::npos);
  EXPECT_NE(refusal("{" + base + ", add_linear_biases: false, pre_norm: {type: rms_norm}}").find("mlp.pre_norm"),
            std::string::npos);
  // Validation errors of the config itself.
  EXPECT_THROW(mlp_config("{type: moe, experts: 4, experts_per_token: 5}"), Error);
  EXPECT_THROW(mlp_config("{type: moe, experts: 4, shared_experts: 3, experts_per_token: 2}"), Error);
  EXPECT_THROW(mlp_config("{type: hybrid_moe, dense: {gated: true}, routed: {experts: 4, gated: true, shared_experts: 1}}"), Error);
  EXPECT_THROW(mlp_config("{type: hybrid_moe, dense: {gated: true}, routed: {experts: 4, gated: false}}"), Error);
}

TEST(HybridMoeMlp, ForwardIsDensePlusExpertsAndBackwardMatchesFiniteDifferences) {
  const std::string yaml =
      "{type: hybrid_moe, dense: {intermediate_size: 3, gated: true, add_linear_biases: false}, "
      "routed: {intermediate_size: 2, gated: true, add_linear_biases: false, experts: 4, experts_per_token: 2, "
      "z_loss_coefficient: 0.2}}";
  MlpHolder holder = mlp_config(yaml);
  const auto& config = dynamic_cast<const HybridMoeMlpConfig&>(holder.mlp.get());
  HybridMoeMlp hybrid("mlp", config, kHidden, 1.0);
  EXPECT_EQ(parameter_names(hybrid), (std::vector<std::string>{"mlp.dense.layer_1.weight", "mlp.dense.layer_2.weight",
                                                                "mlp.routed.router.weight", "mlp.routed.layer_1.weight",
                                                                "mlp.routed.layer_2.weight"}));
  EXPECT_EQ(hybrid.matmul_weight_count(), (6 + 3) * kHidden + 4 * kHidden + 2 * (4 + 2) * kHidden);
  bind_parameters(hybrid, 21);
  const int64_t tokens = 6;
  Tensor input = random_tensor(Shape{tokens, kHidden}, 22);
  const auto parameters = hybrid.parameters();

  // Forward: the dense MLP written out plus the per-token MoE.
  MicroBatch batch;
  LayerContext validation = make_context(batch, /*training=*/false);
  const std::vector<double> output = values_of(hybrid.forward(validation, input));
  std::vector<double> expected = per_token_moe(values_of(input), tokens, values_of(parameters[2]->weight),
                                               values_of(parameters[3]->weight), values_of(parameters[4]->weight), 4,
                                               0, 2, 2, true, "silu", 1.0);
  // The dense MLP is one always-on expert of intermediate 3 with score 1: a 1-expert MoE.
  const std::vector<double> dense = per_token_moe(values_of(input), tokens, {0, 0, 0, 0},
                                                  values_of(parameters[0]->weight), values_of(parameters[1]->weight),
                                                  1, 0, 1, 3, true, "silu", 1.0);
  for (size_t index = 0; index < output.size(); ++index)
    EXPECT_NEAR(output[index], expected[index] + dense[index], 1e-12);

  std::vector<double> weights = random_values(tokens * kHidden, 23);
  LossSums losses;
  LayerContext context = make_context(batch, /*training=*/true, &losses);
  hybrid.forward(context, input);
  Tensor grad_input = hybrid.backward(context, tensor_from(weights, Shape{tokens, kHidden}));
  auto function = [&] {
    LossSums sums;
    LayerContext fresh = make_context(batch, /*training=*/true, &sums);
    // Default auxiliary_loss_coefficient 0.01, times the 4 routed experts.
    return dot(hybrid.forward(fresh, input), weights) + 0.2 * sums.all().at("router_z_loss").item() +
           0.01 * 4 * sums.all().at("load_balancing_loss").item();
  };
  expect_gradient(function, input, grad_input, "input");
  for (Parameter* parameter : parameters)
    expect_gradient(function, parameter->weight, parameter->grad, parameter->meta.name, 128);
}

}  // namespace
}  // namespace fast_llm::layers
