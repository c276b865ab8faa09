// Cutting sequences (layout_comparison.h): `schedule.micro_batch_splits` (each sample run as consecutive splits, the
// later attending to the earlier ones' keys) and `model.distributed.sequence_data_parallel` (the ranks of a group each
// keep a part of every split, attention gathering the keys) give the losses, gradient norms and updated weights of the
// unsplit one-process run. The model is Qwen2-style (grouped-query attention, rotary, query / key / value biases, a
// sliding window of 6 tokens) and the samples pack several documents of 3 to 11 tokens, so documents cross the split
// and rank boundaries. Layouts: ms2, ms4, df2 x bf2 x ms4 (the schedule's order), sdp2, sdp2 x ms2, sdp2 x batch 2 (4
// processes) and sdp2 x ms2 x df2 with ZeRO-3 against df2; with a pipeline (one stage of two layers per rank: the
// splits cross the ranks one message each), pp2s2_ms4 and sdp2_pp2s2_bf2_ms2 (4 processes); an sdp2 checkpoint
// resumed by one process; reference models (distillation) with ms4; a sequence that does not cut evenly, dropout and
// reference models with sequence-data parallelism refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "fast_llm/data/memmap.h"
#include "layout_comparison.h"

namespace fast_llm {
namespace {

namespace fs = std::filesystem;


class SequenceTrainingTest : public testing::LayoutComparisonTest {
 protected:
  const char* config() const override { return testing::kQwen2Config; }
  // layout_comparison.h's Qwen2-style model with two blocks in one stage and the head's default norm. The key bias (in
  // key_value's bias, with the value bias) trains with learning rate 0: its gradient is zero up to rounding (softmax
  // ignores what it adds), and Adam would turn that noise into updates that differ with the order of the sums
  // (layout_comparison.h). Every run names its datasets (train_documents).
  std::vector<std::string> config_changes() const override {
    return {"model.base_model.decoder.block.mixer.head_size=8",
            "model.base_model.decoder.block.mixer.key_layer.bias.lr_scale=0.0",
            "model.base_model.decoder.num_blocks=2",
            "model.base_model.head={}",
            "model.multi_stage.layers_per_stage=2"};
  }

  void SetUp() override {
    LayoutComparisonTest::SetUp();
    data::MemmapWriter writer(directory_ / "documents.fast_llm_dataset", {});
    for (int index = 0; index < 60; ++index) {
      data::Document document;
      const int size = 3 + (index * 7) % 9;
      for (int token = 0; token < size; ++token) document.tokens.push_back((index * 13 + token * 5 + 1) % 64);
      writer.add_document(document);
    }
    writer.finish();
  }

