// `train gpt` on a GPU against the same run on the CPU: a tiny GPT (2 blocks, packed random documents, two micro-batches
// per step) trained for a few steps from the same seed and data gives the same per-step losses and gradient norms,
// within fp32 rounding (1e-4 relative) in fp32 and within bf16 rounding in bf16. This covers the GPU step path end to
// end: batches uploaded from page-locked memory on their own stream, clipping and skipping decided on the device, and
// losses and optimizer results read only at log time. Skips itself without a GPU or without a CUDA attention kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/models/gpt/model_type.h"
#include "fast_llm/models/gpt/training.h"
#include "models/config_test_util.h"
#include "models/gpt_cuda_test_util.h"

namespace fast_llm::models::gpt {
namespace {

struct Record {
  double loss, grad_norm;
};

// The training records of a run on `device` ("cuda" or "cpu") in `dtype`.
std::vector<Record> train_on(const std::string& device, const std::string& dtype) {
  const std::filesystem::path experiment =
      std::filesystem::temp_directory_path() / "fast_llm_gpt_training_cuda_test" / (device + "_" + dtype);
  std::filesystem::remove_all(experiment);
  YAML::Node tree = YAML::Load(testing::kTinyGptRun);
  config::apply_override(tree, "run.experiment_dir=" + experiment.string());
  config::apply_override(tree, "model.distributed.compute_dtype=" + dtype);
  config::apply_override(tree, std::string("model.distributed.use_cuda=") + (device == "cuda" ? "true" : "false"));
  testing::ScopedEnvironment environment(testing::single_process());
  GPTTrainerConfig config;
  engine::load_config_with_pretrained(config, tree, gpt_model_type());
  train(config);
  std::vector<Record> result;
  std::ifstream file(experiment / "runs" / "0" / "metrics.jsonl");
  for (std::string line; std::getline(file, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record["phase"] == "training") result.push_back({record["lm_head_loss"], record["grad_norm"]});
  }
  return result;
}

void expect_same_run(const std::vector<Record>& gpu, const std::vector<Record>& cpu, double loss_tolerance,
                     double grad_norm_tolerance) {
  ASSERT_EQ(cpu.size(), 6u);
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t step = 0; step < cpu.size(); ++step) {
    EXPECT_TRUE(std::isfinite(cpu[step].loss)) << "step " << step + 1;
    EXPECT_NEAR(gpu[step].loss, cpu[step].loss, loss_tolerance * std::fabs(cpu[step].loss)) << "step " << step + 1;
    EXPECT_NEAR(gpu[step].grad_norm, cpu[step].grad_norm, grad_norm_tolerance * cpu[step].grad_norm)
        << "step " << step + 1;
  }
  // The runs train: a loss that never moved would hide an optimizer that does nothing on either side.
  EXPECT_NE(cpu.front().loss, cpu.back().loss);
}

TEST(GptTrainingCuda, Float32MatchesTheCpu) {
  REQUIRE_GPU_TRAINING();
  expect_same_run(train_on("cuda", "float32"), train_on("cpu", "float32"), 1e-4, 1e-3);
}

TEST(GptTrainingCuda, Bfloat16MatchesTheCpu) {
  REQUIRE_GPU_TRAINING();
  expect_same_run(train_on("cuda", "bfloat16"), train_on("cpu", "bfloat16"), 2e-2, 5e-2);
}

}  // namespace
}  // namespace fast_llm::models::gpt
