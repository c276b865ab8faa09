// The harness of the distributed layout tests: train the same small model with `fast-llm train gpt` as one process
// and as several (`--nproc-per-node N`: CPU processes talking through Gloo over loopback), then compare what the runs
// logged and wrote. Fast-LLM's principle is the test: the same global batch gives the same losses, gradient norms and
// updated weights (master weights and Adam state, gathered from any layout by the checkpoint reader) as one process
// that runs the micro-batches in sequence (fp32, tight tolerance: the sums are the same numbers added in another order).
//
// With FAST_LLM_TEST_CUDA=1 (the GPU machine, tools/device_check.sh) the same layouts run on one GPU shared by all
// the processes, through the Gloo engine's host staging (NCCL refuses two ranks on one GPU), in bf16 with fp32 master
// weights, against the one-process GPU run: tolerances of bf16 sums taken in another order, and a lower learning rate
// so that Adam's first steps, which move a weight by about the learning rate whatever the size of its gradient, cannot
// turn those differences into large ones. The attention backward adds its query gradients with atomics, so a resumed
// GPU run matches to that tolerance rather than bit for bit.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../cli/run_fast_llm.h"
#include "distributed_test_util.h"
#include "fast_llm/config/config.h"
#include "fast_llm/engine/checkpoint/distributed.h"
#include "fast_llm/engine/checkpoint/fast_llm_format.h"
#include "fast_llm/engine/checkpoint/metadata.h"

namespace fast_llm::testing {

namespace fs = std::filesystem;

// A small model that trains in about a second per process; every run gets 16-token micro-batches of the same
// random dataset, so a layout only changes which process reads which sample. The attention has no biases, as Llama:
// the key bias has a gradient of zero up to rounding (softmax ignores what it adds), and Adam's first steps turn that
// rounding noise into updates of the order of the learning rate, different in every summation order. For the same
// reason Adam's epsilon is 1e-5 rather than 1e-8: a weight whose gradient is ~1e-8 by cancellation moves by
// learning rate x noise / epsilon per step, which at 1e-8 took single weights 2-3e-5 apart between layouts (beyond the
// 2e-5 tolerance) once the summation order changed with the machine's BLAS kernels; typical gradients here are ~1e-3.
inline constexpr const char* kConfig = R"(
training: {train_iters: 3, logs: {interval: 1}, checkpoint: {interval: 1, keep: 10}}
data:
  datasets: {training: {type: random}}
  micro_batch_size: 16
optimizer: {learning_rate: {base: 1.0e-2}, gradient_norm_clipping: 0.5, epsilon: 1.0e-5}
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

// A Qwen2-style model (grouped-query attention, rotary, biases on the query and key projections, a sliding window) of
// six blocks, one layer per stage: the pipeline, tensor and sequence suites' model (config_changes() gives a suite's
// variant of it).
inline constexpr const char* kQwen2Config = R"(
training: {train_iters: 3, logs: {interval: 1}, checkpoint: {interval: 1, keep: 10}}
data:
  datasets: {training: {type: random}}
  micro_batch_size: 16
optimizer: {learning_rate: {base: 1.0e-2}, gradient_norm_clipping: 0.5, epsilon: 1.0e-5}
model:
  base_model:
    embeddings: {vocab_size: 64}
    decoder:
      block:
        mixer:
          type: attention
          heads: 4
          head_groups: 2
          head_size: 4
          add_linear_biases: false
          query_layer: {bias: {enabled: true}}
          key_layer: {bias: {enabled: true}}
          rotary: {type: default, theta: 10000.0}
          window_size: 6
        mlp: {intermediate_size: 32, gated: true, add_linear_biases: false}
        normalization: {type: rms_norm}
      num_blocks: 6
    head: {normalization: {type: rms_norm}}
    hidden_size: 16
  multi_stage: {layers_per_stage: 1}
  distributed: {compute_dtype: fp32, use_cuda: false, timeout: 20}
)";

// Overrides that give a run a reference model `teacher` (the small model's shape, its own weights from the same
// seed) read by a reverse-KL distillation loss beside a label loss of weight 0.5, and by every block's activation
// distillation.
inline const std::vector<std::string> kReferenceModelOverrides = {
    "model.base_model.head.losses={ce: {type: label, weight: 0.5}, kd: {type: distillation, reference_model: "
    "teacher, loss_type: reverse_kl}}",
    "model.base_model.decoder.block.distillation_model=teacher",
    "reference_models={teacher: {model: {base_model: {embeddings: {vocab_size: 64}, decoder: {block: {mixer: {type: "
    "attention, heads: 2, head_groups: 1, head_size: 8, add_linear_biases: false}, mlp: {intermediate_size: 32, "
    "gated: true}, normalization: {type: rms_norm}}, num_blocks: 2}, hidden_size: 16}}}}"};

// What differs between the CPU run (fp32, exact resume) and the GPU run (bf16, see above).
struct Mode {
  std::vector<std::string> overrides;
  // Whether each rank's peak allocation must stay within its start-up memory estimate (the CPU: every tensor goes
  // through the allocator the estimate models; on a GPU the kernels' scratch buffers come on top).
  bool within_estimate = true;
  double tolerance = 2e-5;         // relative, on losses, gradient norms and (with 1 + |value|) weights
  double resume_tolerance = 0.0;  // same layout, resumed against uninterrupted
  // Layouts that split a matmul's sum over tensor ranks: in bf16 each rank's partial sum is rounded before the
  // all-reduce (one process rounds the whole sum once), and the sequence-data layouts run the attention's reference
  // kernel where one process runs the tiled one. Measured on the H200 (2026-12-03): 0.25-0.35% on gradient norms for
  // tp2/stp2 (the CPU in bf16 gives the same), 0.9% for sdp2_stp2; in fp32 the same GPU runs agree to 1e-4. A missing
  // reduction or a wrong scale moves them by tens of percent.
  double tensor_split_tolerance = 2e-5;
};

