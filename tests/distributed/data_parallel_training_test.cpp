// Data-parallel training, run as users run it: `fast-llm train gpt --nproc-per-node N` on CPU processes that talk
// through Gloo over loopback. Fast-LLM's principle is the test: the same global batch gives the same losses, gradient
// norms and updated weights (master weights and Adam state) as one process that runs the micro-batches in sequence
// (fp32, tight tolerance: the sums are the same numbers added in another order). Checkpoints resume bit for bit in the
// same layout and load into another number of processes.
//
// With FAST_LLM_TEST_CUDA=1 (the GPU machine, tools/device_check.sh) the same layouts run on one GPU shared by all
// the processes, through the Gloo engine's host staging (NCCL refuses two ranks on one GPU), in bf16 with fp32 master
// weights, against the one-process GPU run: tolerances of bf16 sums taken in another order, and a lower learning rate
// so that Adam's first steps, which move a weight by about the learning rate whatever the size of its gradient, cannot
// turn those differences into large ones. The attention backward adds its query gradients with atomics, so a resumed
// GPU run matches to that tolerance rather than bit for bit.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../cli/run_fast_llm.h"
#include "distributed_test_util.h"
#include "fast_llm/engine/checkpoint/distributed.h"
#include "fast_llm/engine/checkpoint/fast_llm_format.h"
#include "fast_llm/data/memmap.h"
#include "fast_llm/engine/checkpoint/metadata.h"

