// Data-parallel training, run as users run it (`fast-llm train gpt --nproc-per-node N`, layout_comparison.h): N
// processes give the losses, gradient norms and updated weights of one process that runs the N times as many
// micro-batches in sequence, under ZeRO 1, 2 and 3, with tied embeddings, MoE, reference models, policy-gradient losses
// and LoRA. Checkpoints resume bit for bit in the same layout and load into another number of processes.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "fast_llm/data/memmap.h"
#include "layout_comparison.h"

namespace fast_llm {
namespace {

namespace fs = std::filesystem;

class DataParallelTrainingTest : public testing::LayoutComparisonTest {};

TEST_F(DataParallelTrainingTest, TwoProcessesMatchOneWithTwoMicroBatchesAndResume) {
  // Both export the model of step 3 in the layout-free fast_llm format too (the two ranks' shards gathered).
  const std::vector<std::string> exported{"training.export.format=fast_llm", "training.export.interval=3",
                                          "training.export.optimizer_state=true"};
  std::vector<std::string> single_overrides = exported;
  single_overrides.push_back("schedule.depth_first_micro_batches=2");
  const fs::path single = train("df2", 0, single_overrides);
  const fs::path parallel = train("dp2", 2, exported);
  expect_same_run(parallel, single);
  expect_same_export(parallel, single, 3, tolerance_);
  // Each rank wrote its shard; the metadata lists both.
  EXPECT_TRUE(fs::exists(parallel / "checkpoint" / "3" / "rank_0.safetensors"));
  EXPECT_TRUE(fs::exists(parallel / "checkpoint" / "3" / "rank_1.safetensors"));
  EXPECT_TRUE(fs::exists(parallel / "checkpoint" / "3" / "ok"));

  // Stopped after step 2 and restarted in the same layout: bit for bit the uninterrupted run.
  const fs::path resumed = stopped_copy(parallel, "dp2_resumed", 2);
  train("dp2_resumed", 2, {});
  expect_same_checkpoint(resumed, parallel, 3, mode_.resume_tolerance);

  // The two-process checkpoint of step 2 loaded by one process (same global batch): the same step 3.
  const fs::path loaded = stopped_copy(parallel, "dp2_loaded_by_1", 2);
  train("dp2_loaded_by_1", 0, {"schedule.depth_first_micro_batches=2"});
  expect_same_checkpoint(loaded, single, 3, tolerance_);
}

// A mixture of experts: the router losses (each micro-batch adds its loss over the micro-batches of the whole step)
// and their gradients do not depend on the layout either.
TEST_F(DataParallelTrainingTest, MixtureOfExpertsTwoProcessesMatchOne) {
  const std::string moe =
      "model.base_model.decoder.block.mlp={type: moe, experts: 4, experts_per_token: 2, intermediate_size: 16, "
      "gated: true, add_linear_biases: false, auxiliary_loss_coefficient: 0.1, z_loss_coefficient: 0.01}";
  const fs::path single = train("moe_df2", 0, {moe, "schedule.depth_first_micro_batches=2"});
  const fs::path parallel = train("moe_dp2", 2, {moe});
  expect_same_run(parallel, single);
  auto router_losses = [](const fs::path& experiment) {
    return training_values(experiment, {"load_balancing_loss", "router_z_loss"});
  };
  const std::vector<double> expected = router_losses(single), actual = router_losses(parallel);
  ASSERT_EQ(actual.size(), 6u);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t index = 0; index < expected.size(); ++index) {
    EXPECT_GT(expected[index], 0.0) << index;
    EXPECT_NEAR(actual[index], expected[index], tolerance_ * expected[index]) << index;
  }
}

// A reference model (whole on every process) read by the distillation loss and by every block's activation
// distillation: two processes give the losses of one that runs both micro-batches, and the reference's logged losses
// match too.
TEST_F(DataParallelTrainingTest, ReferenceModelsTwoProcessesMatchOne) {
  std::vector<std::string> overrides = testing::kReferenceModelOverrides;
  overrides.push_back("training.checkpoint.interval=null");
  std::vector<std::string> single_overrides = overrides;
  single_overrides.push_back("schedule.depth_first_micro_batches=2");
  const fs::path single = train("reference_df2", 0, single_overrides);
  const fs::path parallel = train("reference_dp2", 2, overrides);
  expect_same_records(records(parallel), records(single), tolerance_);
  auto logged = [](const fs::path& experiment) {
    return training_values(experiment, {"kd", "activation_distillation_loss"});
  };
  const std::vector<double> expected = logged(single), actual = logged(parallel);
  ASSERT_EQ(actual.size(), 6u);
  ASSERT_EQ(actual.size(), expected.size());
  // Step 1: the reference starts as the model itself (same seed): both distances are 0, up to the rounding of the
  // two softmaxes' fp32 sums over the vocabulary (2.4e-6 measured on the H200 in the GPU mode).
  const double zero = mode_.overrides.empty() ? 1e-6 : 1e-5;
  EXPECT_NEAR(expected[0], 0.0, zero);
  EXPECT_NEAR(expected[1], 0.0, zero);
  EXPECT_GT(expected[4], 0.0);
  for (size_t index = 0; index < expected.size(); ++index)
    EXPECT_NEAR(actual[index], expected[index], tolerance_ * expected[index] + 1e-7) << index;
}

// ZeRO-2 and 3 with one stage per layer (four stages, two shared buffers: the buffers really are shared).
TEST_F(DataParallelTrainingTest, ZeroStagesTwoAndThreeMatchOneProcess) {
  const std::string exported = "training.export={format: fast_llm, interval: 3}";
  const fs::path single = train("df2", 0, {"schedule.depth_first_micro_batches=2", exported});
  for (int zero : {2, 3}) {
    const std::string name = "dp2_z" + std::to_string(zero);
    const fs::path parallel = train(name, 2, {"model.multi_stage.layers_per_stage=1",
                                              "model.multi_stage.zero_stage=" + std::to_string(zero), exported});
    EXPECT_NE(output_.find("gradients in 2 shared buffers"), std::string::npos) << output_;
    EXPECT_EQ(output_.find("weights in 2 shared buffers") != std::string::npos, zero == 3) << output_;
    expect_same_run(parallel, single);
    expect_same_export(parallel, single, 3, tolerance_);
  }
  // Two micro-batches per rank: ZeRO-2 and 3 add each depth-first group's reduced gradients up in the shard.
  const fs::path single_df4 = train("df4", 0, {"schedule.depth_first_micro_batches=4"});
  const fs::path accumulated = train("dp2_z3_df2", 2, {"model.multi_stage.layers_per_stage=1",
                                                        "model.multi_stage.zero_stage=3",
                                                        "schedule.depth_first_micro_batches=2"});
  expect_same_run(accumulated, single_df4);

  // The ZeRO-3 checkpoint of step 2: resumed bit for bit in its own layout, continued by one process and by four.
  const fs::path z3 = directory_ / "dp2_z3";
  const fs::path resumed = stopped_copy(z3, "dp2_z3_resumed", 2);
  train("dp2_z3_resumed", 2, {"model.multi_stage.layers_per_stage=1", "model.multi_stage.zero_stage=3"});
  expect_same_checkpoint(resumed, z3, 3, mode_.resume_tolerance);
  const fs::path by_one = stopped_copy(z3, "dp2_z3_by_1", 2);
  train("dp2_z3_by_1", 0, {"schedule.depth_first_micro_batches=2"});
  expect_same_checkpoint(by_one, single, 3, tolerance_);
  // Four processes make a batch of four: compared with one process that continues the same checkpoint with four
  // micro-batches.
  const fs::path by_four = stopped_copy(z3, "dp2_z3_by_4", 2);
  train("dp2_z3_by_4", 4, {"model.multi_stage.zero_stage=3", "model.multi_stage.layers_per_stage=1"});
  const fs::path by_one_df4 = stopped_copy(z3, "dp2_z3_by_1_df4", 2);
  train("dp2_z3_by_1_df4", 0, {"schedule.depth_first_micro_batches=4"});
  expect_same_checkpoint(by_four, by_one_df4, 3, tolerance_);
}

// Tied embeddings: the head (last stage) reads and adds gradients to the embeddings' matrix (first stage), which keeps
// its own full buffers under ZeRO-2 and 3 while the other stages share theirs.
TEST_F(DataParallelTrainingTest, TiedEmbeddingsWithZeroTwoAndThree) {
  const std::string tied = "model.base_model.tied_embedding_weight=true";
  const fs::path single = train("df2_tied", 0, {tied, "schedule.depth_first_micro_batches=2"});
  for (int zero : {2, 3}) {
    const std::string name = "dp2_z" + std::to_string(zero) + "_tied";
    const fs::path parallel = train(name, 2, {tied, "model.multi_stage.layers_per_stage=1",
                                              "model.multi_stage.zero_stage=" + std::to_string(zero)});
    expect_same_run(parallel, single);
  }
}

// The policy-gradient losses on a rollout file (token data): GRPO's per-label and GSPO's per-document normalisation
// use the step's label and document counts, summed over the ranks, and the advantage extremes are reduced with max /
// min, so two processes give the one-process run's losses, metrics and weights. Beside a label loss, so the head total
// stays positive (relative tolerances).
TEST_F(DataParallelTrainingTest, PolicyGradientLossesTwoProcessesMatchOne) {
  {
    data::MemmapWriter writer(directory_ / "rollouts.fast_llm_dataset", {.token_data = true});
    for (int document = 0; document < 40; ++document) {
      data::Document rollout;
      const int size = 5 + (document * 7) % 9;
      for (int token = 0; token < size; ++token) {
        rollout.tokens.push_back((document * 13 + token * 5) % 64);
        // Advantages in [-0.5, 0.55], of each document its own (so each micro-batch has its own extremes, and the
        // step's are one rank's); old log-probs around log(1 / 64) so that ratios clip on both sides.
        rollout.advantages.push_back(float((document % 5) - 2) * 0.25f + 0.001f * float(document));
        rollout.old_log_probabilities.push_back(-4.16f + 0.3f * float((token * 3 + document) % 7 - 3));
      }
      writer.add_document(rollout);
    }
    writer.finish();
  }
  const std::string dataset =
      "data.datasets={training: {type: memmap, path: " + (directory_ / "rollouts.fast_llm_dataset").string() + "}}";
  for (const char* type : {"grpo", "gspo"}) {
    const std::string losses = fmt::format("model.base_model.head.losses={{ce: {{type: label}}, policy: {{type: {}, "
                                           "weight: 2.0}}}}",
                                           type);
    const fs::path single = train(fmt::format("{}_df2", type), 0,
                                  {dataset, losses, "data.truncate_documents=false",
                                   "schedule.depth_first_micro_batches=2"});
    const fs::path parallel = train(fmt::format("{}_dp2", type), 2, {dataset, losses, "data.truncate_documents=false"});
    expect_same_run(parallel, single);
    auto metrics = [](const fs::path& experiment) {
      return training_values(experiment, {"policy", "policy_new_logprobs", "policy_ratio_new_old", "policy_num_tokens",
                                          "policy_max_advantage", "policy_min_advantage"});
    };
    const std::vector<double> expected = metrics(single), actual = metrics(parallel);
    ASSERT_EQ(actual.size(), 18u) << type;
    for (size_t step = 0; step < 3; ++step) {
      // Extremes of the step's labels: finite, ordered, and in the advantages' range.
      const double largest = expected[step * 6 + 4], smallest = expected[step * 6 + 5];
      EXPECT_LE(smallest, largest) << type << " step " << step;
      EXPECT_GE(smallest, -0.5) << type << " step " << step;
      EXPECT_LE(largest, 0.55) << type << " step " << step;
    }
    ASSERT_EQ(actual.size(), expected.size()) << type;
    for (size_t index = 0; index < expected.size(); ++index)
      EXPECT_NEAR(actual[index], expected[index], tolerance_ * (1 + std::abs(expected[index]))) << type << " " << index;
  }
}

// LoRA in bf16 under ZeRO-1 (each rank's bf16 shard of the frozen weights is its part of the full buffer, gathered in
// place) and ZeRO-3 (shared full buffers: the shard is a buffer of its own, gathered at each use): frozen weights kept
// only in the compute dtype give the losses of the run that keeps their fp32 copy, bit for bit (the compute weights are
// the same values), and their checkpoint resumes bit for bit in its own layout and loads into one process.
TEST_F(DataParallelTrainingTest, LoraWithFrozenWeightsInTheComputeDtype) {
  for (int zero : {1, 3}) {
    const std::string name = "lora_z" + std::to_string(zero);
    const std::vector<std::string> lora{"model.base_model.peft={type: lora, rank: 4, alpha: 8}",
                                        "model.distributed.compute_dtype=bf16", "model.multi_stage.layers_per_stage=1",
                                        "model.multi_stage.zero_stage=" + std::to_string(zero)};
    std::vector<std::string> compute_only = lora;
    compute_only.push_back("model.multi_stage.store_frozen_weights_in_optimization_precision=false");
    const fs::path with_master = train(name + "_master", 2, lora);
    const fs::path parallel = train(name + "_compute_only", 2, compute_only);
    EXPECT_NE(output_.find("trainable"), std::string::npos) << output_;
    EXPECT_EQ(output_.find("weights in 2 shared buffers") != std::string::npos, zero == 3) << output_;
    ASSERT_EQ(records(parallel).size(), 3u);
    // Exact on the CPU (the GPU's attention backward adds with atomics: its resume tolerance).
    expect_same_records(records(parallel), records(with_master), mode_.resume_tolerance);
    const fs::path resumed = stopped_copy(parallel, name + "_resumed", 2);
    train(name + "_resumed", 2, compute_only);
    expect_same_checkpoint(resumed, parallel, 3, mode_.resume_tolerance);
    const fs::path by_one = stopped_copy(parallel, name + "_by_1", 2);
    std::vector<std::string> one = compute_only;
    one.push_back("schedule.depth_first_micro_batches=2");
    train(name + "_by_1", 0, one);
    EXPECT_EQ(records(by_one).size(), 1u);
  }
}

TEST_F(DataParallelTrainingTest, FourProcessesWithTwoMicroBatchesEachMatchOneWithEight) {
  const fs::path single = train("df8", 0, {"schedule.depth_first_micro_batches=8"});
  const fs::path parallel = train("dp4_df2", 4, {"schedule.depth_first_micro_batches=2"});
  expect_same_run(parallel, single);
  // Four ranks' checkpoint of step 2 continued by two processes with four micro-batches each.
  const fs::path loaded = stopped_copy(parallel, "dp4_loaded_by_2", 2);
  train("dp4_loaded_by_2", 2, {"schedule.depth_first_micro_batches=4"});
  expect_same_checkpoint(loaded, single, 3, tolerance_);
}

}  // namespace
}  // namespace fast_llm