// FAST_LLM_TEST_COMPUTE_DTYPE=fp32 runs the GPU mode in fp32 instead: the GPU path's arithmetic checked without bf16
// rounding, to the tolerance of fp32 sums in another order (the attention backward's atomics included).
// FAST_LLM_TEST_BACKEND=nccl (machines with a GPU per rank: rank r runs on GPU r modulo the GPUs) replaces the Gloo
// staging by NCCL, the issue-24 matrix over NCCL.
inline Mode test_mode() {
  const char* cuda = std::getenv("FAST_LLM_TEST_CUDA");
  if (cuda == nullptr || std::string(cuda) != "1") return {};
  const char* dtype = std::getenv("FAST_LLM_TEST_COMPUTE_DTYPE");
  const bool fp32 = dtype != nullptr && std::string(dtype) == "fp32";
  const double tolerance = fp32 ? 1e-4 : 2e-3;
  const double tensor_split_tolerance = fp32 ? 1e-4 : 1.5e-2;
  const char* backend = std::getenv("FAST_LLM_TEST_BACKEND");
  const std::string backend_name = backend != nullptr && std::string(backend) == "nccl" ? "nccl" : "gloo";
  return {.overrides = {"model.distributed.use_cuda=true",
                        fp32 ? "model.distributed.compute_dtype=fp32" : "model.distributed.compute_dtype=bf16",
                        "model.distributed.backend=" + backend_name, "optimizer.learning_rate.base=1.0e-4"},
          .within_estimate = false,
          .tolerance = tolerance,
          .resume_tolerance = tolerance,
          .tensor_split_tolerance = tensor_split_tolerance};
}

struct TrainingRecord {
  double loss = 0, grad_norm = 0;
};

class LayoutComparisonTest : public ::testing::Test {
 protected:
  // The config every run of the fixture starts from (the small model above unless a test suite needs another).
  virtual const char* config() const { return kConfig; }
  // Changes to config() (`a.b=value`, as on the command line) written into the config file: a suite's variant of a
  // shared model.
  virtual std::vector<std::string> config_changes() const { return {}; }

  void SetUp() override {
    directory_ = testing::fresh_test_folder("fast_llm_layout_test");
    YAML::Node tree = YAML::Load(config());
    for (const std::string& change : config_changes()) config::apply_override(tree, change);
    std::ofstream(directory_ / "config.yaml") << tree;
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
    // The memory check's estimate of each rank (its layout's share) is an upper bound of what the rank allocates:
    // the trainer warns on a rank that allocated more.
    if (mode_.within_estimate) {
      EXPECT_EQ(outcome.output.find("the memory check estimated at start-up"), std::string::npos)
          << name << ": a rank allocated more than its memory estimate:\n" << outcome.output;
    }
    output_ = outcome.output;
    return directory_ / name;
  }

  // The values `names` of each record of the experiment's first run whose `key` is `value` (phase: training, dataset:
  // validation), record after record and, within a record, in the order of `names`.
  static std::vector<double> logged_values(const fs::path& experiment, const std::string& key,
                                           const std::string& value, const std::vector<std::string>& names) {
    std::vector<double> values;
    std::ifstream stream(experiment / "runs" / "0" / "metrics.jsonl");
    for (std::string line; std::getline(stream, line);) {
      const nlohmann::json record = nlohmann::json::parse(line);
      if (record.value(key, "") != value) continue;
      for (const std::string& name : names) values.push_back(record.at(name).get<double>());
    }
    return values;
  }

  // The training values `names` of each step, in order (logged_values).
  static std::vector<double> training_values(const fs::path& experiment, const std::vector<std::string>& names) {
    return logged_values(experiment, "phase", "training", names);
  }

  // The validation losses the experiment logged, in order.
  static std::vector<double> validation_losses(const fs::path& experiment) {
    return logged_values(experiment, "dataset", "validation", {"lm_head_loss"});
  }

  // The training records of the experiment's first run, by step.
  static std::vector<TrainingRecord> records(const fs::path& experiment) {
    const std::vector<double> values = training_values(experiment, {"lm_head_loss", "grad_norm"});
    std::vector<TrainingRecord> result;
    for (size_t index = 0; index + 1 < values.size(); index += 2)
      result.push_back({.loss = values[index], .grad_norm = values[index + 1]});
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
    ASSERT_FALSE(names.empty()) << "no tensors to compare";
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
    ASSERT_FALSE(expected.empty()) << "no training records to compare";
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t step = 0; step < expected.size(); ++step) {
      EXPECT_NEAR(actual[step].loss, expected[step].loss, tolerance * expected[step].loss) << "step " << step + 1;
      EXPECT_NEAR(actual[step].grad_norm, expected[step].grad_norm, tolerance * expected[step].grad_norm)
          << "step " << step + 1;
    }
  }

  // The same records and the same checkpoint of step 3 (the last) as `expected`, to tolerance_.
  void expect_same_run(const fs::path& actual, const fs::path& expected) {
    expect_same_records(records(actual), records(expected), tolerance_);
    expect_same_checkpoint(actual, expected, 3, tolerance_);
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
  // This suite's relative tolerance: mode_.tolerance, or mode_.tensor_split_tolerance where its layouts split sums
  // over tensor ranks (set by the suite's constructor or before a comparison).
  double tolerance_ = mode_.tolerance;
};

}  // namespace fast_llm::testing
