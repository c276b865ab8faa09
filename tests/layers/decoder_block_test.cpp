// Decoder block: names, forward as residual composition of its modules, backward against finite differences (with
// and without dropout), both for each normalization type (the norms fold the skip connections into their own passes,
// the identity falls back to axpys), saved state per micro-batch, refused settings.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/block/decoder_block.h"
#include "layer_test_util.h"

namespace fast_llm::layers {
namespace {

using namespace testing;

constexpr int64_t kHidden = 8;

// The block's mixer and MLP (an open YAML map), and with an rms_norm.
const std::string kBlockModules =
    "{mixer: {heads: 4, head_groups: 2, head_size: 4, rotary: {type: default, theta: 100}}, "
    "mlp: {intermediate_size: 6, gated: true}";
const std::string kBlock = kBlockModules + ", normalization: {type: rms_norm}";

TEST(DecoderBlock, ParameterNames) {
  DecoderBlockConfig config = load_config<DecoderBlockConfig>(kBlock + ", pre_mlp_normalization: {type: layer_norm}}");
  DecoderBlock block("decoder.2", config, kHidden, 1.0);
  EXPECT_EQ(parameter_names(block),
            (std::vector<std::string>{"decoder.2.norm_1.weight", "decoder.2.mixer.query.weight",
                                      "decoder.2.mixer.query.bias", "decoder.2.mixer.key_value.weight",
                                      "decoder.2.mixer.key_value.bias", "decoder.2.mixer.dense.weight",
                                      "decoder.2.mixer.dense.bias", "decoder.2.norm_2.weight",
                                      "decoder.2.norm_2.bias", "decoder.2.mlp.layer_1.weight",
                                      "decoder.2.mlp.layer_1.bias", "decoder.2.mlp.layer_2.weight",
                                      "decoder.2.mlp.layer_2.bias"}));
}

// The block's normalization types under test: every type, so that both the folded skip connections and the
// identity's fallback are covered.
const std::vector<std::string> kNormalizations = {"{type: rms_norm}", "{type: layer_norm, zero_centered: true}",
                                                  "{type: fixed_rms_norm}", "{type: none}"};

// A normalization module built like the block's, with the parameters of the block's `prefix` (block.norm_1, ...).
void share_norm_parameters(Normalization& norm, DecoderBlock& block, const std::string& prefix) {
  for (Parameter* parameter : norm.parameters()) {
    const std::string suffix = parameter->meta.name.substr(parameter->meta.name.rfind('.'));
    parameter->weight = find_parameter(block, prefix + suffix)->weight;
  }
}

// Without dropout the block is x + mixer(norm_1(x)), then h + mlp(norm_2(h)), computed here from the modules.
TEST(DecoderBlock, ForwardIsResidualComposition) {
  for (const std::string& normalization_yaml : kNormalizations) {
    SCOPED_TRACE(normalization_yaml);
    const std::string yaml = kBlockModules + ", normalization: " + normalization_yaml + "}";
    DecoderBlockConfig config = load_config<DecoderBlockConfig>(yaml);
    DecoderBlock block("block", config, kHidden, 1.0);
    bind_parameters(block, 1);
    BatchData data = make_batch({4, 6}, 10, 2);
    Tensor input = random_tensor(Shape{10, kHidden}, 3);
    LayerContext context = make_context(data.batch, /*training=*/false);
    auto output = values_of(block.forward(context, input));

    Normalization norm("n", config.mixer_normalization(), kHidden, 1.0);
    share_norm_parameters(norm, block, "block.norm_1");
    Tensor mixed = block.mixer().forward(norm.forward(input, nullptr, {}), data.batch, nullptr, {});
    auto x = values_of(input), m = values_of(mixed);
    std::vector<double> hidden(x.size());
    for (size_t i = 0; i < x.size(); ++i) hidden[i] = x[i] + m[i];
    Tensor hidden_tensor = tensor_from(hidden, input.shape());
    share_norm_parameters(norm, block, "block.norm_2");
    auto f = values_of(block.mlp().forward(norm.forward(hidden_tensor, nullptr, {}), nullptr, {}));
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(output[i], hidden[i] + f[i], 1e-12);
  }
}

// (dropout, normalization)
class DecoderBlockTest : public ::testing::TestWithParam<std::tuple<double, std::string>> {};

TEST_P(DecoderBlockTest, BackwardMatchesFiniteDifferences) {
  const auto& [dropout, normalization] = GetParam();
  DecoderBlockConfig config = load_config<DecoderBlockConfig>(kBlockModules + ", normalization: " + normalization +
                                                              ", dropout: " + std::to_string(dropout) + "}");
  DecoderBlock block("decoder.0", config, kHidden, 1.0);
  bind_parameters(block, 11);
  BatchData data = make_batch({3, 5, 4}, 10, 12, /*index=*/3);
  const int64_t tokens = 12;
  Tensor input = random_tensor(Shape{tokens, kHidden}, 13);
  std::vector<double> output_weights = random_values(tokens * kHidden, 14);

  LayerContext training = make_context(data.batch, true, nullptr, 1.0, /*dropout_seed=*/99);
  Tensor output = block.forward(training, input);
  Tensor grad_input = block.backward(training, tensor_from(output_weights, output.shape()));
  // Saved state was consumed: a second backward of the same micro-batch is an error.
  EXPECT_THROW(block.backward(training, tensor_from(output_weights, output.shape())), InternalError);

  // The objective runs forward in training mode with the same seed, so it sees the same dropout masks.
  auto objective = [&] {
    LayerContext context = make_context(data.batch, true, nullptr, 1.0, 99);
    double value = dot(block.forward(context, input), output_weights);
    return value;
  };
  if (dropout > 0) {
    // Dropout did something: the evaluation-mode output differs.
    LayerContext evaluation = make_context(data.batch, false);
    EXPECT_GT(std::abs(dot(block.forward(evaluation, input), output_weights) - objective()), 1e-6);
  }
  expect_gradient(objective, input, grad_input, "input");
  for (Parameter* parameter : block.parameters())
    expect_gradient(objective, parameter->weight, parameter->grad, parameter->meta.name, 24);
}

INSTANTIATE_TEST_SUITE_P(DropoutAndNormalization, DecoderBlockTest,
                         ::testing::Combine(::testing::Values(0.0, 0.25), ::testing::ValuesIn(kNormalizations)));

TEST(DecoderBlock, RefusesUnsupportedSettings) {
  EXPECT_THROW(DecoderBlock("b",
                            load_config<DecoderBlockConfig>("{mixer: {type: stochastic, mixers: {a: {heads: 2}}}}"),
                            kHidden, 1.0),
               NotSupportedError);
  EXPECT_THROW(DecoderBlock("b", load_config<DecoderBlockConfig>("{mlp: {type: moe}}"), kHidden, 1.0),
               NotSupportedError);
  EXPECT_THROW(DecoderBlock("b", load_config<DecoderBlockConfig>("{post_mixer_normalization: {type: rms_norm}}"),
                            kHidden, 1.0),
               NotSupportedError);
}

}  // namespace
}  // namespace fast_llm::layers
