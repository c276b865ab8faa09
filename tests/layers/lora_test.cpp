// LoRA adapters on the linear layer (layers/common/linear.h): the forward against the formula written out, backward
// against fp64 finite differences of A, B, the input and the base weight (output ranges and transposed storage
// included), dropout replayed from the seed, and the adapters the attention and the MLP get from the config.
#include <gtest/gtest.h>

#include <cmath>

#include "fast_llm/layers/attention/attention.h"
#include "fast_llm/layers/common/linear.h"
#include "fast_llm/layers/mlp/mlp.h"
#include "layer_test_util.h"

namespace fast_llm::layers {
namespace {

using namespace testing;

constexpr int64_t kTokens = 5, kInput = 4, kOutput = 6;

LinearOptions lora_linear_options(bool transposed, int64_t begin, int64_t end, double dropout = 0.0) {
  return {.input_size = kInput,
          .output_size = kOutput,
          .bias = true,
          .transposed_weight = transposed,
          .weight = {.initialization = Initialization::normal(0.5), .lr_scale = 2.0, .weight_decay = true},
          .bias_settings = {.initialization = Initialization::fill(0.0), .weight_decay = false},
          .lora = LoraOptions{.rank = 3, .alpha = 5.0, .dropout = dropout, .begin = begin, .end = end}};
}

struct LoraCase {
  bool transposed;
  int64_t begin, end;
};

void PrintTo(const LoraCase& test_case, std::ostream* stream) {
  *stream << (test_case.transposed ? "transposed, " : "") << "outputs [" << test_case.begin << ", " << test_case.end
          << ")";
}

class LoraLinearTest : public ::testing::TestWithParam<LoraCase> {};

TEST_P(LoraLinearTest, ForwardIsFormulaAndBackwardMatchesFiniteDifferences) {
  const auto [transposed, begin, end] = GetParam();
  const int64_t rank = 3, adapted = end - begin;
  Linear linear("layer", lora_linear_options(transposed, begin, end));
  bind_parameters(linear, 21);
  ASSERT_NE(linear.lora_0(), nullptr);
  EXPECT_EQ(linear.lora_0()->meta.name, "layer.lora_0.weight");
  EXPECT_EQ(linear.lora_1()->meta.name, "layer.lora_1.weight");
  EXPECT_EQ(linear.lora_0()->meta.shape, transposed ? (Shape{kInput, rank}) : (Shape{rank, kInput}));
  EXPECT_EQ(linear.lora_1()->meta.shape, transposed ? (Shape{rank, adapted}) : (Shape{adapted, rank}));
  EXPECT_TRUE(linear.lora_0()->meta.peft && linear.lora_1()->meta.peft && !linear.weight().meta.peft);
  // A as the wrapped weight (Fast-LLM), B zero (the adapter starts as a no-op); the weight's optimizer settings.
  EXPECT_EQ(linear.lora_0()->meta.initialization.kind, Initialization::Kind::normal);
  EXPECT_EQ(linear.lora_0()->meta.initialization.std, 0.5);
  EXPECT_EQ(linear.lora_1()->meta.initialization.kind, Initialization::Kind::fill);
  EXPECT_EQ(linear.lora_1()->meta.initialization.value, 0.0);
  EXPECT_EQ(linear.lora_1()->meta.lr_scale, 2.0);

  Tensor input = random_tensor(Shape{kTokens, kInput}, 22);
  Tensor output = linear.forward(input, {});
  // y[t, o] = sum_i x W(o, i) + b[o] + (alpha / rank) sum_r B(o - begin, r) sum_i A(r, i) x[t, i] for o in [begin, end)
  auto x = values_of(input), w = values_of(linear.weight().weight), b = values_of(linear.bias()->weight),
       a = values_of(linear.lora_0()->weight), bb = values_of(linear.lora_1()->weight), y = values_of(output);
  const double scale = 5.0 / 3.0;
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t o = 0; o < kOutput; ++o) {
      double expected = b[size_t(o)];
      for (int64_t i = 0; i < kInput; ++i)
        expected += x[size_t(t * kInput + i)] * w[size_t(transposed ? i * kOutput + o : o * kInput + i)];
      if (o >= begin && o < end)
        for (int64_t r = 0; r < rank; ++r) {
          double middle = 0.0;
          for (int64_t i = 0; i < kInput; ++i)
            middle += x[size_t(t * kInput + i)] * a[size_t(transposed ? i * rank + r : r * kInput + i)];
          const int64_t row = o - begin;
          expected += scale * middle * bb[size_t(transposed ? r * adapted + row : row * rank + r)];
        }
      EXPECT_NEAR(y[size_t(t * kOutput + o)], expected, 1e-12) << t << ", " << o;
    }

