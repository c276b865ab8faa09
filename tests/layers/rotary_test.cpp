// Rotary frequencies against values computed from Hugging Face's formulas (written out in a separate script, the
// numbers pasted here), the cos / sin tables, and their sharing between layers.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/attention/rotary.h"
#include "fast_llm/layers/block/shared_resources.h"
#include "layer_test_util.h"

namespace fast_llm::layers {
namespace {

using testing::load_config;

struct RotaryHolder : config::Config {
  config::Dynamic<RotaryConfig> rotary;
  void visit(config::Visitor& v) override { v(rotary, "rotary", "", config::Hint::core); }
};

RotaryFrequencies frequencies_of(const std::string& yaml, int64_t head_size) {
  RotaryHolder holder = load_config<RotaryHolder>("rotary: " + yaml);
  return holder.rotary->frequencies(head_size);
}

void expect_near_relative(const std::vector<double>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], 1e-14 * std::abs(expected[i])) << "pair " << i;
}

TEST(RotaryFrequencies, NoneHasNoFrequencies) {
  EXPECT_TRUE(frequencies_of("{type: none}", 16).inverse_frequencies.empty());
  Rotary rotary(RotaryFrequencies{});
  EXPECT_FALSE(rotary.enabled());
}

TEST(RotaryFrequencies, DefaultIsGeometric) {
  RotaryFrequencies frequencies = frequencies_of("{type: default, theta: 10000}", 16);
  // theta^(-2i/16) = 10^(-i/2)
  expect_near_relative(frequencies.inverse_frequencies,
                       {1.0, 0.31622776601683794, 0.1, 0.031622776601683791, 0.01, 0.0031622776601683794, 0.001,
                        0.00031622776601683794});
  EXPECT_EQ(frequencies.attention_factor, 1.0);
}

// head_size 16, theta 10^4, scale 8, low 1, high 4, original context 64: wavelengths 2 pi 10^(i/2); pair 0 (6.3) is
// below 64/4 (kept), pairs 1 and 2 (19.9, 62.8) are blended, pairs 3+ (above 64) are divided by 8.
TEST(RotaryFrequencies, Llama3MatchesHuggingFaceFormula) {
  RotaryFrequencies frequencies = frequencies_of(
      "{type: llama3, theta: 10000, scale_factor: 8, low_frequency_factor: 1, high_frequency_factor: 4, "
      "original_context_length: 64}",
      16);
  expect_near_relative(frequencies.inverse_frequencies,
                       {1.0, 0.24438459943539834, 0.013042256043820465, 0.0039528470752104739, 0.00125,
                        0.00039528470752104737, 0.000125, 3.9528470752104742e-05});
  EXPECT_EQ(frequencies.attention_factor, 1.0);
}

// head_size 16, theta 10^4, scale 4, beta 32 / 1, original context 8192: correction range [3, 7], ramp (i - 3) / 4.
TEST(RotaryFrequencies, YarnMatchesHuggingFaceFormula) {
  RotaryFrequencies frequencies = frequencies_of(
      "{type: yarn, theta: 10000, scale_factor: 4, beta_fast: 32, beta_slow: 1, original_context_length: 8192}", 16);
  expect_near_relative(frequencies.inverse_frequencies,
                       {1.0, 0.31622776601683794, 0.10000000000000001, 0.031622776601683791, 0.0081250000000000003,
                        0.001976423537605237, 0.00043750000000000001, 7.9056941504209485e-05});
  // Default attention factor 0.1 ln(4) + 1.
  EXPECT_NEAR(frequencies.attention_factor, 1.1386294361119891, 1e-15);
}

