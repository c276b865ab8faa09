// The step schedule: gradient accumulation gives the loss and gradients of one micro-batch holding the same
// documents (the loss is normalised by the labels of the whole step), the order of forward and backward calls, the
// per-micro-batch context, and gradients zeroed at the start of each step. Micro-batch splits: the pieces of a
// micro-batch (sequence_pieces.h: rows, documents cut to them and to the keys before them, refusals), their order in
// the step, and the loss and gradients of the whole micro-batch.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "engine/engine_test_util.h"
#include "fast_llm/engine/schedule/runner.h"
#include "fast_llm/engine/schedule/sequence_pieces.h"

namespace fast_llm::engine {
namespace {

using testing::load_config;

Tensor int64_tensor(const std::vector<int64_t>& values) {
  Tensor tensor = Tensor::empty(Shape{int64_t(values.size())}, DType::int64);
  std::copy(values.begin(), values.end(), tensor.data_as<int64_t>());
  return tensor;
}

Tensor int32_tensor(const std::vector<int32_t>& values) {
  Tensor tensor = Tensor::empty(Shape{int64_t(values.size())}, DType::int32);
  std::copy(values.begin(), values.end(), tensor.data_as<int32_t>());
  return tensor;
}

// A micro-batch of tokens [begin, end) of the stream below, with document boundaries `cu_seqlens` (relative).
// Unmasked labels (!= -100) of a CPU micro-batch (the trainer takes the count from the host batches).
int64_t count_labels(const layers::MicroBatch& batch) {
  const int64_t* labels = batch.labels.data_as<int64_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < batch.labels.numel(); ++i) count += labels[i] != -100;
  return count;
}

layers::MicroBatch slice_batch(const std::vector<int64_t>& tokens, const std::vector<int64_t>& labels, int64_t begin,
                               int64_t end, const std::vector<int32_t>& cu_seqlens) {
  std::vector<int64_t> positions(size_t(end - begin), 0);
  std::vector<int64_t> lengths;
  for (size_t document = 0; document + 1 < cu_seqlens.size(); ++document) {
    lengths.push_back(cu_seqlens[document + 1] - cu_seqlens[document]);
    for (int32_t t = cu_seqlens[document]; t < cu_seqlens[document + 1]; ++t)
      positions[size_t(t)] = t - cu_seqlens[document];
  }
  return layers::MicroBatch{
      .tokens = int64_tensor(std::vector<int64_t>(tokens.begin() + begin, tokens.begin() + end)),
      .labels = int64_tensor(std::vector<int64_t>(labels.begin() + begin, labels.begin() + end)),
      .positions = int64_tensor(positions),
      .cu_seqlens = int32_tensor(cu_seqlens),
      .max_seqlen = 6,
      .sequence_lengths = lengths};
}

// 16 tokens in 4 documents of lengths 5, 3 | 2, 6: the cut at 8 falls between documents. Labels are masked at each
// document's first position and in a loss-masking span, unevenly between the halves (6 labels in the first half, 4
// in the second), so a per-micro-batch normalisation would give other gradients.
const std::vector<int64_t> kTokens = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
const std::vector<int64_t> kLabels = {-100, 14, 41, 15, 59, -100, 26, 65, -100, 35, -100, -100, -100, 79, 93, 31};

struct ScheduleRun {
  explicit ScheduleRun(const std::string& schedule_yaml, double layers_per_stage = 1.0, int seed = 11)
      : distributed(testing::cpu_distributed(seed)),
        schedule(load_config<ScheduleConfig>(schedule_yaml, "schedule")),
        multi_stage_config(testing::multi_stage_config("{layers_per_stage: " + std::to_string(layers_per_stage) + "}")),
        model(10, 4, 2, &events),
        multi_stage(model, multi_stage_config, distributed, Device::cpu()),
        runner(multi_stage, schedule, distributed) {
    multi_stage.initialize_weights();
  }

  double step(std::vector<layers::MicroBatch> micro_batches, int64_t iteration = 1) {
    int64_t num_labels = 0;
    for (const auto& batch : micro_batches) num_labels += count_labels(batch);
    runner.run_training_step(micro_batches, num_labels, iteration, 1.0, losses);
    return losses.all().at("mse").item() / double(num_labels);
  }

