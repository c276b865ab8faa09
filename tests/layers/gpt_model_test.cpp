// The GPT model assembled from a config: layer list and Fast-LLM parameter names, shared (tied) weights, FLOPs, a
// whole tiny model (2 blocks) checked against finite differences of the loss for a sample of every parameter, the last
// block on the loss rows only against every row, a dpo step with the pairs' shared prompt rows computed once against
// the original batch, and refused configs.
#include <gtest/gtest.h>

#include <set>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/attention/attention.h"
#include "fast_llm/layers/language_model/loss_rows.h"
#include "fast_llm/layers/mlp/mlp.h"
#include "fast_llm/models/gpt/model.h"
#include "layer_test_util.h"
#include "preference_test_util.h"

namespace fast_llm::models::gpt {
namespace {

using namespace layers::testing;
using layers::Layer;
using layers::LayerContext;
using layers::LossSums;
using layers::Parameter;

std::string tiny_model(const std::string& embeddings = "{vocab_size: 13}",
                       const std::string& head = "{normalization: {type: rms_norm}}") {
  return "hidden_size: 8\nembeddings: " + embeddings + "\nhead: " + head + R"(
decoder:
  num_blocks: 2
  block:
    mixer: {heads: 4, head_groups: 2, head_size: 2, add_linear_biases: false, rotary: {type: default, theta: 100}}
    mlp: {intermediate_size: 12, gated: true, add_linear_biases: false}
    normalization: {type: rms_norm}
)";
}

GPTBaseModelConfig model_config(const std::string& yaml) { return load_config<GPTBaseModelConfig>(yaml); }

TEST(GPTModel, LayersAndParameterNames) {
  GPTModel model(model_config(tiny_model()));
  std::vector<Layer*> layers = model.layers();
  ASSERT_EQ(layers.size(), 4u);
  EXPECT_EQ(layers[0], &model.embeddings());
  EXPECT_EQ(layers[1], &model.block(0));
  EXPECT_EQ(layers[2], &model.block(1));
  EXPECT_EQ(layers[3], &model.head());
  std::vector<std::string> names;
  for (Layer* layer : layers)
    for (Parameter* parameter : layer->parameters()) names.push_back(parameter->meta.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "embeddings.word_embeddings_weight", "decoder.0.norm_1.weight", "decoder.0.mixer.query.weight",
                       "decoder.0.mixer.key_value.weight", "decoder.0.mixer.dense.weight", "decoder.0.norm_2.weight",
                       "decoder.0.mlp.layer_1.weight", "decoder.0.mlp.layer_2.weight", "decoder.1.norm_1.weight",
                       "decoder.1.mixer.query.weight", "decoder.1.mixer.key_value.weight",
                       "decoder.1.mixer.dense.weight", "decoder.1.norm_2.weight", "decoder.1.mlp.layer_1.weight",
                       "decoder.1.mlp.layer_2.weight", "head.output_weights", "head.final_norm.weight"}));
}

TEST(GPTModel, TiedEmbeddingsAreDeclaredOnce) {
  GPTModel model(model_config(tiny_model() + "tied_embedding_weight: true\n"));
  std::set<std::string> names;
  for (Layer* layer : model.layers())
    for (Parameter* parameter : layer->parameters()) EXPECT_TRUE(names.insert(parameter->meta.name).second);
  EXPECT_FALSE(names.contains("head.output_weights"));
  EXPECT_EQ(&model.head().output_weights(), &model.embeddings().word_embeddings());
}

