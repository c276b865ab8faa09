// Learning-rate schedules against hand-computed values (Fast-LLM's rules: steps count from 1, a step at a stage's end
// belongs to the next stage, the rate stays where the last bounded stage ended).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "fast_llm/engine/optimizer/learning_rate.h"
#include "models/config_test_util.h"

namespace fast_llm::engine {
namespace {

using testing::load_config;

LearningRateSchedule schedule(const std::string& yaml) {
  return LearningRateSchedule(load_config<LearningRateScheduleConfig>(yaml, "optimizer.learning_rate"));
}

TEST(LearningRate, ConstantWithWarmup) {
  auto rate = schedule("{base: 1.0e-3, warmup_iterations: 10}");
  EXPECT_DOUBLE_EQ(rate(1), 1e-4);
  EXPECT_DOUBLE_EQ(rate(5), 5e-4);
  EXPECT_DOUBLE_EQ(rate(9), 9e-4);
  EXPECT_DOUBLE_EQ(rate(10), 1e-3);
  EXPECT_DOUBLE_EQ(rate(1000000), 1e-3);
}

TEST(LearningRate, ConstantWithoutWarmupStartsAtBase) {
  auto rate = schedule("{base: 3.0e-4}");
  EXPECT_DOUBLE_EQ(rate(1), 3e-4);
  EXPECT_DOUBLE_EQ(rate(12345), 3e-4);
}

TEST(LearningRate, LinearDecayToMinimum) {
  auto rate = schedule("{base: 1.0e-3, decay_style: linear, decay_iterations: 100, minimum: 1.0e-5}");
  EXPECT_NEAR(rate(1), 1e-3 + 0.01 * (1e-5 - 1e-3), 1e-18);
  EXPECT_NEAR(rate(50), 5.05e-4, 1e-18);
  EXPECT_NEAR(rate(100), 1e-5, 1e-18);
  EXPECT_NEAR(rate(500), 1e-5, 1e-18);
}

TEST(LearningRate, CosineAfterWarmup) {
  auto rate = schedule("{base: 2.0e-3, warmup_iterations: 10, decay_style: cosine, decay_iterations: 110}");
  EXPECT_DOUBLE_EQ(rate(5), 1e-3);
  EXPECT_DOUBLE_EQ(rate(10), 2e-3);
  // Quarter of the decay: 0.5 * (1 - cos(pi / 4)) of the way down.
  EXPECT_NEAR(rate(35), 2e-3 * (1.0 - 0.5 * (1.0 - std::cos(std::numbers::pi / 4))), 1e-15);
  EXPECT_NEAR(rate(60), 1e-3, 1e-15);
  EXPECT_NEAR(rate(110), 0.0, 1e-18);
  EXPECT_NEAR(rate(111), 0.0, 1e-18);
}

TEST(LearningRate, PowerDecay) {
  auto rate = schedule("{base: 1.0, decay_style: power, decay_power: 2.0, decay_iterations: 100, minimum: 0.2}");
  // c = 0.5: 1 + 0.25 * (0.2 - 1)
  EXPECT_DOUBLE_EQ(rate(50), 0.8);
  EXPECT_DOUBLE_EQ(rate(10), 1.0 + 0.01 * (0.2 - 1.0));
}

TEST(LearningRate, ScheduleStringWarmupStableDecay) {
  auto rate = schedule("{schedule: 'linear,2000,0,3e-4;constant,80000,3e-4;linear,18000,3e-4,0'}");
  EXPECT_DOUBLE_EQ(rate(1000), 1.5e-4);
  EXPECT_DOUBLE_EQ(rate(2000), 3e-4);
  EXPECT_DOUBLE_EQ(rate(50000), 3e-4);
  EXPECT_DOUBLE_EQ(rate(82000), 3e-4);
  EXPECT_NEAR(rate(91000), 1.5e-4, 1e-18);
  EXPECT_NEAR(rate(100000), 0.0, 1e-18);
  EXPECT_NEAR(rate(200000), 0.0, 1e-18);
}

TEST(LearningRate, ScheduleStringCosineWithPowerAndOpenEnd) {
  auto rate = schedule("{schedule: 'cosine,100,1.0,0.0,2.0;constant,-1,0.5'}");
  // c = 0.5, c^2 = 0.25: 1 - 0.5 * (1 - cos(pi / 4))
  EXPECT_NEAR(rate(50), 1.0 - 0.5 * (1.0 - std::cos(std::numbers::pi / 4)), 1e-15);
  EXPECT_DOUBLE_EQ(rate(100), 0.5);
  EXPECT_DOUBLE_EQ(rate(1000000000), 0.5);
}

TEST(LearningRate, InvalidScheduleIsAConfigError) {
  EXPECT_NE(testing::config_error<LearningRateScheduleConfig>("{schedule: 'linear,100,1.0'}", "optimizer.learning_rate"),
            "");
  EXPECT_NE(testing::config_error<LearningRateScheduleConfig>("{schedule: 'constant,-1,1.0;constant,10,1.0'}",
                                                              "optimizer.learning_rate"),
            "");
  EXPECT_NE(testing::config_error<LearningRateScheduleConfig>("{decay_style: cosine}", "optimizer.learning_rate"), "");
}

}  // namespace
}  // namespace fast_llm::engine