  std::map<std::string, std::vector<double>> gradients() {
    std::map<std::string, std::vector<double>> result;
    for (layers::Layer* layer : multi_stage.layers())
      for (layers::Parameter* parameter : layer->parameters())
        result[parameter->meta.name] = testing::values(parameter->grad);
    return result;
  }

  DistributedConfig distributed;
  ScheduleConfig schedule;
  MultiStageConfig multi_stage_config;
  testing::LayerEvents events;
  testing::TestModel model;
  MultiStage multi_stage;
  ScheduleRunner runner;
  layers::LossSums losses;
};

void expect_same_gradients(const std::map<std::string, std::vector<double>>& actual,
                           const std::map<std::string, std::vector<double>>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [name, values] : expected) {
    const auto& other = actual.at(name);
    ASSERT_EQ(other.size(), values.size());
    double largest = 0;
    for (double value : values) largest = std::max(largest, std::fabs(value));
    ASSERT_GT(largest, 0.0) << name;
    for (size_t i = 0; i < values.size(); ++i) ASSERT_NEAR(other[i], values[i], 1e-12) << name << "[" << i << "]";
  }
}

TEST(Schedule, CountLabels) {
  EXPECT_EQ(count_labels(slice_batch(kTokens, kLabels, 0, 16, {0, 5, 8, 10, 16})), 10);
  EXPECT_EQ(count_labels(slice_batch(kTokens, kLabels, 0, 8, {0, 5, 8})), 6);
}

TEST(Schedule, GradientAccumulationMatchesOneMicroBatch) {
  ScheduleRun whole("{}");
  const double whole_loss = whole.step({slice_batch(kTokens, kLabels, 0, 16, {0, 5, 8, 10, 16})});
  const auto whole_gradients = whole.gradients();

  for (const char* schedule : {"{depth_first_micro_batches: 2}", "{breadth_first_micro_batches: 2}"}) {
    ScheduleRun split(schedule);
    const double split_loss = split.step({slice_batch(kTokens, kLabels, 0, 8, {0, 5, 8}),
                                          slice_batch(kTokens, kLabels, 8, 16, {0, 2, 8})});
    EXPECT_NEAR(split_loss, whole_loss, 1e-12) << schedule;
    expect_same_gradients(split.gradients(), whole_gradients);
  }
}

TEST(Schedule, EveryMicroBatchSeesTheStepNormalisation) {
  ScheduleRun run("{depth_first_micro_batches: 2}");
  run.step({slice_batch(kTokens, kLabels, 0, 8, {0, 5, 8}), slice_batch(kTokens, kLabels, 8, 16, {0, 2, 8})});
  ASSERT_FALSE(run.events.loss_gradient_scales.empty());
  for (double scale : run.events.loss_gradient_scales) EXPECT_DOUBLE_EQ(scale, 1.0 / 10.0);
}

TEST(Schedule, GradientsAreZeroedAtTheStartOfEachStep) {
  ScheduleRun run("{}");
  auto batch = [] { return std::vector<layers::MicroBatch>{slice_batch(kTokens, kLabels, 0, 16, {0, 5, 8, 10, 16})}; };
  const double first = run.step(batch());
  const auto gradients = run.gradients();
  EXPECT_DOUBLE_EQ(run.step(batch(), 2), first);
  expect_same_gradients(run.gradients(), gradients);
}

TEST(Schedule, DepthFirstRunsEachMicroBatchForwardAndBackwardInTurn) {
  // Stages: {embeddings, decoder.0}, {decoder.1, head}.
  ScheduleRun run("{depth_first_micro_batches: 2}", 2.0);
  ASSERT_EQ(run.multi_stage.stages().size(), 2u);
  run.step({slice_batch(kTokens, kLabels, 0, 8, {0, 5, 8}), slice_batch(kTokens, kLabels, 8, 16, {0, 2, 8})});
  const std::vector<std::string> expected = {
      "embeddings F 0", "decoder.0 F 0", "decoder.1 F 0", "head F 0",
      "head B 0",       "decoder.1 B 0", "decoder.0 B 0", "embeddings B 0",
      "embeddings F 1", "decoder.0 F 1", "decoder.1 F 1", "head F 1",
      "head B 1",       "decoder.1 B 1", "decoder.0 B 1", "embeddings B 1"};
  EXPECT_EQ(run.events.events, expected);
}