  // train() on the documents above (set before `overrides`, which may add datasets).
  fs::path train_documents(const std::string& name, int processes, std::vector<std::string> overrides) {
    overrides.insert(overrides.begin(), "data.datasets={training: {type: memmap, path: " +
                                            (directory_ / "documents.fast_llm_dataset").string() + "}}");
    return train(name, processes, std::move(overrides));
  }
};

TEST_F(SequenceTrainingTest, MicroBatchSplitsMatchTheWholeMicroBatches) {
  const fs::path whole = train_documents("ms1", 0, {});
  expect_same_run(train_documents("ms2", 0, {"schedule.micro_batch_splits=2"}), whole);
  expect_same_run(train_documents("ms4", 0, {"schedule.micro_batch_splits=4"}), whole);
  // Four micro-batches per step in two depth-first groups of two breadth-first ones, each in four splits.
  const std::vector<std::string> schedule{"schedule.depth_first_micro_batches=2",
                                          "schedule.breadth_first_micro_batches=2"};
  std::vector<std::string> split = schedule;
  split.push_back("schedule.micro_batch_splits=4");
  expect_same_run(train_documents("df2_bf2_ms4", 0, split), train_documents("df2_bf2", 0, schedule));
}

TEST_F(SequenceTrainingTest, SequenceDataParallelMatchesOneProcess) {
  const fs::path whole = train_documents("single", 0, {});
  const fs::path parallel = train_documents("sdp2", 2, {"model.distributed.sequence_data_parallel=2"});
  expect_same_run(parallel, whole);
  expect_same_run(
      train_documents("sdp2_ms2", 2, {"model.distributed.sequence_data_parallel=2", "schedule.micro_batch_splits=2"}),
      whole);
  // The sdp2 checkpoint of step 2 resumed by one process: the same step 3.
  const fs::path loaded = stopped_copy(parallel, "sdp2_loaded_by_1", 2);
  train_documents("sdp2_loaded_by_1", 0, {});
  expect_same_checkpoint(loaded, whole, 3, tolerance_);
}

TEST_F(SequenceTrainingTest, SequenceDataParallelWithBatchDataParallelMatchesOneProcess) {
  // Four processes: two batch-data ranks reading different samples, each sample cut over two sequence-data ranks.
  const fs::path whole = train_documents("df2", 0, {"schedule.depth_first_micro_batches=2"});
  expect_same_run(train_documents("sdp2_dp4", 4, {"model.distributed.sequence_data_parallel=2"}), whole);
  // Two processes with ZeRO-3 (weights gathered per stage, one stage per layer), two depth-first micro-batches in two
  // splits each.
  expect_same_run(train_documents("sdp2_ms2_df2_zero3", 2,
                                  {"model.distributed.sequence_data_parallel=2", "schedule.micro_batch_splits=2",
                                   "schedule.depth_first_micro_batches=2", "model.multi_stage.zero_stage=3",
                                   "model.multi_stage.layers_per_stage=1"}),
                  whole);
}

// Pieces of sequences through a pipeline: the splits of a micro-batch go through stage 0 on rank 0 and stage 1 on
// rank 1 in order, their gradients come back in reverse, each piece one message; evaluations (forward only) too.
TEST_F(SequenceTrainingTest, PipelineWithSplitsMatchesOneProcess) {
  const std::vector<std::string> evaluator = {
      "data.datasets.validation={type: memmap, path: " + (directory_ / "documents.fast_llm_dataset").string() + "}",
      "training.evaluators.validation={type: loss, interval: 1, iterations: 2}"};
  const fs::path whole = train_documents("single", 0, evaluator);
  std::vector<std::string> pipeline = evaluator;
  pipeline.insert(pipeline.end(), {"model.distributed.pipeline_parallel=2", "schedule.micro_batch_splits=4"});
  const fs::path split = train_documents("pp2s2_ms4", 2, pipeline);
  expect_same_run(split, whole);
  const std::vector<double> expected = validation_losses(whole), actual = validation_losses(split);
  ASSERT_EQ(actual.size(), expected.size());
  ASSERT_FALSE(expected.empty());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(actual[i], expected[i], tolerance_ * expected[i]) << i;
  // Four processes: two pipeline ranks of two sequence-data ranks each, two breadth-first micro-batches in two splits.
  const fs::path whole_bf2 = train_documents("bf2", 0, {"schedule.breadth_first_micro_batches=2"});
  expect_same_run(train_documents("sdp2_pp2s2_bf2_ms2", 4,
                                  {"model.distributed.sequence_data_parallel=2", "model.distributed.pipeline_parallel=2",
                                   "schedule.breadth_first_micro_batches=2", "schedule.micro_batch_splits=2"}),
                  whole_bf2);
}

// With tensor parallelism: sequence-data ranks that each split their rows over a tensor group (sdp2_stp2, 4
// processes), and the matrix's largest sequence layout, sdp2_stp2_pp2s2_ms4 (8 processes: two pipeline ranks of two
// sequence-data ranks of two tensor ranks, four splits of 2 rows per sequence-data rank, one row per tensor rank).
TEST_F(SequenceTrainingTest, SequenceAndTensorParallelMatchOneProcess) {
  tolerance_ = mode_.tensor_split_tolerance;
  const fs::path whole = train_documents("single", 0, {});
  expect_same_run(train_documents("sdp2_stp2", 4,
                                  {"model.distributed.sequence_data_parallel=2", "model.distributed.tensor_parallel=2",
                                   "model.distributed.sequence_tensor_parallel=true"}),
                  whole);
  const fs::path largest = train_documents("sdp2_stp2_pp2s2_ms4", 8,
                                           {"model.distributed.sequence_data_parallel=2",
                                            "model.distributed.tensor_parallel=2",
                                            "model.distributed.sequence_tensor_parallel=true",
                                            "model.distributed.pipeline_parallel=2",
                                            "model.multi_stage.layers_per_stage=2", "schedule.micro_batch_splits=4"});
  expect_same_run(largest, whole);
  // One checkpoint file per (pipeline, data, tensor) rank: the layout really ran.
  EXPECT_TRUE(fs::exists(largest / "checkpoint" / "3" / "rank_7.safetensors"));
}

// A reference model read by the distillation loss and by every block's activation distillation runs on the whole
// micro-batch; its splits read their rows of its outputs: the losses of the unsplit run. Sequence-data parallelism
// refuses reference models, as Fast-LLM does.
TEST_F(SequenceTrainingTest, ReferenceModelsWithSplitsMatchTheWholeMicroBatches) {
  const std::vector<std::string>& overrides = testing::kReferenceModelOverrides;
  std::vector<std::string> split = overrides;
  split.push_back("schedule.micro_batch_splits=4");
  const fs::path whole = train_documents("reference_ms1", 0, overrides);
  const fs::path splits = train_documents("reference_ms4", 0, split);
  expect_same_run(splits, whole);
  auto logged = [](const fs::path& experiment) {
    return training_values(experiment, {"kd", "activation_distillation_loss"});
  };
  const std::vector<double> expected = logged(whole), actual = logged(splits);
  ASSERT_EQ(actual.size(), expected.size());
  ASSERT_FALSE(expected.empty());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], tolerance_ * (1 + std::abs(expected[i]))) << i;
}