  // Backward, the whole layer and (non-transposed) the two halves as attention's key_value calls them.
  std::vector<double> output_weights = random_values(kTokens * kOutput, 23);
  Tensor grad_output = tensor_from(output_weights, Shape{kTokens, kOutput});
  auto objective = [&] { return dot(linear.forward(input, {}), output_weights); };
  Tensor grad_input = linear.backward(grad_output, input, {});
  expect_gradient(objective, input, grad_input, "input");
  expect_gradient(objective, linear.lora_0()->weight, linear.lora_0()->grad, "lora_0");
  expect_gradient(objective, linear.lora_1()->weight, linear.lora_1()->grad, "lora_1");
  expect_gradient(objective, linear.weight().weight, linear.weight().grad, "weight");
  if (transposed) return;
  zero_gradients(linear);
  const Linear::OutputRange halves[] = {{0, 3}, {3, kOutput}};
  Tensor split_grad_input = zeros(Shape{kTokens, kInput});
  for (const Linear::OutputRange& half : halves) {
    std::vector<double> part(size_t(kTokens * (half.end - half.begin)));
    for (int64_t t = 0; t < kTokens; ++t)
      for (int64_t o = half.begin; o < half.end; ++o)
        part[size_t(t * (half.end - half.begin) + o - half.begin)] = output_weights[size_t(t * kOutput + o)];
    Tensor part_output = linear.forward(input, {}, half);
    auto full = values_of(output), got = values_of(part_output);
    for (int64_t t = 0; t < kTokens; ++t)
      for (int64_t o = half.begin; o < half.end; ++o)
        EXPECT_NEAR(got[size_t(t * (half.end - half.begin) + o - half.begin)], full[size_t(t * kOutput + o)], 1e-12);
    linear.backward(tensor_from(part, Shape{kTokens, half.end - half.begin}), input, &split_grad_input,
                    /*accumulate_grad_input=*/true, {}, half);
  }
  expect_gradient(objective, input, split_grad_input, "input (halves)");
  expect_gradient(objective, linear.lora_0()->weight, linear.lora_0()->grad, "lora_0 (halves)");
  expect_gradient(objective, linear.lora_1()->weight, linear.lora_1()->grad, "lora_1 (halves)");
}

INSTANTIATE_TEST_SUITE_P(Cases, LoraLinearTest,
                         ::testing::Values(LoraCase{false, 0, kOutput}, LoraCase{false, 3, kOutput},
                                           LoraCase{false, 1, 4}, LoraCase{true, 0, kOutput}, LoraCase{true, 2, 5}));

TEST(LoraLinear, DropoutMaskIsReplayedInBackward) {
  Linear linear("layer", lora_linear_options(false, 2, kOutput, /*dropout=*/0.4));
  bind_parameters(linear, 31);
  EXPECT_TRUE(linear.uses_dropout());
  Tensor input = random_tensor(Shape{kTokens, kInput}, 32);
  const uint64_t seed = 77;
  auto with_seed = values_of(linear.forward(input, {}, std::nullopt, seed));
  auto again = values_of(linear.forward(input, {}, std::nullopt, seed));
  auto without = values_of(linear.forward(input, {}));
  auto other_seed = values_of(linear.forward(input, {}, std::nullopt, seed + 1));
  EXPECT_EQ(with_seed, again);  // the mask is a function of the seed
  double changed = 0.0, changed_by_seed = 0.0;
  for (size_t i = 0; i < with_seed.size(); ++i) {
    changed += std::abs(with_seed[i] - without[i]);
    changed_by_seed += std::abs(with_seed[i] - other_seed[i]);
    if (int64_t(i) % kOutput < 2) {
      EXPECT_EQ(with_seed[i], without[i]);  // outside the adapter: no dropout
    }
  }
  EXPECT_GT(changed, 1e-3);
  EXPECT_GT(changed_by_seed, 1e-3);

  std::vector<double> output_weights = random_values(kTokens * kOutput, 33);
  Tensor grad_output = tensor_from(output_weights, Shape{kTokens, kOutput});
  auto objective = [&] { return dot(linear.forward(input, {}, std::nullopt, seed), output_weights); };
  Tensor grad_input = linear.backward(grad_output, input, {}, std::nullopt, seed);
  expect_gradient(objective, input, grad_input, "input");
  expect_gradient(objective, linear.lora_0()->weight, linear.lora_0()->grad, "lora_0");
  expect_gradient(objective, linear.lora_1()->weight, linear.lora_1()->grad, "lora_1");
}

TEST(LoraLinear, FrozenBaseWeightGetsNoGradient) {
  Linear linear("layer", lora_linear_options(false, 0, kOutput));
  bind_parameters(linear, 41);
  linear.weight().grad = Tensor();
  linear.bias()->grad = Tensor();
  Tensor input = random_tensor(Shape{kTokens, kInput}, 42);
  std::vector<double> output_weights = random_values(kTokens * kOutput, 43);
  Tensor grad_input = linear.backward(tensor_from(output_weights, Shape{kTokens, kOutput}), input, {});
  auto objective = [&] { return dot(linear.forward(input, {}), output_weights); };
  expect_gradient(objective, input, grad_input, "input");
  expect_gradient(objective, linear.lora_1()->weight, linear.lora_1()->grad, "lora_1");
}

TEST(LoraLayers, AttentionAndMlpAdaptersFollowTheConfig) {
  const auto lora = load_config<LoraConfig>("{rank: 2, alpha: 4}");
  const auto attention_config =
      load_config<AttentionConfig>("{heads: 4, head_groups: 2, head_size: 8, add_linear_biases: false}");
  Attention attention("decoder.0.mixer", attention_config, 16, 1.0, nullptr, &lora);
  std::vector<std::string> names = parameter_names(attention);
  EXPECT_EQ(names, (std::vector<std::string>{"decoder.0.mixer.query.weight", "decoder.0.mixer.query.lora_0.weight",
                                             "decoder.0.mixer.query.lora_1.weight", "decoder.0.mixer.key_value.weight",
                                             "decoder.0.mixer.key_value.lora_0.weight",
                                             "decoder.0.mixer.key_value.lora_1.weight",
                                             "decoder.0.mixer.dense.weight"}));
  // The value half only: rows [head_groups * head_size, 2 * head_groups * head_size) of key_value.
  ASSERT_TRUE(attention.key_value().lora().has_value());
  EXPECT_EQ(attention.key_value().lora()->begin, 16);
  EXPECT_EQ(attention.key_value().lora()->end, 32);
  EXPECT_EQ(attention.key_value().lora_1()->meta.shape, (Shape{16, 2}));
  EXPECT_FALSE(attention.uses_dropout());

  const auto opted = load_config<AttentionConfig>(
      "{heads: 4, head_groups: 2, head_size: 8, add_linear_biases: false, query_layer: {apply_peft: false}, "
      "key_layer: {apply_peft: true}, dense_layer: {apply_peft: true}}");
  Attention other("mixer", opted, 16, 1.0, nullptr, &lora);
  EXPECT_FALSE(other.query().lora().has_value());
  EXPECT_EQ(other.key_value().lora()->begin, 0);
  EXPECT_EQ(other.key_value().lora()->end, 32);
  EXPECT_TRUE(other.dense().lora().has_value());
  Attention plain("mixer", opted, 16, 1.0);
  EXPECT_FALSE(plain.dense().lora().has_value());

  const auto mlp_config = load_config<MlpConfig>(
      "{intermediate_size: 12, gated: true, activation: silu, layer_2: {apply_peft: true}}");
  Mlp mlp("mlp", mlp_config, 16, 1.0, &lora);
  EXPECT_FALSE(mlp.layer_1().lora().has_value());
  ASSERT_TRUE(mlp.layer_2().lora().has_value());
  EXPECT_EQ(mlp.layer_2().lora_0()->meta.shape, (Shape{12, 2}));  // stored transposed, as layer_2
  EXPECT_EQ(mlp.layer_2().lora_1()->meta.shape, (Shape{2, 16}));
}

// The attention with LoRA on query and value, and the dropout of the adapters, against finite differences through
// the whole layer (the dropout mask replayed from the seed kept in Saved).
TEST(LoraLayers, AttentionBackwardMatchesFiniteDifferencesWithDropout) {
  const auto lora = load_config<LoraConfig>("{rank: 2, alpha: 3, dropout: 0.25}");
  const auto config = load_config<AttentionConfig>(
      "{heads: 2, head_groups: 1, head_size: 4, add_linear_biases: false, rotary: {type: default}}");
  Attention attention("mixer", config, 8, 1.0, nullptr, &lora);
  bind_parameters(attention, 51);
  EXPECT_TRUE(attention.uses_dropout());
  BatchData data = make_batch({3, 4}, 10, 52);
  Tensor input = random_tensor(Shape{7, 8}, 53);
  std::vector<double> output_weights = random_values(7 * 8, 54);
  const uint64_t seed = 9;
  Attention::Saved saved;
  attention.forward(input, data.batch, &saved, {}, seed);
  Tensor grad_input = attention.backward(tensor_from(output_weights, Shape{7, 8}), std::move(saved), {});
  auto objective = [&] { return dot(attention.forward(input, data.batch, nullptr, {}, seed), output_weights); };
  expect_gradient(objective, input, grad_input, "input");
  for (const char* name : {"mixer.query.lora_0.weight", "mixer.query.lora_1.weight", "mixer.key_value.lora_0.weight",
                           "mixer.key_value.lora_1.weight", "mixer.key_value.weight"}) {
    Parameter* parameter = find_parameter(attention, name);
    expect_gradient(objective, parameter->weight, parameter->grad, name);
  }
}

}  // namespace
}  // namespace fast_llm::layers