TEST(Schedule, BreadthFirstInterleavesMicroBatchesStageByStage) {
  ScheduleRun run("{breadth_first_micro_batches: 2}", 2.0);
  run.step({slice_batch(kTokens, kLabels, 0, 8, {0, 5, 8}), slice_batch(kTokens, kLabels, 8, 16, {0, 2, 8})});
  const std::vector<std::string> expected = {
      "embeddings F 0", "decoder.0 F 0", "embeddings F 1", "decoder.0 F 1",
      "decoder.1 F 0",  "head F 0",      "decoder.1 F 1",  "head F 1",
      "head B 0",       "decoder.1 B 0", "head B 1",       "decoder.1 B 1",
      "decoder.0 B 0",  "embeddings B 0", "decoder.0 B 1", "embeddings B 1"};
  EXPECT_EQ(run.events.events, expected);
}

TEST(Schedule, DropoutSeedsDependOnSeedStepAndMicroBatch) {
  auto seeds_of = [](int seed, int64_t iteration) {
    ScheduleRun run("{depth_first_micro_batches: 2}", 1.0, seed);
    run.step({slice_batch(kTokens, kLabels, 0, 8, {0, 5, 8}), slice_batch(kTokens, kLabels, 8, 16, {0, 2, 8})},
             iteration);
    // The seed each micro-batch saw (first event of each).
    return std::vector<uint64_t>{run.events.dropout_seeds.front(), run.events.dropout_seeds.back()};
  };
  auto base = seeds_of(1, 5);
  EXPECT_NE(base[0], base[1]);
  EXPECT_EQ(seeds_of(1, 5), base);
  auto other_step = seeds_of(1, 6);
  EXPECT_NE(other_step[0], base[0]);
  EXPECT_NE(other_step[1], base[1]);
  auto other_seed = seeds_of(2, 5);
  EXPECT_NE(other_seed[0], base[0]);
}

TEST(Schedule, ForwardOnlyAddsLossesWithoutGradients) {
  ScheduleRun run("{}");
  auto batches = std::vector<layers::MicroBatch>{slice_batch(kTokens, kLabels, 0, 16, {0, 5, 8, 10, 16})};
  const double training_loss = run.step(batches);
  run.multi_stage.zero_gradients();
  layers::LossSums losses;
  run.runner.run_forward(batches, 1, losses);
  run.runner.run_forward(batches, 2, losses);
  EXPECT_NEAR(losses.all().at("mse").item() / 20.0, training_loss, 1e-12);
  for (const auto& [name, values] : run.gradients())
    for (double value : values) ASSERT_EQ(value, 0.0) << name;
}

TEST(Schedule, WrongMicroBatchCountIsAnError) {
  ScheduleRun run("{depth_first_micro_batches: 2}");
  std::vector<layers::MicroBatch> one = {slice_batch(kTokens, kLabels, 0, 16, {0, 5, 8, 10, 16})};
  EXPECT_THROW(run.runner.run_training_step(one, 10, 1, 1.0, run.losses), Error);
}

// ---------------------------------------------------------------------------------------------------------------------
// Micro-batch splits

std::vector<int64_t> values_of(const Tensor& tensor) {
  std::vector<int64_t> values;
  for (int64_t i = 0; i < tensor.numel(); ++i)
    values.push_back(tensor.dtype() == DType::int32 ? int64_t(tensor.data_as<int32_t>()[i * tensor.stride(0)])
                                                    : tensor.data_as<int64_t>()[i * tensor.stride(0)]);
  return values;
}

