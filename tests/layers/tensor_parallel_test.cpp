// Tensor parallelism in the layers, without processes: the parts two tensor ranks hold (ParameterMeta::tensor) against
// the one-process layer's parameters, and their explicit forward and backward (which leave the sums over the group to
// the caller) against the one-process layer: the partial outputs and input gradients of the two ranks add up to the
// one-process ones, and each rank's parameter gradients are its part of the one-process gradients (rank 1 through the
// backward that hands the input gradient over before the parameter gradients, as the tensor-parallel layers run it).
// Also the index map of TensorSplit written out by hand, and what tensor parallelism refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/attention/attention.h"
#include "fast_llm/layers/block/decoder_block.h"
#include "fast_llm/layers/language_model/head.h"
#include "fast_llm/layers/mlp/mlp.h"
#include "layer_test_util.h"

namespace fast_llm::layers {
namespace {

using namespace testing;

constexpr int kRanks = 2;

// The part of the one-process `full` values that `split` gives a rank of shape `local`, built from the index map.
Tensor part_of(const std::vector<double>& full, const TensorSplit& split, const Shape& local) {
  std::vector<double> values(size_t(local.numel()));
  for (int64_t index = 0; index < local.numel(); ++index)
    values[size_t(index)] = full[size_t(split.global_index(local, index))];
  return tensor_from(values, local);
}

// Gives `part`'s parameters their parts of `full`'s (same names, same order) and zeroed gradients.
void bind_parts(Module& full, Module& part) {
  auto full_parameters = full.parameters(), parameters = part.parameters();
  ASSERT_EQ(full_parameters.size(), parameters.size());
  for (size_t index = 0; index < parameters.size(); ++index) {
    Parameter& parameter = *parameters[index];
    ASSERT_EQ(parameter.meta.name, full_parameters[index]->meta.name);
    ASSERT_EQ(parameter.meta.tensor.global_shape(parameter.meta.shape), full_parameters[index]->meta.shape)
        << parameter.meta.name;
    parameter.weight = part_of(values_of(full_parameters[index]->weight), parameter.meta.tensor, parameter.meta.shape);
    parameter.grad = zeros(parameter.meta.shape);
  }
}

void expect_close(const std::vector<double>& actual, const std::vector<double>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t index = 0; index < expected.size(); ++index)
    EXPECT_NEAR(actual[index], expected[index], 1e-12 * (1 + std::abs(expected[index]))) << what << "[" << index << "]";
}

// Each rank's parameter gradients are its part of the one-process gradients (whole parameters: all of it).
void expect_gradient_parts(Module& full, Module& part) {
  auto full_parameters = full.parameters(), parameters = part.parameters();
  for (size_t index = 0; index < parameters.size(); ++index) {
    const Parameter& parameter = *parameters[index];
    expect_close(values_of(parameter.grad),
                 values_of(part_of(values_of(full_parameters[index]->grad), parameter.meta.tensor,
                                   parameter.meta.shape)),
                 parameter.meta.name + " gradient");
  }
}

std::vector<double> sum_of(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> result = a;
  for (size_t index = 0; index < a.size(); ++index) result[index] += b[index];
  return result;
}

TEST(TensorSplit, IndexMapOfBlocksSplitOverRanks) {
  // A [4, 3] parameter made of two blocks of rows (keys and values), split over 2 ranks: rank 1 holds rows 1 and 3 of
  // the one-process [8, 3] tensor (row 1 of each block).
  const TensorSplit split{.size = 2, .rank = 1, .dim = 0, .blocks = 2};
  const Shape local{2, 3};
  EXPECT_EQ(split.global_shape(local), (Shape{4, 3}));
  const std::vector<int64_t> expected{3, 4, 5, 9, 10, 11};
  for (int64_t index = 0; index < local.numel(); ++index)
    EXPECT_EQ(split.global_index(local, index), expected[size_t(index)]);
  EXPECT_EQ(split.contiguous_run(local, 0), 3);
  EXPECT_EQ(split.contiguous_run(local, 4), 2);
  // Columns of a [2, 4] tensor split over 2 ranks: rank 0 holds columns 0-1 of each row.
  const TensorSplit columns{.size = 2, .rank = 0, .dim = 1};
  const Shape column_part{2, 2};
  const std::vector<int64_t> column_expected{0, 1, 4, 5};
  for (int64_t index = 0; index < 4; ++index)
    EXPECT_EQ(columns.global_index(column_part, index), column_expected[size_t(index)]);
  EXPECT_EQ(columns.contiguous_run(column_part, 1), 1);
  // Whole parameters map to themselves.
  const TensorSplit whole{.size = 2, .rank = 1};
  EXPECT_EQ(whole.global_index(local, 4), 4);
  EXPECT_EQ(whole.global_shape(local), local);
}

TEST(TensorParallelLayers, MlpPartsAddUpToTheWholeLayer) {
  const auto config = load_config<MlpConfig>("{intermediate_size: 6, gated: true, add_linear_biases: true}");
  Mlp full("mlp", config, 4, 1.0);
  bind_parameters(full, 3);
  const Tensor input = random_tensor(Shape{5, 4}, 4), grad_output = random_tensor(Shape{5, 4}, 5);
  Mlp::Saved saved;
  const std::vector<double> output = values_of(full.forward(input, &saved, {}));
  const std::vector<double> grad_input = values_of(full.backward(grad_output, std::move(saved), {}));

  std::vector<double> output_sum(output.size(), 0.0), grad_input_sum(grad_input.size(), 0.0);
  for (int rank = 0; rank < kRanks; ++rank) {
    Mlp part("mlp", config, 4, 1.0, nullptr, {.rank = rank, .size = kRanks});
    EXPECT_EQ(part.layer_1().weight().meta.shape, (Shape{6, 4}));  // [gate part; up part]
    EXPECT_EQ(part.layer_2().weight().meta.shape, (Shape{3, 4}));  // transposed: this rank's input features
    EXPECT_EQ(part.layer_2().bias()->meta.tensor.dim, -1);         // whole, added once after the sum
    bind_parts(full, part);
    Mlp::Saved part_saved;
    Tensor part_output = part.forward(input, &part_saved, {});
    if (rank == 0) part.layer_2().add_bias(part_output, {});
    output_sum = sum_of(output_sum, values_of(part_output));
    int handed_over = 0;
    const InputGradientReady count = [&](Tensor&) { ++handed_over; };
    grad_input_sum = sum_of(grad_input_sum, values_of(part.backward(grad_output, std::move(part_saved), {},
                                                                    rank == 1 ? count : InputGradientReady())));
    EXPECT_EQ(handed_over, rank == 1 ? 1 : 0);
    expect_gradient_parts(full, part);
  }
  expect_close(output_sum, output, "output");
  expect_close(grad_input_sum, grad_input, "input gradient");
}

// `yaml` with 4 heads; `groups` head groups on each rank.
void expect_attention_parts_add_up(const std::string& yaml, int groups) {
  SCOPED_TRACE(yaml);
  const auto config = load_config<AttentionConfig>(yaml);
  Attention full("mixer", config, 8, 1.0);
  bind_parameters(full, 7);
  BatchData data = make_batch({5, 4}, 10, 8);
  const Tensor input = random_tensor(Shape{9, 8}, 9), grad_output = random_tensor(Shape{9, 8}, 10);
  Attention::Saved saved;
  const std::vector<double> output = values_of(full.forward(input, data.batch, &saved, {}));
  const std::vector<double> grad_input = values_of(full.backward(grad_output, std::move(saved), {}));

  std::vector<double> output_sum(output.size(), 0.0), grad_input_sum(grad_input.size(), 0.0);
  // The gradients of the parameters whole on every rank that each rank computes a part of, summed over the ranks.
  std::map<std::string, std::vector<double>> partial_gradient_sums;
  for (int rank = 0; rank < kRanks; ++rank) {
    Attention part("mixer", config, 8, 1.0, nullptr, nullptr, {.rank = rank, .size = kRanks});
    EXPECT_EQ(part.heads(), 2);
    EXPECT_EQ(part.head_groups(), groups);
    EXPECT_EQ(part.dense().weight().meta.tensor.dim, 1);  // row-parallel: input features
    bind_parts(full, part);
    Attention::Saved part_saved;
    Tensor part_output = part.forward(input, data.batch, &part_saved, {});
    if (rank == 0) part.dense().add_bias(part_output, {});
    output_sum = sum_of(output_sum, values_of(part_output));
    int handed_over = 0;
    const InputGradientReady count = [&](Tensor&) { ++handed_over; };
    grad_input_sum = sum_of(grad_input_sum, values_of(part.backward(grad_output, std::move(part_saved), {},
                                                                    rank == 1 ? count : InputGradientReady())));
    EXPECT_EQ(handed_over, rank == 1 ? 1 : 0);
    for (Parameter* parameter : part.parameters()) {
      if (parameter->meta.tensor.partial_gradient) {
        // Each rank normalises its own heads, and (one group) uses the keys and values for its own heads only: the
        // gradient is a part, summed over the ranks by the engine.
        std::vector<double>& sum = partial_gradient_sums[parameter->meta.name];
        if (sum.empty()) sum.assign(size_t(parameter->meta.shape.numel()), 0.0);
        sum = sum_of(sum, values_of(parameter->grad));
        continue;
      }
      const Parameter* whole = find_parameter(full, parameter->meta.name);
      expect_close(values_of(parameter->grad),
                   values_of(part_of(values_of(whole->grad), parameter->meta.tensor, parameter->meta.shape)),
                   parameter->meta.name + " gradient");
    }
  }
  expect_close(output_sum, output, "output");
  expect_close(grad_input_sum, grad_input, "input gradient");
  EXPECT_TRUE(partial_gradient_sums.contains("mixer.q_norm.weight"));
  for (const auto& [name, sum] : partial_gradient_sums)
    expect_close(sum, values_of(find_parameter(full, name)->grad), name + " gradient");
}

TEST(TensorParallelLayers, AttentionPartsAddUpToTheWholeLayer) {
  // Grouped queries (keys and values split by group), rotary embeddings, biases, a window and a query norm (whole on
  // every rank, partial gradient).
  expect_attention_parts_add_up(
      "{heads: 4, head_groups: 2, head_size: 4, add_linear_biases: true, window_size: 3, rotary: {type: default}, "
      "query_norm: {type: rms_norm}}",
      1);
}

TEST(TensorParallelLayers, MultiQueryAttentionPartsAddUpToTheWholeLayer) {
  // One head group: the ranks split its heads and each holds the whole key_value projection (partial gradients).
  expect_attention_parts_add_up(
      "{heads: 4, head_groups: 1, head_size: 4, add_linear_biases: true, rotary: {type: default}, "
      "query_norm: {type: rms_norm}}",
      1);
  const auto config = load_config<AttentionConfig>("{heads: 4, head_groups: 1, head_size: 4}");
  Attention part("mixer", config, 8, 1.0, nullptr, nullptr, {.rank = 1, .size = kRanks});
  EXPECT_EQ(part.key_value().weight().meta.shape, (Shape{8, 8}));
  EXPECT_EQ(part.key_value().weight().meta.tensor.dim, -1);
  EXPECT_TRUE(part.key_value().weight().meta.tensor.partial_gradient);
}

TEST(TensorParallelLayers, RefusesWhatItDoesNotSplit) {
  const TensorParallelism two{.rank = 0, .size = 2};
  // Head groups that do not split (more than one).
  const auto three_groups = load_config<AttentionConfig>("{heads: 6, head_groups: 3, head_size: 4}");
  EXPECT_THROW(Attention("mixer", three_groups, 8, 1.0, nullptr, nullptr, two), ConfigError);
  // An intermediate size that does not split.
  EXPECT_THROW(Mlp("mlp", load_config<MlpConfig>("{intermediate_size: 5}"), 4, 1.0, nullptr, two), ConfigError);
  // LoRA adapters.
  const auto lora = load_config<LoraConfig>("{rank: 2}");
  EXPECT_THROW(Mlp("mlp", load_config<MlpConfig>("{intermediate_size: 4, layer_1: {apply_peft: true}}"), 4, 1.0,
                   &lora, two),
               NotSupportedError);
  // A mixture of experts in a block.
  const auto moe = load_config<DecoderBlockConfig>(
      "{mixer: {type: attention, heads: 2, head_groups: 2, head_size: 4}, mlp: {type: moe, experts: 2, "
      "add_linear_biases: false, "
      "intermediate_size: 4}}");
  try {
    DecoderBlock block("decoder.0", moe, 8, 1.0, nullptr, nullptr, two);
    FAIL() << "a mixture of experts was accepted with tensor parallelism";
  } catch (const NotSupportedError& error) {
    EXPECT_NE(std::string(error.what()).find("tensor parallelism"), std::string::npos) << error.what();
  }
  // Block dropout with sequence-tensor parallelism (each rank would draw the masks of the whole sequence).
  const auto dropout = load_config<DecoderBlockConfig>(
      "{mixer: {type: attention, heads: 2, head_groups: 2, head_size: 4}, mlp: {intermediate_size: 4}, dropout: "
      "0.1}");
  EXPECT_THROW(DecoderBlock("decoder.0", dropout, 8, 1.0, nullptr, nullptr, {.rank = 0, .size = 2,
                                                                          .sequence_parallel = true}),
               NotSupportedError);
  // A head loss that is not a label loss.
  const auto head = load_config<LanguageModelHeadConfig>("{losses: {grpo: {type: grpo}}}");
  EXPECT_THROW(LanguageModelHead("head", head, 8, 16, 1.0, nullptr, two), NotSupportedError);
}

TEST(TensorParallelLayers, SequenceTensorParallelBlockNormsHavePartialGradients) {
  const auto config = load_config<DecoderBlockConfig>(
      "{mixer: {type: attention, heads: 2, head_groups: 2, head_size: 4}, mlp: {intermediate_size: 4}}");
  DecoderBlock tensor_parallel("decoder.0", config, 8, 1.0, nullptr, nullptr, {.rank = 1, .size = 2});
  DecoderBlock sequence_parallel("decoder.0", config, 8, 1.0, nullptr, nullptr,
                                 {.rank = 1, .size = 2, .sequence_parallel = true});
  EXPECT_FALSE(find_parameter(tensor_parallel, "decoder.0.norm_1.weight")->meta.tensor.partial_gradient);
  EXPECT_TRUE(find_parameter(sequence_parallel, "decoder.0.norm_1.weight")->meta.tensor.partial_gradient);
  EXPECT_TRUE(find_parameter(sequence_parallel, "decoder.0.norm_2.weight")->meta.tensor.partial_gradient);
  EXPECT_EQ(find_parameter(sequence_parallel, "decoder.0.norm_1.weight")->meta.tensor.size, 2);
}

}  // namespace
}  // namespace fast_llm::layers