TEST(GPTModel, PatternDecoderAndLearningRateScales) {
  GPTModel model(model_config(R"(
hidden_size: 8
lr_scale: 0.5
embeddings: {vocab_size: 13}
decoder:
  type: pattern
  num_blocks: 3
  lr_scale: 2
  pattern: [full, sliding]
  blocks:
    full: {mixer: {heads: 2, head_size: 4}, mlp: {intermediate_size: 8}}
    sliding: {mixer: {heads: 2, head_size: 4, window_size: 3, lr_scale: 3}, mlp: {intermediate_size: 6}}
)"));
  ASSERT_EQ(model.block_count(), 3);
  auto window_size = [&](int block) {
    return dynamic_cast<layers::Attention&>(model.block(block).mixer()).window_size();
  };
  EXPECT_FALSE(window_size(0).has_value());
  EXPECT_EQ(window_size(1), 3);
  EXPECT_FALSE(window_size(2).has_value());
  Parameter* sliding_query = find_parameter(model.block(1), "decoder.1.mixer.query.weight");
  Parameter* full_query = find_parameter(model.block(2), "decoder.2.mixer.query.weight");
  EXPECT_DOUBLE_EQ(sliding_query->meta.lr_scale, 0.5 * 2 * 3);
  EXPECT_DOUBLE_EQ(full_query->meta.lr_scale, 0.5 * 2);
  EXPECT_DOUBLE_EQ(model.embeddings().word_embeddings().meta.lr_scale, 0.5);
  EXPECT_EQ(find_parameter(model.block(1), "decoder.1.mlp.layer_2.weight")->meta.shape, (Shape{6, 8}));
}

// matmul weights per block: query 8x8, key_value 8x8, dense 8x8, layer_1 24x8, layer_2 12x8 = 480; head 13x8 = 104.
TEST(GPTModel, FlopsPerToken) {
  GPTModel model(model_config(tiny_model()));
  EXPECT_EQ(model.matmul_weight_count(), 2 * 480 + 104);
  EXPECT_DOUBLE_EQ(model.flops_per_token(16), 6.0 * 1064 + 6.0 * 2 * 16 * (4 * 2));
  // Per micro-batch, the layers count exact attended pairs: documents of 3 and 5 tokens have 6 + 15.
  BatchData data = make_batch({3, 5}, 13, 1);
  double flops = 0;
  for (Layer* layer : model.layers()) flops += layer->flops(data.batch);
  EXPECT_DOUBLE_EQ(flops, 6.0 * 8 * 1064 + 2 * 12.0 * (4 * 2) * 21);
}

// The loss of the whole model, normalised by the labels, against every layer's backward.
TEST(GPTModel, LossGradientMatchesFiniteDifferences) {
  GPTModel model(model_config(tiny_model(
      "{vocab_size: 13, position_embeddings: {enabled: true}, num_position_embeddings: 8}",
      "{normalization: {type: rms_norm}, losses: {cross_entropy: {type: label}, z_loss: {type: z_loss, weight: 0.1}}}")));
  uint64_t seed = 100;
  for (Layer* layer : model.layers()) bind_parameters(*layer, seed++);
  BatchData data = make_batch({3, 5, 4}, 13, 7, /*index=*/5);
  const double scale = 1.0 / 9.0;

  LossSums losses;
  LayerContext training = make_context(data.batch, true, &losses, scale);
  std::vector<Layer*> layers = model.layers();
  Tensor activation;
  for (Layer* layer : layers) activation = layer->forward(training, activation);
  Tensor grad;
  for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) grad = (*layer)->backward(training, grad);
  EXPECT_FALSE(grad.defined());

  auto objective = [&] {
    LossSums sums;
    LayerContext context = make_context(data.batch, false, &sums, scale);
    Tensor hidden;
    for (Layer* layer : layers) hidden = layer->forward(context, hidden);
    return sums.all().at("lm_head_loss").item() * scale;
  };
  EXPECT_NEAR(objective(), losses.all().at("lm_head_loss").item() * scale, 1e-12);
  int checked = 0;
  for (Layer* layer : layers)
    for (Parameter* parameter : layer->parameters()) {
      expect_gradient(objective, parameter->weight, parameter->grad, parameter->meta.name, /*max_checks=*/6);
      ++checked;
    }
  EXPECT_EQ(checked, 18);
}

// One training step of the tiny model in a compute dtype (fp32 gradients below fp64): the head's loss, then every
// parameter gradient, concatenated.
std::vector<double> loss_and_gradients(DType dtype, DType grad_dtype) {
  GPTModel model(model_config(tiny_model(
      "{vocab_size: 13}", "{normalization: {type: rms_norm}, cross_entropy_splits: 2, "
                          "losses: {cross_entropy: {type: label}, z_loss: {type: z_loss, weight: 0.01}}}")));
  uint64_t seed = 200;
  for (Layer* layer : model.layers()) bind_parameters(*layer, seed++, dtype, grad_dtype);
  BatchData data = make_batch({6, 10}, 13, 3);
  LossSums losses;
  LayerContext context = make_context(data.batch, true, &losses, 1.0 / 14.0, 0, dtype);
  std::vector<Layer*> layers = model.layers();
  Tensor activation;
  for (Layer* layer : layers) {
    activation = layer->forward(context, activation);
    if (activation.defined()) {
      EXPECT_EQ(activation.dtype(), dtype);
    }
  }
  Tensor grad;
  for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) {
    grad = (*layer)->backward(context, grad);
    if (grad.defined()) {
      EXPECT_EQ(grad.dtype(), dtype);
    }
  }
  std::vector<double> result{losses.all().at("lm_head_loss").item() / 14.0};
  for (Layer* layer : layers)
    for (Parameter* parameter : layer->parameters()) {
      EXPECT_EQ(parameter->grad.dtype(), grad_dtype);
      auto values = values_of(parameter->grad);
      result.insert(result.end(), values.begin(), values.end());
    }
  return result;
}