TEST(SequencePieces, RowsAndDocumentsOfEachPiece) {
  // Documents 5, 3, 2, 6 in 16 rows; 2 splits over 2 sequence-data ranks: rank 1 keeps rows [4, 8) and [12, 16).
  const layers::MicroBatch whole = slice_batch(kTokens, kLabels, 0, 16, {0, 5, 8, 10, 16});
  const std::vector<layers::MicroBatch> pieces =
      sequence_pieces(whole, 3, {.splits = 2, .sequence_data_parallel = 2, .sequence_data_rank = 1}, {});
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(values_of(pieces[0].tokens), std::vector<int64_t>(kTokens.begin() + 4, kTokens.begin() + 8));
  EXPECT_EQ(values_of(pieces[1].labels), std::vector<int64_t>(kLabels.begin() + 12, kLabels.end()));
  EXPECT_EQ(values_of(pieces[1].positions), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(values_of(pieces[0].cu_seqlens), (std::vector<int64_t>{0, 1, 4}));  // the end of 5, then 3
  EXPECT_EQ(pieces[0].max_seqlen, 3);
  EXPECT_EQ(values_of(pieces[1].cu_seqlens), (std::vector<int64_t>{0, 4}));
  for (int split = 0; split < 2; ++split) {
    const layers::SequencePiece& where = *pieces[size_t(split)].sequence_piece;
    EXPECT_EQ(where.sequence, 3);
    EXPECT_EQ(where.split, split);
    EXPECT_EQ(where.sequence_tokens, 16);
    EXPECT_EQ(where.split_tokens, 8);
    EXPECT_EQ(where.begin, 8 * split + 4);
    EXPECT_EQ(where.key_end(), 8 * (split + 1));
  }
  // The keys of split 0 are rows [0, 8): documents 5 and 3; of split 1 all of them.
  EXPECT_EQ(values_of(pieces[0].sequence_piece->key_cu_seqlens), (std::vector<int64_t>{0, 5, 8}));
  EXPECT_EQ(pieces[0].sequence_piece->key_max_seqlen, 5);
  EXPECT_EQ(values_of(pieces[1].sequence_piece->key_cu_seqlens), (std::vector<int64_t>{0, 5, 8, 10, 16}));
  EXPECT_EQ(pieces[1].sequence_piece->key_sequence_lengths, (std::vector<int64_t>{5, 3, 2, 6}));
}

TEST(SequencePieces, RefusesUnevenCutsPreferencePairsAndTokenData) {
  const layers::MicroBatch whole = slice_batch(kTokens, kLabels, 0, 16, {0, 5, 8, 10, 16});
  EXPECT_THROW(sequence_pieces(whole, 0, {.splits = 3}, {}), Error);
  layers::MicroBatch pairs = whole;
  pairs.preference_pairs.push_back({});
  EXPECT_THROW(sequence_pieces(pairs, 0, {.splits = 2}, {}), NotSupportedError);
  layers::MicroBatch token_data = whole;
  token_data.advantages = Tensor::empty(Shape{16}, DType::float32);
  EXPECT_THROW(sequence_pieces(token_data, 0, {.splits = 2}, {}), NotSupportedError);
}

TEST(Schedule, MicroBatchSplitsMatchTheWholeMicroBatch) {
  ScheduleRun whole("{}");
  const double whole_loss = whole.step({slice_batch(kTokens, kLabels, 0, 16, {0, 5, 8, 10, 16})});
  const auto whole_gradients = whole.gradients();
  for (const char* schedule : {"{micro_batch_splits: 2}", "{micro_batch_splits: 4}"}) {
    ScheduleRun split(schedule);
    EXPECT_NEAR(split.step({slice_batch(kTokens, kLabels, 0, 16, {0, 5, 8, 10, 16})}), whole_loss, 1e-12) << schedule;
    expect_same_gradients(split.gradients(), whole_gradients);
  }
}

TEST(Schedule, SplitsRunInOrderForwardAndInReverseBackward) {
  // Two breadth-first micro-batches in two splits each (piece j of micro-batch m is input 2 m + j), one stage: the
  // micro-batches' splits in order forward, each micro-batch's in reverse backward.
  ScheduleRun run("{breadth_first_micro_batches: 2, micro_batch_splits: 2}", 4.0);
  run.step({slice_batch(kTokens, kLabels, 0, 8, {0, 5, 8}), slice_batch(kTokens, kLabels, 8, 16, {0, 2, 8})});
  std::vector<std::string> heads;
  for (const std::string& event : run.events.events)
    if (event.starts_with("head")) heads.push_back(event);
  EXPECT_EQ(heads, (std::vector<std::string>{"head F 0", "head F 1", "head F 2", "head F 3", "head B 1", "head B 0",
                                              "head B 3", "head B 2"}));
}

}  // namespace
}  // namespace fast_llm::engine
