// `schedule.cuda_graphs` end to end on a GPU: a tiny GPT trained with graphs gives bit for bit the per-step losses,
// gradient norms and final weights of the same run without them, and the graph counters say what ran. With documents
// of one fixed length every step has the same shapes: the first step runs eagerly, the second captures a graph, every
// later one replays it. With documents of varied lengths the batches' boundaries change every step: no graph is ever
// captured or replayed, and the losses are still those of the eager run. fp32 compute, so that every kernel of the
// step is deterministic (the bf16 attention backwards add dQ with atomics) and `kernels.autotune: false`, so that both
// runs use the same gemm algorithms. Skips itself without a GPU or without a CUDA attention kernel.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fast_llm/data/memmap.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/engine/training/trainer.h"
#include "fast_llm/models/gpt/model_type.h"
#include "fast_llm/models/gpt/training.h"
#include "fast_llm/tensor/allocator.h"
#include "models/config_test_util.h"
#include "models/gpt_cuda_test_util.h"

namespace fast_llm::models::gpt {
namespace {

constexpr int64_t kSteps = 8;

struct TrainingRun {
  std::vector<double> losses, grad_norms;  // per step
  std::vector<std::vector<char>> weights;  // per stage: the master weights' bytes
  engine::GraphedTrainingStep::Counts counts;
};

// The tiny GPT run for kSteps steps in fp32 without autotuning, with or without graphs, then `overrides`.
TrainingRun train_run(const std::string& name, bool cuda_graphs, const std::vector<std::string>& overrides = {}) {
  const std::filesystem::path experiment = std::filesystem::temp_directory_path() / "fast_llm_gpt_cuda_graphs_test" /
                                           (name + (cuda_graphs ? "_graphs" : "_eager"));
  std::filesystem::remove_all(experiment);
  std::vector<std::string> assignments = {"run.experiment_dir=" + experiment.string(),
                                          "model.distributed.compute_dtype=float32",
                                          "model.distributed.use_cuda=true",
                                          "kernels.autotune=false",
                                          "training.train_iters=" + std::to_string(kSteps),
                                          std::string("schedule.cuda_graphs=") + (cuda_graphs ? "true" : "false")};
  assignments.insert(assignments.end(), overrides.begin(), overrides.end());
  YAML::Node tree = YAML::Load(testing::kTinyGptRun);
  for (const std::string& assignment : assignments) config::apply_override(tree, assignment);
  testing::ScopedEnvironment environment(testing::single_process());
  GPTTrainerConfig config;
  engine::load_config_with_pretrained(config, tree, gpt_model_type());
  TrainingRun result;
  train(config, [&](engine::Trainer& trainer) {
    result.counts = trainer.cuda_graph_counts();
    for (const auto& stage : trainer.multi_stage().stages()) {
      const Tensor host = stage->weight_shard().to(Device::cpu());
      std::vector<char> bytes(host.nbytes());
      std::memcpy(bytes.data(), host.data(), bytes.size());
      result.weights.push_back(std::move(bytes));
    }
  });
  std::ifstream file(experiment / "runs" / "0" / "metrics.jsonl");
  for (std::string line; std::getline(file, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record["phase"] != "training") continue;
    result.losses.push_back(record["lm_head_loss"].get<double>());
    result.grad_norms.push_back(record["grad_norm"].get<double>());
  }
  return result;
}

// Bit for bit the same training.
void expect_same_training(const TrainingRun& graphed, const TrainingRun& eager) {
  ASSERT_EQ(eager.losses.size(), size_t(kSteps));
  ASSERT_EQ(graphed.losses.size(), eager.losses.size());
  for (size_t step = 0; step < eager.losses.size(); ++step) {
    EXPECT_EQ(graphed.losses[step], eager.losses[step]) << "step " << step + 1;
    EXPECT_EQ(graphed.grad_norms[step], eager.grad_norms[step]) << "step " << step + 1;
  }
  ASSERT_EQ(graphed.weights.size(), eager.weights.size());
  for (size_t stage = 0; stage < eager.weights.size(); ++stage)
    EXPECT_TRUE(graphed.weights[stage] == eager.weights[stage]) << "master weights of stage " << stage << " differ";
  // The runs train: equal runs that never moved would not show that the replayed optimizer updates anything.
  EXPECT_NE(eager.losses.front(), eager.losses.back());
}

TEST(GptCudaGraphs, FixedShapesCaptureOnceReplayAfterAndMatchTheEagerRun) {
  REQUIRE_GPU_TRAINING();
  const TrainingRun eager = train_run("fixed", false);
  EXPECT_EQ(eager.counts.eager_steps + eager.counts.captures + eager.counts.replays, 0);  // graphs off: no counts
  const TrainingRun graphed = train_run("fixed", true);
  expect_same_training(graphed, eager);
  EXPECT_EQ(graphed.counts.eager_steps, 1);  // the first step
  EXPECT_EQ(graphed.counts.captures, 1);     // the second
  EXPECT_EQ(graphed.counts.replays, kSteps - 2);
  EXPECT_EQ(graphed.counts.failed_captures, 0);
  EXPECT_GT(allocator_for(Device::cuda(0)).stats().graph_pool_reserved_bytes, 0u);
}

// Documents of lengths 5 to 94 (a fixed pseudo-random sequence), tokens in [1, 255], in a memmap dataset.
std::filesystem::path varied_length_dataset() {
  const std::filesystem::path folder = std::filesystem::temp_directory_path() / "fast_llm_gpt_cuda_graphs_test";
  std::filesystem::create_directories(folder);
  const std::filesystem::path path = folder / "varied.fast_llm_dataset";
  data::MemmapWriter writer(
      path, {.data_type = data::TokenDataType::uint16, .loss_masking_spans = false, .preference_spans = false});
  uint64_t state = 12345;
  const auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  for (int document = 0; document < 400; ++document) {
    data::Document entry;
    const int64_t length = 5 + int64_t(next() % 90);
    for (int64_t position = 0; position < length; ++position) entry.tokens.push_back(1 + int64_t(next() % 255));
    writer.add_document(entry);
  }
  writer.finish();
  return path;
}

TEST(GptCudaGraphs, BatchesThatChangeEveryStepNeverReplayAndMatchTheEagerRun) {
  REQUIRE_GPU_TRAINING();
  const std::vector<std::string> overrides = {"data.datasets.training.type=memmap",
                                              "data.datasets.training.path=" + varied_length_dataset().string()};
  const TrainingRun eager = train_run("varied", false, overrides);
  const TrainingRun graphed = train_run("varied", true, overrides);
  expect_same_training(graphed, eager);
  EXPECT_EQ(graphed.counts.replays, 0);
  EXPECT_EQ(graphed.counts.captures, 0);
  EXPECT_EQ(graphed.counts.eager_steps, kSteps);
  EXPECT_EQ(graphed.counts.failed_captures, 0);
}

}  // namespace
}  // namespace fast_llm::models::gpt
