// Decoder block: names, forward as residual composition of its modules, backward against finite differences (with
// and without dropout), both for each normalization type (the norms fold the skip connections into their own passes,
// the identity falls back to axpys), saved state per micro-batch (consumed by backward; several micro-batches in
// flight), refused settings.
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
    Tensor mixed = block.mixer().forward(context, norm.forward(input, nullptr, {}));
    auto x = values_of(input), m = values_of(mixed);
    std::vector<double> hidden(x.size());
    for (size_t i = 0; i < x.size(); ++i) hidden[i] = x[i] + m[i];
    Tensor hidden_tensor = tensor_from(hidden, input.shape());
    share_norm_parameters(norm, block, "block.norm_2");
    auto f = values_of(block.mlp().forward(context, norm.forward(hidden_tensor, nullptr, {})));
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

// Activation distillation (block distillation_model): the backward is that of the output's objective plus weight x the
// logged loss (mean over tokens of the L2 distance between the mixer outputs), with and without dropout; a block
// distilling the mixer outputs it stored itself (LayerContext::mixer_outputs) has a loss of 0.
TEST(DecoderBlock, ActivationDistillationMatchesFiniteDifferences) {
  for (const double dropout : {0.0, 0.25}) {
    SCOPED_TRACE(dropout);
    DecoderBlockConfig config = load_config<DecoderBlockConfig>(
        kBlock + ", dropout: " + std::to_string(dropout) +
        ", distillation_model: teacher, distillation_loss_weight: 0.7}");
    DecoderBlock block("decoder.0", config, kHidden, 1.0);
    bind_parameters(block, 21);
    BatchData data = make_batch({3, 5, 4}, 10, 22, /*index=*/1);
    const int64_t tokens = 12;
    data.batch.reference_mixer_outputs["teacher"]["decoder.0"] = random_tensor(Shape{tokens, kHidden}, 23);
    Tensor input = random_tensor(Shape{tokens, kHidden}, 24);
    std::vector<double> output_weights = random_values(tokens * kHidden, 25);

    LossSums losses;
    LayerContext training = make_context(data.batch, true, &losses, 1.0, /*dropout_seed=*/7);
    Tensor output = block.forward(training, input);
    Tensor grad_input = block.backward(training, tensor_from(output_weights, output.shape()));
    EXPECT_EQ(losses.normalization("activation_distillation_loss"), LossNormalization::normalized);
    // Not zero, so that the finite differences below check the distillation's part of the backward too.
    EXPECT_GT(losses.all().at("activation_distillation_loss").item(), 0.0);
    auto objective = [&] {
      LossSums sums;
      LayerContext context = make_context(data.batch, true, &sums, 1.0, 7);
      const double value = dot(block.forward(context, input), output_weights);
      return value + 0.7 * sums.all().at("activation_distillation_loss").item();
    };
    expect_gradient(objective, input, grad_input, "input");
    for (Parameter* parameter : block.parameters())
      expect_gradient(objective, parameter->weight, parameter->grad, parameter->meta.name, 24);
  }

  // The block's own mixer outputs as the teacher's: loss 0.
  DecoderBlockConfig config = load_config<DecoderBlockConfig>(kBlock +
                                                              ", distillation_model: self}");
  DecoderBlock block("decoder.0", config, kHidden, 1.0);
  bind_parameters(block, 31);
  BatchData data = make_batch({6, 6}, 10, 32);
  Tensor input = random_tensor(Shape{12, kHidden}, 33);
  std::map<std::string, Tensor> stored;
  LayerContext reference = make_context(data.batch, false);
  reference.mixer_outputs = &stored;
  block.forward(reference, input);
  ASSERT_TRUE(stored.contains("decoder.0"));
  data.batch.reference_mixer_outputs["self"] = stored;
  LossSums losses;
  LayerContext training = make_context(data.batch, true, &losses);
  block.forward(training, input);
  EXPECT_EQ(losses.all().at("activation_distillation_loss").item(), 0.0);
  block.backward(training, random_tensor(Shape{12, kHidden}, 34));
}