namespace fast_llm {
namespace {

namespace fs = std::filesystem;
using testing::Outcome;

// A small model that trains in about a second per process; every run gets 16-token micro-batches of the same
// random dataset, so a layout only changes which process reads which sample. The attention has no biases, as Llama:
// the key bias has a gradient of zero up to rounding (softmax ignores what it adds), and Adam's first steps turn that
// rounding noise into updates of the order of the learning rate, different in every summation order.
constexpr const char* kConfig = R"(
training: {train_iters: 3, logs: {interval: 1}, checkpoint: {interval: 1, keep: 10}}
data:
  datasets: {training: {type: random}}
  micro_batch_size: 16
optimizer: {learning_rate: {base: 1.0e-2}, gradient_norm_clipping: 0.5}
model:
  base_model:
    embeddings: {vocab_size: 64}
    decoder:
      block:
        mixer: {type: attention, heads: 2, head_groups: 1, head_size: 8, add_linear_biases: false}
        mlp: {intermediate_size: 32, gated: true}
        normalization: {type: rms_norm}
      num_blocks: 2
    hidden_size: 16
  multi_stage: {layers_per_stage: 2}
  distributed: {compute_dtype: fp32, use_cuda: false, timeout: 20}
)";

// What differs between the CPU run (fp32, exact resume) and the GPU run (bf16, see above).
struct Mode {
  std::vector<std::string> overrides;
  double tolerance = 2e-5;         // relative, on losses, gradient norms and (with 1 + |value|) weights
  double resume_tolerance = 0.0;  // same layout, resumed against uninterrupted
};

Mode test_mode() {
  const char* cuda = std::getenv("FAST_LLM_TEST_CUDA");
  if (cuda == nullptr || std::string(cuda) != "1") return {};
  return {.overrides = {"model.distributed.use_cuda=true", "model.distributed.compute_dtype=bf16",
                        "model.distributed.backend=gloo", "optimizer.learning_rate.base=1.0e-4"},
          .tolerance = 2e-3,
          .resume_tolerance = 2e-3};
}

struct TrainingRecord {
  double loss = 0, grad_norm = 0;
};

class DataParallelTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = testing::fresh_test_folder("fast_llm_dp_test");
    std::ofstream(directory_ / "config.yaml") << kConfig;
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(directory_);
  }

  // Trains in `<directory>/<name>` with `processes` processes (0: one process, no launcher) and `overrides`; expects
  // success.
  fs::path train(const std::string& name, int processes, std::vector<std::string> overrides) {
    std::vector<std::string> arguments{"train", "gpt", "-c", (directory_ / "config.yaml").string(),
                                       "run.experiment_dir=" + (directory_ / name).string()};
    if (processes > 0) arguments.insert(arguments.begin() + 2, {"--nproc-per-node", std::to_string(processes)});
    arguments.insert(arguments.end(), mode_.overrides.begin(), mode_.overrides.end());
    arguments.insert(arguments.end(), overrides.begin(), overrides.end());
    const Outcome outcome = testing::run_fast_llm(arguments, directory_, std::chrono::seconds(300), std::nullopt,
                                                  {{"OMP_NUM_THREADS", "1"}});
    EXPECT_TRUE(outcome.exited && outcome.status == 0) << name << ":\n" << outcome.output;
    output_ = outcome.output;
    return directory_ / name;
  }

  // The training records of the experiment's first run, by step.
  static std::vector<TrainingRecord> records(const fs::path& experiment) {
    std::vector<TrainingRecord> result;
    std::ifstream stream(experiment / "runs" / "0" / "metrics.jsonl");
    for (std::string line; std::getline(stream, line);) {
      const nlohmann::json record = nlohmann::json::parse(line);
      if (record.value("phase", "") != "training") continue;
      result.push_back({.loss = record.at("lm_head_loss").get<double>(),
                        .grad_norm = record.at("grad_norm").get<double>()});
    }
    return result;
  }

  // Every tensor of checkpoint `step` of the two experiments (master weights, Adam moments), compared.
  static void expect_same_checkpoint(const fs::path& actual, const fs::path& expected, int step, double tolerance) {
    const fs::path actual_folder = actual / "checkpoint" / std::to_string(step);
    const fs::path expected_folder = expected / "checkpoint" / std::to_string(step);
    expect_same_state(*engine::distributed_checkpoint_source(actual_folder,
                                                             engine::read_checkpoint_metadata(actual_folder)),
                      *engine::distributed_checkpoint_source(expected_folder,
                                                             engine::read_checkpoint_metadata(expected_folder)),
                      tolerance);
  }

  // The `fast_llm` exports of step `step` of the two experiments, compared.
  static void expect_same_export(const fs::path& actual, const fs::path& expected, int step, double tolerance) {
    const fs::path folder = fs::path("export") / "fast_llm" / std::to_string(step);
    expect_same_state(*engine::open_fast_llm_checkpoint(actual / folder).state,
                      *engine::open_fast_llm_checkpoint(expected / folder).state, tolerance);
  }

  static void expect_same_state(const engine::TensorSource& actual_state, const engine::TensorSource& expected_state,
                                double tolerance) {
    // The same tensors, in an order that follows each run's stage layout.
    std::vector<std::string> names = expected_state.names(), actual_names = actual_state.names();
    std::sort(names.begin(), names.end());
    std::sort(actual_names.begin(), actual_names.end());
    ASSERT_EQ(actual_names, names);
    for (const std::string& name : names) {
      const Tensor a = actual_state.load(name), b = expected_state.load(name);
      ASSERT_EQ(a.numel(), b.numel()) << name;
      const float* x = a.data_as<float>();
      const float* y = b.data_as<float>();
      for (int64_t i = 0; i < a.numel(); ++i) {
        if (tolerance == 0) {
          ASSERT_EQ(x[i], y[i]) << name << "[" << i << "]";
        } else {
          ASSERT_NEAR(x[i], y[i], tolerance * (1 + std::abs(y[i]))) << name << "[" << i << "]";
        }
      }
    }
  }

  static void expect_same_records(const std::vector<TrainingRecord>& actual,
                                  const std::vector<TrainingRecord>& expected, double tolerance) {
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t step = 0; step < expected.size(); ++step) {
      EXPECT_NEAR(actual[step].loss, expected[step].loss, tolerance * expected[step].loss) << "step " << step + 1;
      EXPECT_NEAR(actual[step].grad_norm, expected[step].grad_norm, tolerance * expected[step].grad_norm)
          << "step " << step + 1;
    }
  }

  // A copy of `experiment` holding only its checkpoint of `step` (as if the run had stopped there).
  fs::path stopped_copy(const fs::path& experiment, const std::string& name, int step) {
    const fs::path copy = directory_ / name;
    fs::create_directories(copy / "checkpoint");
    fs::copy(experiment / "checkpoint" / std::to_string(step), copy / "checkpoint" / std::to_string(step),
             fs::copy_options::recursive);
    return copy;
  }

  fs::path directory_;
  std::string output_;  // of the last run
  const Mode mode_ = test_mode();
  const double kTolerance = mode_.tolerance;
};

TEST_F(DataParallelTrainingTest, TwoProcessesMatchOneWithTwoMicroBatchesAndResume) {
  // Both export the model of step 3 in the layout-free fast_llm format too (the two ranks' shards gathered).
  const std::vector<std::string> exported{"training.export.format=fast_llm", "training.export.interval=3",
                                          "training.export.optimizer_state=true"};
  std::vector<std::string> single_overrides = exported;
  single_overrides.push_back("schedule.depth_first_micro_batches=2");
  const fs::path single = train("df2", 0, single_overrides);
  const fs::path parallel = train("dp2", 2, exported);
  expect_same_records(records(parallel), records(single), kTolerance);
  expect_same_checkpoint(parallel, single, 3, kTolerance);
  expect_same_export(parallel, single, 3, kTolerance);
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
  expect_same_checkpoint(loaded, single, 3, kTolerance);
}

