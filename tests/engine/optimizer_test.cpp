// The optimizer against scalar formulas: AdamW with bias correction, decoupled weight decay only where the parameter
// takes it, lr_scale per group, global-norm clipping, loss scaling, and skipped steps on non-finite gradients (decided
// from the device state without the host, counted by the step records when read).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "engine/engine_test_util.h"
#include "fast_llm/core/half.h"
#include "fast_llm/engine/optimizer/grad_scaler.h"
#include "fast_llm/engine/optimizer/optimizer.h"
#include "fast_llm/engine/training/step_records.h"
#include "fast_llm/kernels/optimizer_ops.h"

namespace fast_llm::engine {
namespace {

using testing::load_config;

// A test model (fp64 unless `distributed_config` says otherwise) with optimizer settings where every term of Adam
// matters: epsilon is large enough that the clipping coefficient changes the update.
struct OptimizerSetup {
  explicit OptimizerSetup(const std::string& optimizer_yaml,
                          DistributedConfig distributed_config = testing::cpu_distributed())
      : distributed(std::move(distributed_config)),
        optimizer_config(load_config<OptimizerConfig>(optimizer_yaml, "optimizer")),
        multi_stage(model, multi_stage_config, distributed, Device::cpu()),
        optimizer(optimizer_config, multi_stage) {
    multi_stage.initialize_weights();
  }

  // Sets gradient element i of every parameter to `value(name, i)`.
  template <class Function>
  void set_gradients(Function value) {
    multi_stage.zero_gradients();
    for (layers::Layer* layer : multi_stage.layers())
      for (layers::Parameter* parameter : layer->parameters())
        for (int64_t i = 0; i < parameter->grad.numel(); ++i) {
          if (parameter->grad.dtype() == DType::float64)
            parameter->grad.data_as<double>()[i] = value(parameter->meta.name, i);
          else
            parameter->grad.data_as<float>()[i] = float(value(parameter->meta.name, i));
        }
  }

  std::map<std::string, std::vector<double>> weights() {
    std::map<std::string, std::vector<double>> result;
    for (layers::Layer* layer : multi_stage.layers())
      for (layers::Parameter* parameter : layer->parameters())
        result[parameter->meta.name] = testing::values(parameter->weight);
    return result;
  }