TEST_F(SequenceTrainingTest, UnevenCutsAndDropoutAreRefused) {
  const auto refused = [&](const std::string& name, const std::vector<std::string>& overrides,
                           const std::string& message) {
    std::vector<std::string> arguments{"train", "gpt", "-c", (directory_ / "config.yaml").string(),
                                       "run.experiment_dir=" + (directory_ / name).string(),
                                       "data.datasets={training: {type: random}}"};
    arguments.insert(arguments.end(), overrides.begin(), overrides.end());
    const testing::Outcome outcome = testing::run_fast_llm(arguments, directory_, std::chrono::seconds(60),
                                                           std::nullopt, {{"OMP_NUM_THREADS", "1"}});
    EXPECT_TRUE(outcome.exited && outcome.status != 0) << outcome.output;
    EXPECT_NE(outcome.output.find(message), std::string::npos) << outcome.output;
  };
  refused("uneven", {"schedule.micro_batch_splits=3"},
          "data.micro_batch_size: 16 tokens do not cut into schedule.micro_batch_splits x "
          "model.distributed.sequence_data_parallel = 3 x 1 equal pieces");
  refused("dropout", {"schedule.micro_batch_splits=2", "model.base_model.decoder.block.dropout=0.1"},
          "draws random numbers (dropout), which schedule.micro_batch_splits 2 and "
          "model.distributed.sequence_data_parallel 1 would draw differently");
  refused("reference_sdp2",
          {"--nproc-per-node", "2", "model.distributed.sequence_data_parallel=2",
           "model.base_model.head.losses={ce: {type: label}, kd: {type: distillation, reference_model: teacher}}",
           "reference_models={teacher: {model: {base_model: {embeddings: {vocab_size: 64}, decoder: {block: {mixer: "
           "{type: attention, heads: 2, head_groups: 1, head_size: 8}, mlp: {intermediate_size: 32}}, num_blocks: 1}, "
           "hidden_size: 16}}}}"},
          "reference models need model.distributed.sequence_data_parallel 1");
}

}  // namespace
}  // namespace fast_llm