// Breadth-first schedules run several forwards before their backwards: the block, its mixer and its MLP each keep
// every micro-batch's state, so forward 0, forward 1, backward 1, backward 0 gives each micro-batch's input gradient and
// the sum of the parameter gradients of running them one after the other.
TEST(DecoderBlock, MicroBatchesInFlightKeepTheirOwnState) {
  DecoderBlockConfig config = load_config<DecoderBlockConfig>(kBlock + ", dropout: 0.25}");
  DecoderBlock block("decoder.0", config, kHidden, 1.0);
  bind_parameters(block, 31);
  std::vector<BatchData> batches{make_batch({3, 5}, 10, 32, /*index=*/0), make_batch({2, 7, 1}, 10, 33, /*index=*/1)};
  std::vector<LayerContext> contexts;
  for (size_t index = 0; index < 2; ++index)
    contexts.push_back(make_context(batches[index].batch, true, nullptr, 1.0, /*dropout_seed=*/40 + index));
  const std::vector<Tensor> inputs{random_tensor(Shape{8, kHidden}, 34), random_tensor(Shape{10, kHidden}, 35)};
  const std::vector<Tensor> grad_outputs{random_tensor(Shape{8, kHidden}, 36), random_tensor(Shape{10, kHidden}, 37)};
  auto gradients = [&] {
    std::vector<std::vector<double>> result;
    for (Parameter* parameter : block.parameters()) result.push_back(values_of(parameter->grad));
    return result;
  };

  std::vector<std::vector<double>> one_at_a_time_inputs;
  for (size_t index = 0; index < 2; ++index) {
    block.forward(contexts[index], inputs[index]);
    one_at_a_time_inputs.push_back(values_of(block.backward(contexts[index], grad_outputs[index])));
  }
  const std::vector<std::vector<double>> one_at_a_time = gradients();
  zero_gradients(block);

  block.forward(contexts[0], inputs[0]);
  block.forward(contexts[1], inputs[1]);
  EXPECT_EQ(values_of(block.backward(contexts[1], grad_outputs[1])), one_at_a_time_inputs[1]);
  EXPECT_EQ(values_of(block.backward(contexts[0], grad_outputs[0])), one_at_a_time_inputs[0]);
  const std::vector<std::vector<double>> interleaved = gradients();
  for (size_t p = 0; p < interleaved.size(); ++p)
    for (size_t i = 0; i < interleaved[p].size(); ++i) EXPECT_NEAR(interleaved[p][i], one_at_a_time[p][i], 1e-12);
}

TEST(DecoderBlock, RefusesUnsupportedSettings) {
  auto refusal = [](const std::string& yaml) -> std::string {
    try {
      DecoderBlock("b", load_config<DecoderBlockConfig>(yaml), kHidden, 1.0);
    } catch (const NotSupportedError& error) {
      return error.what();
    }
    return "built";
  };
  // Types whose config is accepted but that have no layer: the path and the type are named.
  const std::string mixer = refusal("{mixer: {type: stochastic, mixers: {a: {heads: 2}}}}");
  EXPECT_NE(mixer.find("mixer: mixer type 'stochastic' is not supported (supported: attention)"), std::string::npos)
      << mixer;
  // The mixture of experts is built (registered in its own file), and refuses what it does not support by field.
  EXPECT_EQ(refusal("{mlp: {type: moe, experts: 4, intermediate_size: 8, add_linear_biases: false}}"), "built");
  const std::string mlp = refusal("{mlp: {type: moe, experts: 4}}");
  EXPECT_NE(mlp.find("mlp.add_linear_biases: the mixture of experts has no biases"), std::string::npos) << mlp;
  EXPECT_THROW(DecoderBlock("b", load_config<DecoderBlockConfig>("{post_mixer_normalization: {type: rms_norm}}"),
                            kHidden, 1.0),
               NotSupportedError);
}

}  // namespace
}  // namespace fast_llm::layers