  DistributedConfig distributed;
  MultiStageConfig multi_stage_config = testing::multi_stage_config("{layers_per_stage: 2}");
  OptimizerConfig optimizer_config;
  testing::TestModel model{7, 3, 2};
  MultiStage multi_stage;
  Optimizer optimizer;
};

constexpr const char* kOptimizerYaml =
    "{learning_rate: {base: 0.1}, weight_decay: 0.2, beta_1: 0.8, beta_2: 0.9, epsilon: 0.05, "
    "gradient_norm_clipping: 0.5}";

double gradient_value(const std::string& name, int64_t i) {
  double sign = (i % 3 == 1) ? -1.0 : 1.0;
  return sign * 0.02 * double(i + 1) * double(name.size());
}

TEST(Optimizer, ClippingCoefficient) {
  EXPECT_DOUBLE_EQ(clipping_coefficient(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_DOUBLE_EQ(clipping_coefficient(0.5, 1.0), 1.0);
  EXPECT_LT(clipping_coefficient(1.0, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clipping_coefficient(0.0, 1.0), 1.0);
}

TEST(Optimizer, TwoAdamStepsMatchTheScalarFormula) {
  OptimizerSetup setup(kOptimizerYaml);
  const double lr = 0.1, weight_decay = 0.2, beta_1 = 0.8, beta_2 = 0.9, epsilon = 0.05, clip = 0.5;
  auto expected = setup.weights();
  std::map<std::string, std::vector<double>> m, v;
  std::map<std::string, const layers::ParameterMeta*> metas;
  for (layers::Layer* layer : setup.multi_stage.layers())
    for (layers::Parameter* parameter : layer->parameters()) {
      metas[parameter->meta.name] = &parameter->meta;
      m[parameter->meta.name].assign(size_t(parameter->meta.shape.numel()), 0.0);
      v[parameter->meta.name].assign(size_t(parameter->meta.shape.numel()), 0.0);
    }
  // The test model's settings: linear biases have lr_scale 0.5 and no weight decay, the head's bias no weight decay.
  ASSERT_FALSE(metas.at("decoder.0.bias")->weight_decay);
  ASSERT_EQ(metas.at("decoder.0.bias")->lr_scale, 0.5);
  ASSERT_TRUE(metas.at("decoder.0.weight")->weight_decay);

  for (int step = 1; step <= 2; ++step) {
    auto gradient = [&](const std::string& name, int64_t i) { return gradient_value(name, i) * (step == 1 ? 1 : -3); };
    setup.set_gradients(gradient);
    double squared = 0;
    for (const auto& [name, weights] : expected)
      for (size_t i = 0; i < weights.size(); ++i) squared += gradient(name, int64_t(i)) * gradient(name, int64_t(i));
    const double norm = std::sqrt(squared);
    const double coefficient = std::min(1.0, clip / (norm + 1e-6));
    ASSERT_LT(coefficient, 1.0);  // clipping is active

    setup.optimizer.step();
    OptimizerStepResult result = setup.optimizer.last_step_result();
    ASSERT_TRUE(result.successful);
    EXPECT_NEAR(result.grad_norm, norm, 1e-12 * norm);
    EXPECT_DOUBLE_EQ(result.learning_rate, lr);
    EXPECT_EQ(setup.optimizer.optimizer_step(), step);

    for (auto& [name, weights] : expected) {
      const layers::ParameterMeta& meta = *metas.at(name);
      for (size_t i = 0; i < weights.size(); ++i) {
        const double g = gradient(name, int64_t(i)) * coefficient;
        double& mi = m[name][i];
        double& vi = v[name][i];
        mi = beta_1 * mi + (1 - beta_1) * g;
        vi = beta_2 * vi + (1 - beta_2) * g * g;
        const double m_hat = mi / (1 - std::pow(beta_1, step));
        const double v_hat = vi / (1 - std::pow(beta_2, step));
        const double decay = meta.weight_decay ? weight_decay : 0.0;
        weights[i] -= lr * meta.lr_scale * (m_hat / (std::sqrt(v_hat) + epsilon) + decay * weights[i]);
      }
    }
    auto actual = setup.weights();
    for (const auto& [name, weights] : expected)
      for (size_t i = 0; i < weights.size(); ++i)
        ASSERT_NEAR(actual.at(name)[i], weights[i], 1e-14) << name << "[" << i << "] at step " << step;
  }
}

TEST(Optimizer, NonFiniteGradientSkipsTheStep) {
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    OptimizerSetup setup(kOptimizerYaml);
    const auto before = setup.weights();
    setup.set_gradients([&](const std::string& name, int64_t i) {
      return name == "decoder.1.weight" && i == 4 ? bad : gradient_value(name, i);
    });
    setup.optimizer.step();
    OptimizerStepResult result = setup.optimizer.last_step_result();
    EXPECT_FALSE(result.successful);
    EXPECT_FALSE(std::isfinite(result.grad_norm));
    EXPECT_EQ(setup.optimizer.optimizer_step(), 0);
    EXPECT_EQ(setup.weights(), before);
    for (auto& stage : setup.multi_stage.stages())
      for (double value : testing::values(stage->exp_avg())) ASSERT_EQ(value, 0.0);

    // The next finite step is step 1 (bias correction and schedule).
    setup.set_gradients(gradient_value);
    setup.optimizer.step();
    result = setup.optimizer.last_step_result();
    EXPECT_TRUE(result.successful);
    EXPECT_EQ(setup.optimizer.optimizer_step(), 1);
    EXPECT_NE(setup.weights(), before);
  }
}

// Mixed precision (bf16 weights, fp32 master weights and gradients): Adam refreshes the bf16 weights in its own pass.
// They must be bit for bit the cast of the master weights, after an applied step (where they move) and after a skipped
// one (where nothing moves).
TEST(Optimizer, MixedPrecisionWeightsStayTheCastOfTheMasterWeights) {
  OptimizerSetup setup(kOptimizerYaml, testing::cpu_distributed(/*seed=*/1234, "bfloat16", "float32"));
  auto expect_cast_of_master = [&] {
    for (auto& stage : setup.multi_stage.stages()) {
      ASSERT_TRUE(stage->trainable_compute_weight_shard().defined());
      const float* master = stage->weight_shard().data_as<float>();
      const bfloat16* weights = stage->weight_buffer().data_as<bfloat16>();
      for (int64_t i = 0; i < stage->weight_shard().numel(); ++i)
        ASSERT_EQ(weights[i].bits, to_bfloat16(master[i]).bits) << "stage " << stage->index() << " element " << i;
    }
  };
  const auto initial = setup.weights();
  setup.set_gradients(gradient_value);
  setup.optimizer.step();
  EXPECT_TRUE(setup.optimizer.last_step_result().successful);
  EXPECT_NE(setup.weights(), initial);
  expect_cast_of_master();

  const auto updated = setup.weights();
  setup.set_gradients([](const std::string& name, int64_t i) {
    return name == "decoder.0.weight" && i == 2 ? std::numeric_limits<double>::infinity() : gradient_value(name, i);
  });
  setup.optimizer.step();
  EXPECT_FALSE(setup.optimizer.last_step_result().successful);
  EXPECT_EQ(setup.weights(), updated);
  expect_cast_of_master();
}

// Several steps queued before the host reads anything, as the trainer does between log lines: the skip is decided from
// the device state alone (the flag Adam reads), the counter and the rates follow the successful steps, and the step
// records count the skipped step when they are read.
TEST(Optimizer, SkipIsDecidedOnTheDeviceStateAndCountedWhenRead) {
  namespace field = kernels::optimizer_state;
  OptimizerSetup setup("{learning_rate: {base: 1.0, warmup_iterations: 4}, gradient_norm_clipping: 0.5}");
  StepRecords records(Device::cpu(), /*capacity=*/2);  // 3 steps: the first two are moved to the host on the way
  const auto nan = [](const std::string&, int64_t) { return std::numeric_limits<double>::quiet_NaN(); };
  std::vector<std::map<std::string, std::vector<double>>> weights{setup.weights()};
  int step_index = 0;
  for (bool finite : {true, false, true}) {
    if (finite)
      setup.set_gradients(gradient_value);
    else
      setup.set_gradients(nan);
    setup.optimizer.step();
    // The decision the Adam launches read.
    const double* state = setup.optimizer.step_state().data_as<double>();
    EXPECT_EQ(state[field::successful], finite ? 1.0 : 0.0);
    EXPECT_EQ(state[field::grad_scale] == 0.0, !finite);
    layers::LossSums losses;
    losses.get("mse", Device::cpu()).data_as<double>()[0] = finite ? 2.0 * (++step_index) : std::nan("");
    records.record(setup.optimizer.step_state(), losses, /*num_labels=*/4, /*loss_scale_search=*/false, Stream{});
    weights.push_back(setup.weights());
  }
  EXPECT_NE(weights[1], weights[0]);
  EXPECT_EQ(weights[2], weights[1]);  // skipped: nothing moved
  EXPECT_NE(weights[3], weights[2]);
  EXPECT_EQ(setup.optimizer.optimizer_step(), 2);
  EXPECT_EQ(records.pending(), 3);
  const std::vector<StepRecords::Step> steps = records.read(Stream{});
  EXPECT_EQ(records.pending(), 0);
  ASSERT_EQ(steps.size(), 3u);
  int skipped = 0;
  for (const StepRecords::Step& step : steps) skipped += !step.update.successful;
  EXPECT_EQ(skipped, 1);
  EXPECT_FALSE(steps[1].update.successful);
  EXPECT_TRUE(std::isnan(steps[1].update.grad_norm));
  // Rates by successful steps: warmup 1/4, then 2/4 for the skipped step's successor and for it.
  EXPECT_DOUBLE_EQ(steps[0].update.learning_rate, 0.25);
  EXPECT_DOUBLE_EQ(steps[1].update.learning_rate, 0.5);
  EXPECT_DOUBLE_EQ(steps[2].update.learning_rate, 0.5);
  EXPECT_LT(steps[0].update.clip_coefficient, 1.0);
  ASSERT_EQ(steps[2].loss_sums.size(), 1u);
  EXPECT_EQ(steps[2].loss_sums[0], (std::pair<std::string, double>{"mse", 4.0}));
  EXPECT_EQ(steps[2].num_labels, 4);
}

TEST(Optimizer, LearningRateFollowsTheScheduleBySuccessfulSteps) {
  OptimizerSetup setup("{learning_rate: {base: 1.0, warmup_iterations: 4}}");
  auto step = [&] {
    setup.optimizer.step();
    return setup.optimizer.last_step_result();
  };
  setup.set_gradients(gradient_value);
  EXPECT_DOUBLE_EQ(step().learning_rate, 0.25);
  setup.set_gradients([](const std::string&, int64_t) { return std::numeric_limits<double>::quiet_NaN(); });
  const OptimizerStepResult skipped = step();
  EXPECT_FALSE(skipped.successful);
  EXPECT_DOUBLE_EQ(skipped.learning_rate, 0.5);  // the rate of the next update
  setup.set_gradients(gradient_value);
  EXPECT_DOUBLE_EQ(step().learning_rate, 0.5);
}

TEST(Optimizer, ConstantLossScaleIsDividedOut) {
  OptimizerSetup scaled(std::string(kOptimizerYaml).insert(1, "gradient_scaler: {constant: 8.0}, "));
  OptimizerSetup plain(kOptimizerYaml);
  EXPECT_EQ(scaled.optimizer.loss_scale(), 8.0);
  EXPECT_EQ(plain.optimizer.loss_scale(), 1.0);
  // Gradients of a loss scaled by 8 are 8 times larger; the update must be that of the unscaled gradients.
  scaled.set_gradients([](const std::string& name, int64_t i) { return 8.0 * gradient_value(name, i); });
  plain.set_gradients(gradient_value);
  scaled.optimizer.step();
  plain.optimizer.step();
  OptimizerStepResult scaled_result = scaled.optimizer.last_step_result();
  OptimizerStepResult plain_result = plain.optimizer.last_step_result();
  EXPECT_NEAR(scaled_result.grad_norm, plain_result.grad_norm, 1e-12);
  auto scaled_weights = scaled.weights(), plain_weights = plain.weights();
  for (const auto& [name, weights] : plain_weights)
    for (size_t i = 0; i < weights.size(); ++i) ASSERT_NEAR(scaled_weights.at(name)[i], weights[i], 1e-14) << name;
}

TEST(Optimizer, DefaultLearningRateScaleOtherThanOneIsRefused) {
  EXPECT_THROW(OptimizerSetup("{default_learning_rate_scale: 0.5}"), NotSupportedError);
}

TEST(GradScaler, DynamicScalingForFloat16) {
  auto config = load_config<GradientScalerConfig>("{initial: 1024, minimum: 256, window: 3, hysteresis: 2}",
                                                  "optimizer.gradient_scaler");
  GradScaler scaler(config, DType::float16);
  EXPECT_TRUE(scaler.dynamic());
  EXPECT_EQ(scaler.scale(), 1024);
  scaler.update(false);  // hysteresis 2 -> 1: kept
  EXPECT_EQ(scaler.scale(), 1024);
  scaler.update(false);  // hysteresis exhausted: halved
  EXPECT_EQ(scaler.scale(), 512);
  scaler.update(false);  // still exhausted: halved again
  EXPECT_EQ(scaler.scale(), 256);
  scaler.update(false);  // not below the minimum
  EXPECT_EQ(scaler.scale(), 256);
  scaler.update(true);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 256);
  scaler.update(true);  // window of 3 successes: doubled, hysteresis restored
  EXPECT_EQ(scaler.scale(), 512);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 512);
  scaler.update(true);  // a success resets the window count, not the hysteresis
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 256);
}

TEST(GradScaler, NoScalingOutsideFloat16UnlessConstant) {
  auto config = load_config<GradientScalerConfig>("{}", "optimizer.gradient_scaler");
  for (DType dtype : {DType::bfloat16, DType::float32, DType::float64}) {
    GradScaler scaler(config, dtype);
    EXPECT_FALSE(scaler.dynamic());
    scaler.update(false);
    EXPECT_EQ(scaler.scale(), 1.0);
  }
  auto constant = load_config<GradientScalerConfig>("{constant: 4}", "optimizer.gradient_scaler");
  GradScaler scaler(constant, DType::float16);
  EXPECT_FALSE(scaler.dynamic());
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 4.0);
}

}  // namespace
}  // namespace fast_llm::engine
