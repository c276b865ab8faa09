// What the trainer checks before it builds anything big: whole-config preconditions and the memory the run needs.
// "Before anything is allocated" is measured by the CPU allocator's count of allocations.
#include <gtest/gtest.h>

#include "engine/trainer_test_util.h"
#include "fast_llm/engine/training/memory_check.h"
#include "fast_llm/tensor/allocator.h"

namespace fast_llm::engine {
namespace {

using testing::error_message;
using testing::fresh_directory;
using testing::TrainerRun;

uint64_t cpu_allocations() { return allocator_for(Device::cpu()).stats().allocations; }

TEST(RunChecks, EvaluationOnlyWithoutWeightsIsRefusedBeforeAnythingIsAllocated) {
  const auto directory = fresh_directory("checks_evaluation");
  TrainerRun run(directory, 1, "{train_iters: 0, evaluators: {validation: {interval: 1, iterations: 1}}}");
  const uint64_t before = cpu_allocations();
  const std::string message = error_message([&] { run.make_trainer(); });
  EXPECT_NE(message.find("evaluation only (training.train_iters is 0) needs weights to evaluate"), std::string::npos)
      << message;
  EXPECT_EQ(cpu_allocations(), before);
  std::filesystem::remove_all(directory);
}

TEST(RunChecks, EveryDatasetTheRunSamplesMustBeConfigured) {
  const auto directory = fresh_directory("checks_dataset");
  TrainerRun run(directory, 1, "{train_iters: 2, evaluators: {held_out: {interval: 1, iterations: 1}}}");
  const uint64_t before = cpu_allocations();
  try {
    run.make_trainer();
    ADD_FAILURE() << "an evaluator without a dataset was accepted";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.path(), "data.datasets");
    EXPECT_NE(std::string(error.what()).find("has no dataset named `held_out`, which training.evaluators.held_out "
                                             "needs"),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(cpu_allocations(), before);
  std::filesystem::remove_all(directory);
}

TEST(RunChecks, ARunThatCannotFitIsRefusedWithTheEstimateAndWhatIsAvailable) {
  const auto directory = fresh_directory("checks_memory");
  TrainerRun run(directory, 1, "{train_iters: 2}");
  const std::optional<AvailableMemory> available = available_memory(Device::cpu());
  ASSERT_TRUE(available.has_value()) << "no /proc/meminfo";
  // Activations of the 16-token micro-batch alone twice what the machine has.
  const int64_t per_token = int64_t(available->bytes) / 8;
  const uint64_t before = cpu_allocations();
  const std::string message = error_message([&] { run.make_trainer(nullptr, per_token); });
  for (const std::string part :
       {"[memory] this run needs about ", " of host memory and cpu has ", "(MemAvailable in /proc/meminfo)",
        "weights, gradients and optimizer state of 2 stages", "activations of 1 micro-batch of 16 tokens: ",
        "sampling index of dataset training (4 samples): ", "Lower data.micro_batch_size"})
    EXPECT_NE(message.find(part), std::string::npos) << part << "\n" << message;
  EXPECT_EQ(cpu_allocations(), before);
  // The same run with room to spare starts.
  EXPECT_NO_THROW(run.make_trainer(nullptr, 1024));
  std::filesystem::remove_all(directory);
}

// The stage part of the estimate is what the stages allocate, for every buffer layout (aliased shards, mixed
// precision, no gradients when not training), to the CPU allocator's 64-byte rounding of empty buffers.
TEST(MemoryCheck, StageBytesAreWhatTheStagesAllocate) {
  for (const auto& [compute, optimization] : std::vector<std::pair<std::string, std::string>>{
           {"float64", "float64"}, {"float32", "float32"}, {"bfloat16", "float32"}, {"float16", "float64"}}) {
    for (bool training : {true, false}) {
      fast_llm::testing::TestModel model(20, 8, 3);
      const auto distributed = fast_llm::testing::cpu_distributed(1, compute, optimization);
      const auto multi_stage_config = fast_llm::testing::multi_stage_config("{layers_per_stage: 2}");
      const StageSettings settings = stage_settings(multi_stage_config, distributed, Device::cpu(), training);
      const auto stages = split_into_stages(model.layers(), multi_stage_config.layers_per_stage);
      int64_t predicted = 0;
      for (const auto& layers : stages) predicted += stage_buffer_bytes(stage_regions(layers, 1), settings);
      const size_t before = allocator_for(Device::cpu()).stats().allocated_bytes;
      MultiStage multi_stage(model, multi_stage_config, distributed, Device::cpu(), training);
      const int64_t allocated = int64_t(allocator_for(Device::cpu()).stats().allocated_bytes - before);
      EXPECT_EQ(multi_stage.stages().size(), stages.size());
      EXPECT_GE(allocated, predicted) << compute << " " << optimization << " " << training;
      EXPECT_LE(allocated, predicted + int64_t(6 * 64 * stages.size())) << compute << " " << optimization << " "
                                                                        << training;
    }
  }
}

}  // namespace
}  // namespace fast_llm::engine