TEST(RotaryTables, CosSinOfPositionTimesFrequencyScaledByAttentionFactor) {
  RotaryHolder holder = load_config<RotaryHolder>(
      "rotary: {type: yarn, theta: 10000, scale_factor: 4, beta_fast: 32, beta_slow: 1, original_context_length: "
      "8192}");
  Rotary rotary(holder.rotary.get(), 16);
  Rotary::Tables tables = rotary.tables(6, Device::cpu(), {}, DType::float32);
  ASSERT_EQ(tables.cos.shape(), (Shape{6, 8}));
  ASSERT_EQ(tables.cos.dtype(), DType::float32);
  // Row 5, from the formula in a separate script.
  const std::vector<double> cos5{0.322986114, -0.0117760687, 0.999241338, 1.1244262,
                                 1.13768997,  1.13857384,    1.13862671,  1.13862935};
  const std::vector<double> sin5{-1.09185941, 1.13856854,    0.545888031,   0.179283921,
                                 0.0462440983, 0.011251887, 0.00249074991, 0.000450082792};
  for (int64_t i = 0; i < 8; ++i) {
    const int64_t index[2] = {5, i};
    EXPECT_NEAR(tables.cos.item_as_double(index), cos5[size_t(i)], 2e-7) << i;
    EXPECT_NEAR(tables.sin.item_as_double(index), sin5[size_t(i)], 2e-7) << i;
    const int64_t first[2] = {0, i};
    EXPECT_NEAR(tables.cos.item_as_double(first), 1.1386294361119891, 1e-6);
    EXPECT_EQ(tables.sin.item_as_double(first), 0.0);
  }
  // A shorter micro-batch gets the first rows of the same table; a longer one a new table.
  Rotary::Tables shorter = rotary.tables(3, Device::cpu(), {}, DType::float32);
  EXPECT_EQ(shorter.cos.shape(), (Shape{3, 8}));
  EXPECT_EQ(shorter.cos.data(), tables.cos.data());
  Rotary::Tables longer = rotary.tables(10, Device::cpu(), {}, DType::float32);
  EXPECT_EQ(longer.cos.shape(), (Shape{10, 8}));
  const int64_t index[2] = {5, 3};
  EXPECT_NEAR(longer.cos.item_as_double(index), cos5[3], 2e-7);
  const int64_t last[2] = {9, 0};
  EXPECT_NEAR(longer.sin.item_as_double(last), std::sin(9.0) * 1.1386294361119891, 2e-7);
  // fp64 compute gets fp64 tables (fp32 ones held fp64 runs to fp32 accuracy); bf16 compute the fp32 ones.
  Rotary::Tables exact = rotary.tables(10, Device::cpu(), {}, DType::float64);
  ASSERT_EQ(exact.cos.dtype(), DType::float64);
  EXPECT_NEAR(exact.sin.item_as_double(last), std::sin(9.0) * 1.1386294361119891, 1e-14);
  EXPECT_EQ(rotary.tables(4, Device::cpu(), {}, DType::bfloat16).cos.dtype(), DType::float32);
}

// Layers with equal frequencies get one Rotary (one table); other frequencies, or another head size, another.
TEST(SharedResources, EqualFrequenciesShareOneRotary) {
  RotaryHolder default_theta = load_config<RotaryHolder>("rotary: {type: default, theta: 100}");
  RotaryHolder same = load_config<RotaryHolder>("rotary: {type: default, theta: 100}");
  RotaryHolder other_theta = load_config<RotaryHolder>("rotary: {type: default, theta: 1000}");
  SharedResources shared;
  std::shared_ptr<Rotary> first = shared.rotary(default_theta.rotary.get(), 8);
  EXPECT_EQ(shared.rotary(same.rotary.get(), 8), first);
  EXPECT_NE(shared.rotary(other_theta.rotary.get(), 8), first);
  EXPECT_NE(shared.rotary(default_theta.rotary.get(), 4), first);
  EXPECT_EQ(first->frequencies(), default_theta.rotary->frequencies(8));
}

TEST(RotaryFrequencies, RefusesUnsupportedTypes) {
  EXPECT_THROW(frequencies_of("{type: default_2d}", 16), NotSupportedError);
  EXPECT_THROW(frequencies_of("{type: proportional}", 16), NotSupportedError);
  EXPECT_THROW(frequencies_of("{type: default}", 15), Error);
}

}  // namespace
}  // namespace fast_llm::layers