// A mixture of experts: the router losses (each micro-batch adds its loss over the micro-batches of the whole step)
// and their gradients do not depend on the layout either.
TEST_F(DataParallelTrainingTest, MixtureOfExpertsTwoProcessesMatchOne) {
  const std::string moe =
      "model.base_model.decoder.block.mlp={type: moe, experts: 4, experts_per_token: 2, intermediate_size: 16, "
      "gated: true, add_linear_biases: false, auxiliary_loss_coefficient: 0.1, z_loss_coefficient: 0.01}";
  const fs::path single = train("moe_df2", 0, {moe, "schedule.depth_first_micro_batches=2"});
  const fs::path parallel = train("moe_dp2", 2, {moe});
  expect_same_records(records(parallel), records(single), kTolerance);
  expect_same_checkpoint(parallel, single, 3, kTolerance);
  auto router_losses = [](const fs::path& experiment) {
    std::vector<double> values;
    std::ifstream stream(experiment / "runs" / "0" / "metrics.jsonl");
    for (std::string line; std::getline(stream, line);) {
      const nlohmann::json record = nlohmann::json::parse(line);
      if (record.value("phase", "") != "training") continue;
      values.push_back(record.at("load_balancing_loss").get<double>());
      values.push_back(record.at("router_z_loss").get<double>());
    }
    return values;
  };
  const std::vector<double> expected = router_losses(single), actual = router_losses(parallel);
  ASSERT_EQ(actual.size(), 6u);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t index = 0; index < expected.size(); ++index) {
    EXPECT_GT(expected[index], 0.0) << index;
    EXPECT_NEAR(actual[index], expected[index], kTolerance * expected[index]) << index;
  }
}

// A reference model (whole on every process) read by the distillation loss and by every block's activation
// distillation: two processes give the losses of one that runs both micro-batches, and the reference's logged losses
// match too.
TEST_F(DataParallelTrainingTest, ReferenceModelsTwoProcessesMatchOne) {
  const std::vector<std::string> overrides = {
      "model.base_model.head.losses={ce: {type: label, weight: 0.5}, kd: {type: distillation, reference_model: "
      "teacher, loss_type: reverse_kl}}",
      "model.base_model.decoder.block.distillation_model=teacher",
      "reference_models={teacher: {model: {base_model: {embeddings: {vocab_size: 64}, decoder: {block: {mixer: {type: "
      "attention, heads: 2, head_groups: 1, head_size: 8, add_linear_biases: false}, mlp: {intermediate_size: 32, "
      "gated: true}, normalization: {type: rms_norm}}, num_blocks: 2}, hidden_size: 16}}}}",
      "training.checkpoint.interval=null"};
  std::vector<std::string> single_overrides = overrides;
  single_overrides.push_back("schedule.depth_first_micro_batches=2");
  const fs::path single = train("reference_df2", 0, single_overrides);
  const fs::path parallel = train("reference_dp2", 2, overrides);
  expect_same_records(records(parallel), records(single), kTolerance);
  auto logged = [](const fs::path& experiment) {
    std::vector<double> values;
    std::ifstream stream(experiment / "runs" / "0" / "metrics.jsonl");
    for (std::string line; std::getline(stream, line);) {
      const nlohmann::json record = nlohmann::json::parse(line);
      if (record.value("phase", "") != "training") continue;
      values.push_back(record.at("kd").get<double>());
      values.push_back(record.at("activation_distillation_loss").get<double>());
    }
    return values;
  };
  const std::vector<double> expected = logged(single), actual = logged(parallel);
  ASSERT_EQ(actual.size(), 6u);
  ASSERT_EQ(actual.size(), expected.size());
  // Step 1: the reference starts as the model itself (same seed): both distances are 0.
  EXPECT_NEAR(expected[0], 0.0, 1e-6);
  EXPECT_NEAR(expected[1], 0.0, 1e-6);
  EXPECT_GT(expected[4], 0.0);
  for (size_t index = 0; index < expected.size(); ++index)
    EXPECT_NEAR(actual[index], expected[index], kTolerance * expected[index] + 1e-7) << index;
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
    expect_same_records(records(parallel), records(single), kTolerance);
    expect_same_checkpoint(parallel, single, 3, kTolerance);
    expect_same_export(parallel, single, 3, kTolerance);
  }
  // Two micro-batches per rank: ZeRO-2 and 3 add each depth-first group's reduced gradients up in the shard.
  const fs::path single_df4 = train("df4", 0, {"schedule.depth_first_micro_batches=4"});
  const fs::path accumulated = train("dp2_z3_df2", 2, {"model.multi_stage.layers_per_stage=1",
                                                        "model.multi_stage.zero_stage=3",
                                                        "schedule.depth_first_micro_batches=2"});
  expect_same_records(records(accumulated), records(single_df4), kTolerance);
  expect_same_checkpoint(accumulated, single_df4, 3, kTolerance);

  // The ZeRO-3 checkpoint of step 2: resumed bit for bit in its own layout, continued by one process and by four.
  const fs::path z3 = directory_ / "dp2_z3";
  const fs::path resumed = stopped_copy(z3, "dp2_z3_resumed", 2);
  train("dp2_z3_resumed", 2, {"model.multi_stage.layers_per_stage=1", "model.multi_stage.zero_stage=3"});
  expect_same_checkpoint(resumed, z3, 3, mode_.resume_tolerance);
  const fs::path by_one = stopped_copy(z3, "dp2_z3_by_1", 2);
  train("dp2_z3_by_1", 0, {"schedule.depth_first_micro_batches=2"});
  expect_same_checkpoint(by_one, single, 3, kTolerance);
  // Four processes make a batch of four: compared with one process that continues the same checkpoint with four
  // micro-batches.
  const fs::path by_four = stopped_copy(z3, "dp2_z3_by_4", 2);
  train("dp2_z3_by_4", 4, {"model.multi_stage.zero_stage=3", "model.multi_stage.layers_per_stage=1"});
  const fs::path by_one_df4 = stopped_copy(z3, "dp2_z3_by_1_df4", 2);
  train("dp2_z3_by_1_df4", 0, {"schedule.depth_first_micro_batches=4"});
  expect_same_checkpoint(by_four, by_one_df4, 3, kTolerance);
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
    expect_same_records(records(parallel), records(single), kTolerance);
    expect_same_checkpoint(parallel, single, 3, kTolerance);
  }
}