double relative_error(const std::vector<double>& actual, const std::vector<double>& expected, size_t begin) {
  double difference = 0, norm = 0;
  for (size_t i = begin; i < expected.size(); ++i) {
    difference += (actual[i] - expected[i]) * (actual[i] - expected[i]);
    norm += expected[i] * expected[i];
  }
  return std::sqrt(difference / norm);
}

// The same step in lower precisions (parameters and activations in the compute dtype, gradients in fp32) stays close
// to fp64: the layers run in every compute dtype.
TEST(GPTModel, ComputeDtypesAgreeWithFloat64) {
  const std::vector<double> reference = loss_and_gradients(DType::float64, DType::float64);
  EXPECT_GT(max_abs(reference), 0.0);
  struct Case {
    DType dtype;
    double loss_tolerance;
    double gradient_tolerance;
  };
  for (const Case& test_case : {Case{DType::float32, 1e-6, 1e-5}, Case{DType::bfloat16, 2e-3, 3e-2},
                                Case{DType::float16, 1e-3, 5e-3}}) {
    SCOPED_TRACE(std::string(dtype_name(test_case.dtype)));
    const std::vector<double> result = loss_and_gradients(test_case.dtype, DType::float32);
    ASSERT_EQ(result.size(), reference.size());
    EXPECT_NEAR(result[0], reference[0], test_case.loss_tolerance * reference[0]);
    EXPECT_LT(relative_error(result, reference, 1), test_case.gradient_tolerance);
  }
}

// The backward of `layers` after their forward in `context`: the losses, then every parameter gradient.
std::vector<double> backward_and_collect(const std::vector<Layer*>& layers, LayerContext& context,
                                         const LossSums& losses) {
  Tensor grad;
  for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) grad = (*layer)->backward(context, grad);
  std::vector<double> result;
  for (const auto& [name, sum] : losses.all()) result.push_back(sum.item());
  for (Layer* layer : layers)
    for (Parameter* parameter : layer->parameters()) {
      auto values = values_of(parameter->grad);
      result.insert(result.end(), values.begin(), values.end());
    }
  return result;
}

// Two fp64 computations of the same step agree to rounding (and are not all zeros).
void expect_same_step(const std::vector<double>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  EXPECT_GT(max_abs(expected), 0.0);
  for (size_t index = 0; index < expected.size(); ++index)
    EXPECT_NEAR(actual[index], expected[index], 1e-12 * (1.0 + std::abs(expected[index]))) << "value " << index;
}

// One training step of the tiny model on documents {6, 10} whose first rows are masked as prompts would be, with the
// last block computing its output on the loss rows only (as the head computes its losses) or on every row: the
// losses, then every parameter gradient.
std::vector<double> step_on_prompt_masked_batch(bool last_block_on_loss_rows) {
  GPTModel model(model_config(tiny_model(
      "{vocab_size: 13}", "{normalization: {type: rms_norm}, cross_entropy_splits: 2, "
                          "losses: {cross_entropy: {type: label}, z_loss: {type: z_loss, weight: 0.01}}}")));
  if (!last_block_on_loss_rows) model.compute_last_block_on_loss_rows_when({});
  uint64_t seed = 300;
  for (Layer* layer : model.layers()) bind_parameters(*layer, seed++);
  BatchData data = make_batch({6, 10}, 13, 4);
  for (int64_t row : {0, 1, 2, 6, 7, 8, 9}) data.labels[size_t(row)] = -100;
  std::copy(data.labels.begin(), data.labels.end(), data.batch.labels.data_as<int64_t>());
  layers::attach_loss_rows(data.batch, layers::find_loss_rows(data.labels, {}));
  const int64_t loss_rows = data.batch.loss_rows.numel();
  EXPECT_EQ(loss_rows, 7);
  EXPECT_EQ(model.block(1).computes_output_on_loss_rows(data.batch), last_block_on_loss_rows);
  EXPECT_FALSE(model.block(0).computes_output_on_loss_rows(data.batch));
  // The last block's MLP FLOPs follow its rows.
  const auto& mlp = dynamic_cast<const layers::Mlp&>(model.block(1).mlp());
  EXPECT_DOUBLE_EQ(model.block(1).flops(data.batch),
                   model.block(1).mixer().flops(data.batch) + mlp.flops(last_block_on_loss_rows ? loss_rows : 16));

  LossSums losses;
  LayerContext context = make_context(data.batch, true, &losses, 1.0 / 7.0);
  std::vector<Layer*> layers = model.layers();
  Tensor activation;
  for (Layer* layer : layers) {
    if (layer == &model.head()) {
      EXPECT_EQ(activation.size(0), last_block_on_loss_rows ? loss_rows : 16);
    }
    activation = layer->forward(context, activation);
  }
  return backward_and_collect(layers, context, losses);
}

