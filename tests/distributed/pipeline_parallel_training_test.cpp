// Pipeline-parallel training, run as users run it (`fast-llm train gpt --nproc-per-node N`, layout_comparison.h), on a
// Qwen2-style model (grouped-query attention, rotary, biases on the query, key and value projections, a sliding window)
// of six blocks: eight layers, so two stages per pipeline rank with one layer per stage and with two. Each layout gives
// the losses, gradient norms and updated weights of one process running the same micro-batches: pp2s1_bf4 and
// pp2s2_bf4 against one process with four breadth-first micro-batches, dp2_pp2s2_bf4 (four processes) against eight,
// tied embeddings with the embeddings and the head on different ranks, ZeRO-2 and 3, evaluations, a mixture of experts
// (router losses on both ranks). A pipeline's checkpoint resumes bit for bit in its layout, loads in one process and
// in another stage layout, converts in one process, its fast_llm and Hugging Face exports equal one process's, and it
// starts a pipeline run as pretrained weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "layout_comparison.h"

namespace fast_llm {
namespace {

namespace fs = std::filesystem;

const std::string kExport = "training.export={format: fast_llm, interval: 3, optimizer_state: true}";
const std::string kPipeline = "model.distributed.pipeline_parallel=2";
const std::string kBreadthFirst4 = "schedule.breadth_first_micro_batches=4";

class PipelineParallelTrainingTest : public testing::LayoutComparisonTest {
 protected:
  const char* config() const override { return testing::kQwen2Config; }
};

// Forward-only evaluations (every micro-batch of an iteration breadth-first) give one process's losses too.
const std::vector<std::string> kEvaluator = {"data.datasets.validation={type: random}",
                                             "training.evaluators.validation={type: loss, interval: 2, iterations: 2}"};

TEST_F(PipelineParallelTrainingTest, TwoPipelineRanksMatchOneProcessResumeAndLoadInOne) {
  std::vector<std::string> single_overrides = kEvaluator;
  single_overrides.insert(single_overrides.end(), {kBreadthFirst4, kExport});
  const fs::path single = train("bf4", 0, single_overrides);
  const std::vector<double> expected_validation = validation_losses(single);
  ASSERT_EQ(expected_validation.size(), 2u);
  // pp2s1: stages 0, 2, 4, 6 on rank 0 and 1, 3, 5, 7 on rank 1; pp2s2: two stages of two layers on each rank.
  for (const char* layers_per_stage : {"1", "2"}) {
    const std::string name = std::string("pp2s") + layers_per_stage + "_bf4";
    std::vector<std::string> overrides = kEvaluator;
    overrides.insert(overrides.end(), {kPipeline, std::string("model.multi_stage.layers_per_stage=") + layers_per_stage,
                                       kBreadthFirst4, kExport, "schedule.debug_schedule=true"});
    const fs::path pipeline = train(name, 2, overrides);
    EXPECT_NE(output_.find("Pipeline over 2 ranks"), std::string::npos) << output_;
    // Each rank's steps: its stages' forwards over the four micro-batches, then their backwards in reverse.
    EXPECT_NE(output_.find(std::string(layers_per_stage) == "1"
                               ? "Schedule of pipeline rank 1 (F/B stage.micro-batch): F1.0 F1.1 F1.2 F1.3 F3.0"
                               : "Schedule of pipeline rank 0 (F/B stage.micro-batch): F0.0 F0.1 F0.2 F0.3 F2.0 F2.1 "
                                 "F2.2 F2.3 B2.0 B2.1 B2.2 B2.3 B0.0"),
              std::string::npos)
        << output_;
    expect_same_records(records(pipeline), records(single), tolerance_);
    const std::vector<double> validation = validation_losses(pipeline);
    ASSERT_EQ(validation.size(), expected_validation.size());
    for (size_t index = 0; index < validation.size(); ++index)
      EXPECT_NEAR(validation[index], expected_validation[index], tolerance_ * expected_validation[index]) << index;
    expect_same_checkpoint(pipeline, single, 3, tolerance_);
    expect_same_export(pipeline, single, 3, tolerance_);
  }
  // Each pipeline rank wrote its stages' shards.
  const fs::path pipeline = directory_ / "pp2s2_bf4";
  EXPECT_TRUE(fs::exists(pipeline / "checkpoint" / "3" / "rank_0.safetensors"));
  EXPECT_TRUE(fs::exists(pipeline / "checkpoint" / "3" / "rank_1.safetensors"));

  // `fast-llm convert` reads the pipeline's checkpoint in one process: the one-process export.
  const testing::Outcome converted = testing::run_fast_llm(
      {"convert", "gpt", "input.format=distributed", "input.path=" + (pipeline / "checkpoint" / "3").string(),
       "input.optimizer_state=true", "output.format=fast_llm", "output.optimizer_state=true",
       "output.path=" + (directory_ / "pp2s2_converted").string()},
      directory_);
  ASSERT_TRUE(converted.exited && converted.status == 0) << converted.output;
  expect_same_state(*engine::open_fast_llm_checkpoint(directory_ / "pp2s2_converted").state,
                    *engine::open_fast_llm_checkpoint(single / "export" / "fast_llm" / "3").state, tolerance_);

  // Stopped after step 2 and restarted in the same layout: bit for bit the uninterrupted run.
  const fs::path resumed = stopped_copy(pipeline, "pp2s2_resumed", 2);
  train("pp2s2_resumed", 2, {kPipeline, "model.multi_stage.layers_per_stage=2", kBreadthFirst4});
  expect_same_checkpoint(resumed, pipeline, 3, mode_.resume_tolerance);
  // The pipeline's checkpoint of step 2 continued by one process (and by pp2s1, another stage layout).
  const fs::path by_one = stopped_copy(pipeline, "pp2s2_by_1", 2);
  train("pp2s2_by_1", 0, {kBreadthFirst4});
  expect_same_checkpoint(by_one, single, 3, tolerance_);
  const fs::path by_s1 = stopped_copy(pipeline, "pp2s2_by_pp2s1", 2);
  train("pp2s2_by_pp2s1", 2, {kPipeline, kBreadthFirst4});
  expect_same_checkpoint(by_s1, single, 3, tolerance_);
}

// Four processes, two data-parallel ranks of a two-rank pipeline: a global batch of 2 x 4 micro-batches, as one
// process with eight.
TEST_F(PipelineParallelTrainingTest, DataAndPipelineParallelMatchOneProcess) {
  const fs::path single = train("bf8", 0, {"schedule.breadth_first_micro_batches=8", kExport});
  const fs::path parallel =
      train("dp2_pp2s2_bf4", 4, {kPipeline, "model.multi_stage.layers_per_stage=2", kBreadthFirst4, kExport});
  EXPECT_NE(output_.find("ZeRO over 2 data-parallel ranks"), std::string::npos) << output_;
  expect_same_run(parallel, single);
  expect_same_export(parallel, single, 3, tolerance_);
  // Two depth-first groups of four on one process are the same batch in another order of steps.
  const fs::path accumulated = train("df2_bf4", 0, {"schedule.depth_first_micro_batches=2", kBreadthFirst4});
  expect_same_records(records(parallel), records(accumulated), tolerance_);
}

// ZeRO-2 and 3 under a pipeline: four stages on each rank share two gradient (and weight) buffers.
TEST_F(PipelineParallelTrainingTest, ZeroStagesTwoAndThreeWithTwoPipelineRanks) {
  const fs::path single = train("bf8", 0, {"schedule.breadth_first_micro_batches=8"});
  for (int zero : {2, 3}) {
    const std::string zero_stage = "model.multi_stage.zero_stage=" + std::to_string(zero);
    const fs::path parallel =
        train("dp2_pp2s1_bf4_z" + std::to_string(zero), 4, {kPipeline, kBreadthFirst4, zero_stage});
    EXPECT_NE(output_.find("gradients in 2 shared buffers"), std::string::npos) << output_;
    EXPECT_EQ(output_.find("weights in 2 shared buffers") != std::string::npos, zero == 3) << output_;
    expect_same_run(parallel, single);
  }
}

// Tied embeddings with the embeddings (stage 0, rank 0) and the head (stage 7, rank 1) on different ranks: the head's
// rank keeps a copy of the matrix that takes the same updates.
TEST_F(PipelineParallelTrainingTest, TiedEmbeddingsAcrossPipelineRanks) {
  const std::string tied = "model.base_model.tied_embedding_weight=true";
  const fs::path single = train("bf4_tied", 0, {tied, kBreadthFirst4, kExport});
  const fs::path pipeline = train("pp2s1_bf4_tied", 2, {tied, kPipeline, kBreadthFirst4, kExport});
  EXPECT_NE(output_.find("tied weights copied to the ranks that read them"), std::string::npos) << output_;
  expect_same_run(pipeline, single);
  expect_same_export(pipeline, single, 3, tolerance_);
  // Resumed in its layout, the head's rank reads its copy of the matrix from the owner's file: bit for bit.
  const fs::path resumed = stopped_copy(pipeline, "pp2s1_bf4_tied_resumed", 2);
  train("pp2s1_bf4_tied_resumed", 2, {tied, kPipeline, kBreadthFirst4});
  expect_same_checkpoint(resumed, pipeline, 3, mode_.resume_tolerance);
  // With two data-parallel ranks and ZeRO-3 too.
  const fs::path single_bf8 = train("bf8_tied", 0, {tied, "schedule.breadth_first_micro_batches=8"});
  const fs::path parallel = train("dp2_pp2s1_bf4_z3_tied", 4, {tied, kPipeline, kBreadthFirst4,
                                                               "model.multi_stage.zero_stage=3"});
  expect_same_run(parallel, single_bf8);
}

// The Hugging Face export of a pipeline run (qwen2, which has no sliding window) is one process's.
TEST_F(PipelineParallelTrainingTest, HuggingFaceExportOfAPipelineRunMatchesOneProcess) {
  const std::vector<std::string> qwen2 = {"model.base_model.decoder.block.mixer.window_size=null",
                                          "training.export={format: qwen2, interval: 3}",
                                          "training.checkpoint.interval=null", kBreadthFirst4};
  const fs::path single = train("qwen2_bf4", 0, qwen2);
  std::vector<std::string> overrides = qwen2;
  overrides.insert(overrides.end(), {kPipeline, "model.multi_stage.layers_per_stage=2"});
  const fs::path pipeline = train("qwen2_pp2s2_bf4", 2, overrides);
  const fs::path folder = fs::path("export") / "qwen2" / "3";
  ASSERT_TRUE(fs::exists(pipeline / folder / "config.json"));
  expect_same_state(*engine::SafetensorsSet::open_huggingface(pipeline / folder),
                    *engine::SafetensorsSet::open_huggingface(single / folder), tolerance_);
}

// Pretrained weights (a fast_llm export) start a pipeline run: each rank loads its stages.
TEST_F(PipelineParallelTrainingTest, PretrainedWeightsLoadIntoEachRanksStages) {
  const fs::path source = train("source", 0, {kExport, "training.checkpoint.interval=null"});
  const std::string pretrained =
      "pretrained={format: fast_llm, path: " + (source / "export" / "fast_llm" / "3").string() + "}";
  const fs::path single = train("pretrained_bf4", 0, {pretrained, kBreadthFirst4});
  const fs::path pipeline = train("pretrained_pp2s2_bf4", 2,
                                  {pretrained, kPipeline, "model.multi_stage.layers_per_stage=2", kBreadthFirst4});
  expect_same_run(pipeline, single);
}

// A mixture of experts: the router losses come from the blocks of both ranks and the head's loss from the last one;
// merged by name over the ranks, the logged values are one process's.
TEST_F(PipelineParallelTrainingTest, RouterLossesOfBothRanksMatchOneProcess) {
  const std::string moe =
      "model.base_model.decoder.block.mlp={type: moe, experts: 4, experts_per_token: 2, intermediate_size: 16, "
      "gated: true, add_linear_biases: false, auxiliary_loss_coefficient: 0.1, z_loss_coefficient: 0.01}";
  const fs::path single = train("moe_bf4", 0, {moe, kBreadthFirst4, "training.checkpoint.interval=null"});
  const fs::path pipeline =
      train("moe_pp2s1_bf4", 2, {moe, kPipeline, kBreadthFirst4, "training.checkpoint.interval=null"});
  expect_same_records(records(pipeline), records(single), tolerance_);
  auto router_losses = [](const fs::path& experiment) {
    return training_values(experiment, {"load_balancing_loss", "router_z_loss"});
  };
  const std::vector<double> expected = router_losses(single), actual = router_losses(pipeline);
  ASSERT_EQ(actual.size(), 6u);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t index = 0; index < expected.size(); ++index) {
    EXPECT_GT(expected[index], 0.0) << index;
    EXPECT_NEAR(actual[index], expected[index], tolerance_ * expected[index]) << index;
  }
}

// Fewer stages than pipeline ranks: every rank stops with an error naming the two fields, nothing hangs.
TEST_F(PipelineParallelTrainingTest, FewerStagesThanPipelineRanksIsRefused) {
  const testing::Outcome outcome = testing::run_fast_llm(
      {"train", "gpt", "--nproc-per-node", "2", "-c", (directory_ / "config.yaml").string(),
       "run.experiment_dir=" + (directory_ / "refused").string(), kPipeline, "model.multi_stage.layers_per_stage=8"},
      directory_, std::chrono::seconds(120), std::nullopt, {{"OMP_NUM_THREADS", "1"}});
  EXPECT_TRUE(outcome.exited && outcome.status != 0) << outcome.output;
  EXPECT_NE(outcome.output.find("1 stages cannot fill 2 pipeline ranks"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("model.multi_stage.layers_per_stage"), std::string::npos) << outcome.output;
}

}  // namespace
}  // namespace fast_llm
