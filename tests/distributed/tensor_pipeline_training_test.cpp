// Tensor and pipeline parallelism combined, run as users run it (`fast-llm train gpt --nproc-per-node N`,
// layout_comparison.h): each pipeline stage's layers split over a tensor-parallel group, the activations between stages
// sent per tensor rank (with sequence-tensor parallelism, each rank's sequence shard), and the embeddings tied to the
// head across pipeline ranks as vocabulary slices. The layouts of Fast-LLM's matrix that combine them, stp2_pp2s1_bf4
// (4 processes, also resumed in its layout), dp2_stp2_pp2s2_bf4 (8, with ZeRO-2) and dp2_tp2_pp2s1_bf4 with tied
// embeddings (8; stp2_pp2s2_bf4 too, a block in the tied stage), give the losses, gradient norms and updated weights of
// one process running the same global batch. A tp2 x pp2 checkpoint (files rank_<(p * dp + d) * tp + t>) loads in one
// process and in stp2, one process's loads in tp2 x pp2, and its Hugging Face (qwen2) export and conversion equal one
// process's. The model is Qwen2-style: grouped-query attention, rotary embeddings, biases on the query, key and value
// projections and (except for the Hugging Face export, which Qwen2 lacks) a sliding window.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "layout_comparison.h"

namespace fast_llm {
namespace {

namespace fs = std::filesystem;

// layout_comparison.h's Qwen2-style model with two blocks, one layer per stage: four stages (embeddings, block 0,
// block 1, head), two on each pipeline rank. Adam's epsilon is larger than the default for the reason
// tensor_parallel_training_test.cpp gives (gradients of zero up to rounding, which Adam's first steps would otherwise
// turn into updates that depend on the summation order).
class TensorPipelineTrainingTest : public testing::LayoutComparisonTest {
 protected:
  TensorPipelineTrainingTest() { tolerance_ = mode_.tensor_split_tolerance; }
  const char* config() const override { return testing::kQwen2Config; }
  std::vector<std::string> config_changes() const override {
    return {"model.base_model.decoder.num_blocks=2", "optimizer.epsilon=1.0e-5", "model.distributed.timeout=60"};
  }
};

const std::string kTensorParallel = "model.distributed.tensor_parallel=2";
const std::string kSequenceTensorParallel = "model.distributed.sequence_tensor_parallel=true";
const std::string kPipeline = "model.distributed.pipeline_parallel=2";
const std::string kBreadthFirst4 = "schedule.breadth_first_micro_batches=4";
const std::string kExport = "training.export={format: fast_llm, interval: 3, optimizer_state: true}";

std::vector<std::string> with(std::vector<std::string> overrides, const std::vector<std::string>& more) {
  overrides.insert(overrides.end(), more.begin(), more.end());
  return overrides;
}

// stp2_pp2s1_bf4: 4 processes, tensor ranks adjacent (world rank = pipeline rank x 2 + tensor rank).
TEST_F(TensorPipelineTrainingTest, SequenceTensorAndPipelineParallelMatchOneProcess) {
  const fs::path single = train("bf4", 0, {kBreadthFirst4, kExport});
  const fs::path parallel =
      train("stp2_pp2s1_bf4", 4, {kTensorParallel, kSequenceTensorParallel, kPipeline, kBreadthFirst4, kExport});
  EXPECT_NE(output_.find("Pipeline over 2 ranks"), std::string::npos) << output_;
  ASSERT_EQ(records(single).size(), 3u);
  expect_same_run(parallel, single);
  expect_same_export(parallel, single, 3, tolerance_);
  // One file per (pipeline rank, tensor rank).
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_TRUE(fs::exists(parallel / "checkpoint" / "3" / ("rank_" + std::to_string(rank) + ".safetensors")))
        << rank;
  // Stopped after step 2 and restarted in its layout: each rank reads its own file, bit for bit the uninterrupted run.
  const fs::path resumed = stopped_copy(parallel, "stp2_pp2s1_bf4_resumed", 2);
  train("stp2_pp2s1_bf4_resumed", 4, {kTensorParallel, kSequenceTensorParallel, kPipeline, kBreadthFirst4});
  expect_same_checkpoint(resumed, parallel, 3, mode_.resume_tolerance);
}

// dp2_stp2_pp2s2_bf4: 8 processes, two layers per stage (one stage per pipeline rank), ZeRO-2 within each data-parallel
// group of a (pipeline, tensor) rank; a global batch of 2 x 4 micro-batches as one process with 8.
TEST_F(TensorPipelineTrainingTest, DataSequenceTensorAndPipelineParallelMatchOneProcess) {
  const fs::path single = train("bf8", 0, {"schedule.breadth_first_micro_batches=8"});
  const fs::path parallel =
      train("dp2_stp2_pp2s2_bf4", 8, {kTensorParallel, kSequenceTensorParallel, kPipeline, kBreadthFirst4,
                                      "model.multi_stage.layers_per_stage=2", "model.multi_stage.zero_stage=2"});
  expect_same_run(parallel, single);
  // pipeline_first swaps the data and pipeline ranks in the world (the checkpoint files keep their numbering).
  const fs::path swapped = train("dp2_stp2_pp2s2_bf4_pipeline_first", 8,
                                 {kTensorParallel, kSequenceTensorParallel, kPipeline, kBreadthFirst4,
                                  "model.multi_stage.layers_per_stage=2", "model.distributed.pipeline_first=true"});
  expect_same_run(swapped, single);
}

// dp2_tp2_pp2s1_bf4 with the embeddings tied to the head: 8 processes, a global batch of 2 x 4 micro-batches as one
// process with 8. The head's pipeline rank keeps a copy of each tensor rank's vocabulary slice of the embeddings.
TEST_F(TensorPipelineTrainingTest, DataTensorAndPipelineParallelWithTiedEmbeddingsMatchOneProcess) {
  const std::string tied = "model.base_model.tied_embedding_weight=true";
  const fs::path single = train("bf8_tied", 0, {tied, "schedule.breadth_first_micro_batches=8"});
  const fs::path parallel = train("dp2_tp2_pp2s1_bf4_tied", 8, {tied, kTensorParallel, kPipeline, kBreadthFirst4});
  EXPECT_NE(output_.find("tied weights copied to the ranks that read them"), std::string::npos) << output_;
  expect_same_run(parallel, single);
  // stp2_pp2s2_bf4: block 0 shares the embeddings' stage, so the tied stage holds the block's norms, whose gradients
  // each tensor rank computes a part of (sequence-tensor parallelism): summed over the tensor group after the tie
  // group's sum.
  const fs::path single_bf4 = train("bf4_tied", 0, {tied, kBreadthFirst4});
  const fs::path sequence = train("stp2_pp2s2_bf4_tied", 4, {tied, kTensorParallel, kSequenceTensorParallel, kPipeline,
                                                             kBreadthFirst4, "model.multi_stage.layers_per_stage=2"});
  expect_same_run(sequence, single_bf4);
}

// A tp2 x pp2 run's checkpoint continued by one process, and its Hugging Face (qwen2) export and conversion: one
// process's (Qwen2 has no sliding window).
TEST_F(TensorPipelineTrainingTest, TensorPipelineCheckpointLoadsInOneProcessAndExportsAsOneProcess) {
  const std::vector<std::string> qwen2{"model.base_model.decoder.block.mixer.window_size=null",
                                       "training.export={format: qwen2, interval: 3}", kBreadthFirst4};
  const fs::path single = train("qwen2_bf4", 0, qwen2);
  const fs::path parallel = train("qwen2_tp2_pp2s1_bf4", 4, with(qwen2, {kTensorParallel, kPipeline}));
  expect_same_records(records(parallel), records(single), tolerance_);
  const fs::path folder = fs::path("export") / "qwen2" / "3";
  ASSERT_TRUE(fs::exists(parallel / folder / "config.json"));
  expect_same_state(*engine::SafetensorsSet::open_huggingface(parallel / folder),
                    *engine::SafetensorsSet::open_huggingface(single / folder), tolerance_);

  // `fast-llm convert` puts the stages and tensor parts of the checkpoint together in one process.
  const fs::path converted = directory_ / "qwen2_tp2_pp2s1_bf4_hf";
  const testing::Outcome outcome = testing::run_fast_llm(
      {"convert", "gpt", "input.format=distributed", "input.path=" + (parallel / "checkpoint" / "3").string(),
       "output.format=qwen2", "output.path=" + converted.string()},
      directory_);
  ASSERT_TRUE(outcome.exited && outcome.status == 0) << outcome.output;
  expect_same_state(*engine::SafetensorsSet::open_huggingface(converted),
                    *engine::SafetensorsSet::open_huggingface(single / folder), tolerance_);

  // The checkpoint of step 2 continued by one process, and by another layout (stp2 without a pipeline): the same
  // step 3.
  const fs::path by_one = stopped_copy(parallel, "qwen2_tp2_pp2s1_bf4_by_1", 2);
  train("qwen2_tp2_pp2s1_bf4_by_1", 0, qwen2);
  expect_same_checkpoint(by_one, single, 3, tolerance_);
  const fs::path by_stp2 = stopped_copy(parallel, "qwen2_tp2_pp2s1_bf4_by_stp2", 2);
  train("qwen2_tp2_pp2s1_bf4_by_stp2", 2, with(qwen2, {kTensorParallel, kSequenceTensorParallel}));
  expect_same_checkpoint(by_stp2, single, 3, tolerance_);
  // And one process's checkpoint of step 2 continued on tp2 x pp2 (each rank takes its stages' parts).
  const fs::path split = stopped_copy(single, "qwen2_bf4_by_tp2_pp2s1", 2);
  train("qwen2_bf4_by_tp2_pp2s1", 4, with(qwen2, {kTensorParallel, kPipeline}));
  expect_same_checkpoint(split, single, 3, tolerance_);
}

}  // namespace
}  // namespace fast_llm