TEST(GPTModel, LastBlockOnLossRowsMatchesEveryRow) {
  expect_same_step(step_on_prompt_masked_batch(true), step_on_prompt_masked_batch(false));
}

// One dpo step (fp64) of the tiny model on two preference documents (prompts of 4 and 2 tokens after BOS) and a plain
// one, uploaded with the pairs' shared prompt rows left out or not: the dpo loss and its metrics, then every
// parameter gradient.
std::vector<double> dpo_step(bool share_prompt_rows) {
  GPTModel model(model_config(tiny_model(
      "{vocab_size: 13}",
      "{normalization: {type: rms_norm}, losses: {dpo: {type: dpo, reference_model: reference, beta: 0.5}}}")));
  EXPECT_TRUE(model.computes_shared_prompts_once());
  uint64_t seed = 400;
  for (Layer* layer : model.layers()) bind_parameters(*layer, seed++);
  const layers::MicroBatch micro_batch = dpo_micro_batch(
      {preference_document({5, 6, 7, 8}, {9, 10}, {11}), preference_document({3, 4}, {12}, {6, 7, 9}),
       data::Document{.tokens = {4, 5, 6}}},
      30, Device::cpu(), DType::float64, share_prompt_rows);
  // BOS and the prompt but its last token: 4 + 2 rows.
  EXPECT_EQ(micro_batch.num_tokens(), share_prompt_rows ? 24 : 30);
  EXPECT_EQ(micro_batch.attention_rows.has_value(), share_prompt_rows);
  EXPECT_EQ(micro_batch.loss_rows.numel(), 3 + 2 + 2 + 4);

  LossSums losses;
  LayerContext context = make_context(micro_batch, true, &losses, 1.0 / double(micro_batch.labels_in_step));
  std::vector<Layer*> layers = model.layers();
  Tensor activation;
  for (Layer* layer : layers) activation = layer->forward(context, activation);
  return backward_and_collect(layers, context, losses);
}

TEST(GPTModel, SharedPromptRowsMatchTheOriginalBatch) { expect_same_step(dpo_step(true), dpo_step(false)); }

// Shared prompt rows only where they are the same computation: dpo alone (other losses read the prompts' labels),
// causal attention (a bidirectional prompt row sees its own sequence's answer), no expert routing, no dropout.
TEST(GPTModel, SharesPromptRowsOnlyWhereExact) {
  const std::string dpo = "{normalization: {type: rms_norm}, losses: {dpo: {type: dpo, reference_model: r}}}";
  const auto model_with = [&](const std::string& mixer, const std::string& mlp, const std::string& head,
                              const std::string& block = "") {
    return GPTModel(model_config("hidden_size: 8\nembeddings: {vocab_size: 13}\nhead: " + head +
                                 "\ndecoder: {block: {mixer: {heads: 2, head_size: 4, add_linear_biases: false" +
                                 mixer + "}, mlp: {intermediate_size: 12, add_linear_biases: false" + mlp + "}" +
                                 block + "}}\n"));
  };
  EXPECT_TRUE(model_with("", "", dpo).computes_shared_prompts_once());
  EXPECT_TRUE(model_with(", window_size: 4", "", dpo).computes_shared_prompts_once());
  EXPECT_FALSE(model_with(", causal: false", "", dpo).computes_shared_prompts_once());
  EXPECT_FALSE(model_with("", ", type: moe, experts: 4", dpo).computes_shared_prompts_once());
  EXPECT_FALSE(model_with("", "", dpo, ", dropout: 0.1").computes_shared_prompts_once());
  // A reference model runs without dropout: it may share with dropout configured.
  EXPECT_TRUE(model_with("", "", dpo, ", dropout: 0.1").layers_compute_shared_prompts_once(false));
  EXPECT_FALSE(
      model_with("", "", "{losses: {dpo: {type: dpo, reference_model: r}, ce: {type: label}}}").computes_shared_prompts_once());
}

TEST(GPTModel, RefusesUnsupportedConfigs) {
  // LoRA on the experts (grouped gemms) is not there.
  EXPECT_THROW(GPTModel(model_config(R"(
hidden_size: 8
decoder: {block: {mlp: {type: moe, experts: 4, add_linear_biases: false, layer_1: {apply_peft: true}}}}
peft: {type: lora}
)")),
               NotSupportedError);
  EXPECT_THROW(GPTModel(model_config(R"(
hidden_size: 8
decoder: {block: {mlp: {type: moe, experts: 4, add_linear_biases: false, router_scale: {enabled: true}}}}
)")),
               NotSupportedError);
}

}  // namespace
}  // namespace fast_llm::models::gpt