// The policy-gradient losses on a rollout file (token data): GRPO's per-label and GSPO's per-document normalisation
// use the step's label and document counts, summed over the ranks, so two processes give the one-process run's
// losses, metrics and weights. Beside a label loss, so the head total stays positive (relative tolerances).
TEST_F(DataParallelTrainingTest, PolicyGradientLossesTwoProcessesMatchOne) {
  {
    data::MemmapWriter writer(directory_ / "rollouts.fast_llm_dataset", {.token_data = true});
    for (int document = 0; document < 40; ++document) {
      data::Document rollout;
      const int size = 5 + (document * 7) % 9;
      for (int token = 0; token < size; ++token) {
        rollout.tokens.push_back((document * 13 + token * 5) % 64);
        // Advantages in [-0.5, 0.5] per document; old log-probs around log(1 / 64) so that ratios clip on both sides.
        rollout.advantages.push_back(float((document % 5) - 2) * 0.25f);
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
    expect_same_records(records(parallel), records(single), kTolerance);
    expect_same_checkpoint(parallel, single, 3, kTolerance);
    auto metrics = [](const fs::path& experiment) {
      std::vector<double> values;
      std::ifstream stream(experiment / "runs" / "0" / "metrics.jsonl");
      for (std::string line; std::getline(stream, line);) {
        const nlohmann::json record = nlohmann::json::parse(line);
        if (record.value("phase", "") != "training") continue;
        for (const char* name : {"policy", "policy_new_logprobs", "policy_ratio_new_old", "policy_num_tokens"})
          values.push_back(record.at(name).get<double>());
      }
      return values;
    };
    const std::vector<double> expected = metrics(single), actual = metrics(parallel);
    ASSERT_EQ(actual.size(), 12u) << type;
    ASSERT_EQ(actual.size(), expected.size()) << type;
    for (size_t index = 0; index < expected.size(); ++index)
      EXPECT_NEAR(actual[index], expected[index], kTolerance * (1 + std::abs(expected[index]))) << type << " " << index;
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
  expect_same_records(records(parallel), records(single), kTolerance);
  expect_same_checkpoint(parallel, single, 3, kTolerance);
  // Four ranks' checkpoint of step 2 continued by two processes with four micro-batches each.
  const fs::path loaded = stopped_copy(parallel, "dp4_loaded_by_2", 2);
  train("dp4_loaded_by_2", 2, {"schedule.depth_first_micro_batches=4"});
  expect_same_checkpoint(loaded, single, 3, kTolerance);
}

}  // namespace
}  // namespace fast_llm
