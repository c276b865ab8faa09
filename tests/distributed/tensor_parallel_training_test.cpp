// Tensor and sequence-tensor parallelism, run as users run it (`fast-llm train gpt --nproc-per-node N`,
// layout_comparison.h): the layers split over 2 tensor-parallel processes (attention by heads and head groups, the MLP
// by its intermediate features; with sequence_tensor_parallel the activations between blocks split over the sequence)
// give the losses, gradient norms and updated weights of one process, alone and combined with gradient accumulation and
// data parallelism, with tied embeddings, with the head's loss in chunks, with multi-query attention, with the
// vocabulary split over the ranks (the default: z-loss, scale and softcap included) or whole on each. The model is
// Qwen2-like: grouped-query attention (4 heads in 2 groups), rotary embeddings, biases on the linear layers and a
// sliding window. Checkpoints written by a tensor-parallel run load on one process (and one process's on two tensor
// ranks), and its fast_llm export and Hugging Face conversion equal one process's.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "layout_comparison.h"

namespace fast_llm {
namespace {

namespace fs = std::filesystem;

class TensorParallelTrainingTest : public testing::LayoutComparisonTest {
 protected:
  TensorParallelTrainingTest() { tolerance_ = mode_.tensor_split_tolerance; }
  const char* config() const override { return testing::kQwen2Config; }
  // layout_comparison.h's Qwen2-style model with biases on every linear layer, two blocks in one stage and the
  // head's default norm. Adam's epsilon is larger than the default: the key projection's bias has a gradient of zero
  // up to rounding (softmax ignores what it adds to every key), and so, by chance, may a few other elements (one of
  // dense.weight's here: 1e-5 of the typical size); Adam's first steps would turn such a gradient into an update of
  // about the learning rate whatever its size, different in every summation order. With epsilon 1e-5 they move by
  // little, while every gradient of a normal size still gets Adam's update.
  std::vector<std::string> config_changes() const override {
    return {"model.base_model.decoder.block.mixer.head_size=8",
            "model.base_model.decoder.block.mixer.add_linear_biases=true",
            "model.base_model.decoder.block.mixer.window_size=8",
            "model.base_model.decoder.block.mlp.add_linear_biases=true",
            "model.base_model.decoder.num_blocks=2",
            "model.base_model.head={}",
            "model.multi_stage.layers_per_stage=2",
            "optimizer.epsilon=1.0e-5"};
  }
};

const std::string kTensorParallel = "model.distributed.tensor_parallel=2";
const std::string kSequenceTensorParallel = "model.distributed.sequence_tensor_parallel=true";
const std::vector<std::string> kExport{"training.export.format=fast_llm", "training.export.interval=3",
                                       "training.export.optimizer_state=true"};

std::vector<std::string> with(std::vector<std::string> overrides, const std::vector<std::string>& more) {
  overrides.insert(overrides.end(), more.begin(), more.end());
  return overrides;
}

TEST_F(TensorParallelTrainingTest, TwoTensorRanksMatchOneProcessAndLoadOnOne) {
  const fs::path single = train("single", 0, kExport);
  const fs::path parallel = train("tp2", 2, with(kExport, {kTensorParallel}));
  ASSERT_EQ(records(single).size(), 3u);
  expect_same_records(records(parallel), records(single), tolerance_);
  // The checkpoint reader puts the tensor ranks' parts together: every parameter and moment as one process has it.
  expect_same_checkpoint(parallel, single, 3, tolerance_);
  expect_same_export(parallel, single, 3, tolerance_);
  EXPECT_TRUE(fs::exists(parallel / "checkpoint" / "3" / "rank_1.safetensors"));

  // Stopped after step 2 and restarted on 2 tensor ranks: bit for bit the uninterrupted run.
  const fs::path resumed = stopped_copy(parallel, "tp2_resumed", 2);
  train("tp2_resumed", 2, {kTensorParallel});
  expect_same_checkpoint(resumed, parallel, 3, mode_.resume_tolerance);

  // The tensor-parallel checkpoint of step 2 loaded by one process: the same step 3.
  const fs::path loaded = stopped_copy(parallel, "tp2_loaded_by_1", 2);
  train("tp2_loaded_by_1", 0, {});
  expect_same_checkpoint(loaded, single, 3, tolerance_);

  // And the one-process checkpoint of step 2 loaded on 2 tensor ranks (each takes its part).
  const fs::path split = stopped_copy(single, "single_loaded_by_tp2", 2);
  train("single_loaded_by_tp2", 2, {kTensorParallel});
  expect_same_checkpoint(split, single, 3, tolerance_);
}

TEST_F(TensorParallelTrainingTest, TensorParallelWithGradientAccumulationMatchesOneProcess) {
  const std::string accumulate = "schedule.depth_first_micro_batches=4";
  const fs::path single = train("df4", 0, {accumulate});
  const fs::path parallel = train("tp2_df4", 2, {kTensorParallel, accumulate});
  expect_same_run(parallel, single);
}

TEST_F(TensorParallelTrainingTest, SequenceTensorParallelMatchesOneProcess) {
  const fs::path single = train("single", 0, {});
  const fs::path parallel = train("stp2", 2, {kTensorParallel, kSequenceTensorParallel});
  expect_same_run(parallel, single);
}

TEST_F(TensorParallelTrainingTest, SequenceTensorParallelWithLossInChunksMatchesOneProcess) {
  const std::string splits = "model.base_model.head.cross_entropy_splits=4";
  const fs::path single = train("ce4", 0, {splits});
  const fs::path parallel = train("stp2_ce4", 2, {kTensorParallel, kSequenceTensorParallel, splits});
  expect_same_run(parallel, single);
}

TEST_F(TensorParallelTrainingTest, DataAndSequenceTensorParallelMatchOneProcess) {
  const fs::path single = train("df2", 0, {"schedule.depth_first_micro_batches=2"});
  const fs::path parallel = train("dp2_stp2", 4, {kTensorParallel, kSequenceTensorParallel});
  expect_same_run(parallel, single);
}

TEST_F(TensorParallelTrainingTest, TiedEmbeddingsWithTensorParallelismMatchOneProcess) {
  const std::string tied = "model.base_model.tied_embedding_weight=true";
  const fs::path single = train("tied", 0, {tied});
  const fs::path parallel = train("tied_tp2", 2, {kTensorParallel, tied});
  expect_same_run(parallel, single);
}

// Multi-query attention (one head group): the ranks split the heads, each holds the whole key_value projection and the
// engine sums its gradient over them, as Fast-LLM does.
TEST_F(TensorParallelTrainingTest, MultiQueryAttentionMatchesOneProcess) {
  const std::string multi_query = "model.base_model.decoder.block.mixer.head_groups=1";
  const fs::path single = train("multi_query", 0, {multi_query});
  const fs::path parallel = train("multi_query_stp2", 2, {kTensorParallel, kSequenceTensorParallel, multi_query});
  expect_same_run(parallel, single);
}

// The vocabulary-parallel loss (the default with tensor parallelism) with a z-loss, a logits scale and soft-capping:
// the statistics summed over the vocabulary slices give the one-process losses and gradients.
TEST_F(TensorParallelTrainingTest, VocabularyParallelZLossAndSoftcapMatchOneProcess) {
  const std::vector<std::string> losses{
      "model.base_model.head.losses={cross_entropy: {type: label}, z_loss: {type: z_loss, weight: 0.1}}",
      "model.base_model.head.final_logit_softcap=2.0", "model.base_model.head.logits_scale_factor=0.7"};
  const fs::path single = train("z_loss", 0, losses);
  const fs::path parallel = train("z_loss_tp2", 2, with(losses, {kTensorParallel}));
  expect_same_run(parallel, single);
}

// With vocab_parallel false every tensor rank holds the whole vocabulary (embeddings, output weights, loss).
TEST_F(TensorParallelTrainingTest, WholeVocabularyOnEveryRankMatchesOneProcess) {
  const std::string whole = "model.base_model.embeddings.vocab_parallel=false";
  const fs::path single = train("single", 0, {whole});
  const fs::path parallel = train("stp2_whole_vocabulary", 2, {kTensorParallel, kSequenceTensorParallel, whole});
  expect_same_run(parallel, single);
}

// The Hugging Face export (`fast-llm convert` into the qwen2 format) of a tensor-parallel checkpoint is one process's:
// the model as Qwen2 has it (biases on the query, key and value projections only, head size hidden / heads, no window).
TEST_F(TensorParallelTrainingTest, HuggingFaceConversionOfTensorParallelCheckpointMatchesOneProcess) {
  const std::vector<std::string> qwen2{"model.base_model.decoder.block.mixer.window_size=null",
                                       "model.base_model.decoder.block.mixer.head_size=4",
                                       "model.base_model.decoder.block.mixer.add_linear_biases=false",
                                       "model.base_model.decoder.block.mixer.query_layer.bias.enabled=true",
                                       "model.base_model.decoder.block.mixer.key_layer.bias.enabled=true",
                                       "model.base_model.decoder.block.mlp.add_linear_biases=false",
                                       "model.base_model.head.normalization.type=rms_norm"};
  const fs::path single = train("qwen2", 0, qwen2);
  const fs::path parallel = train("qwen2_tp2", 2, with(qwen2, {kTensorParallel}));
  auto convert = [&](const fs::path& experiment) {
    const fs::path output = experiment.string() + "_hf";
    const testing::Outcome outcome = testing::run_fast_llm(
        {"convert", "gpt", "input.format=distributed", "input.path=" + (experiment / "checkpoint" / "3").string(),
         "output.format=qwen2", "output.path=" + output.string()},
        directory_);
    EXPECT_TRUE(outcome.exited && outcome.status == 0) << outcome.output;
    return output;
  };
  const fs::path single_hf = convert(single), parallel_hf = convert(parallel);
  expect_same_state(*engine::SafetensorsSet::open_huggingface(parallel_hf),
                    *engine::SafetensorsSet::open_huggingface(single_hf), tolerance_);
}

// Sequence-tensor parallelism splits each micro-batch's tokens evenly: a micro-batch that does not split is refused
// before anything runs, naming the field.
TEST_F(TensorParallelTrainingTest, RefusesMicroBatchesThatDoNotSplitOverTheSequence) {
  const testing::Outcome outcome = testing::run_fast_llm(
      {"train", "gpt", "--nproc-per-node", "2", "-c", (directory_ / "config.yaml").string(),
       "run.experiment_dir=" + (directory_ / "odd").string(), kTensorParallel, kSequenceTensorParallel,
       "data.micro_batch_size=15"},
      directory_);
  EXPECT_TRUE(outcome.exited && outcome.status != 0) << outcome.output;
  EXPECT_NE(outcome.output.find("data.micro_batch_size"), std::string::npos) << outcome.output;
}

}  // namespace
}  // namespace fast_llm
