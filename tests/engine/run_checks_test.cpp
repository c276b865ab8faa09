// What the trainer checks before it builds anything big: whole-config preconditions and the memory the run needs.
// "Before anything is allocated" is measured by the CPU allocator's count of allocations.
#include <gtest/gtest.h>

#include "engine/trainer_test_util.h"
#include "fast_llm/data/memmap.h"
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
        "weights, gradients and optimizer state of 2 stages",
        "activations of stages 0-1, 1 micro-batch of 16 tokens in flight: ",
        "sampling index of dataset training (4 samples): ", "Lower data.micro_batch_size"})
    EXPECT_NE(message.find(part), std::string::npos) << part << "\n" << message;
  EXPECT_EQ(cpu_allocations(), before);
  // The same run with room to spare starts.
  EXPECT_NO_THROW(run.make_trainer(nullptr, 1024));
  std::filesystem::remove_all(directory);
}

// The estimate is meant as an upper bound of what a run allocates: a rank that allocates more says so, once. Here the
// model's activations are declared at 1 byte per token and layer, far less than its layers keep for micro-batches of
// 65,536 tokens (megabytes: beyond the allowance for the allocator's alignment); at 1 KiB they bound them.
TEST(RunChecks, ARunAllocatingMoreThanItsEstimateIsWarnedAbout) {
  const std::string warning = "more than the ";
  for (const int64_t per_token : {int64_t(1), int64_t(1024)}) {
    const auto directory = fresh_directory("checks_beyond_estimate");
    TrainerRun run(directory, 1, "{train_iters: 3, logs: {interval: 1}}",
                   "{datasets: {training: {type: random}}, micro_batch_size: 65536}");
    ::testing::internal::CaptureStderr();
    run.make_trainer(nullptr, per_token)->run();
    const std::string log = ::testing::internal::GetCapturedStderr();
    const size_t found = log.find(warning);
    if (per_token == 1) {
      ASSERT_NE(found, std::string::npos) << log;
      EXPECT_NE(log.find("MiB the memory check estimated at start-up for its device"), std::string::npos) << log;
      EXPECT_EQ(log.find(warning, found + 1), std::string::npos) << log;
    } else {
      EXPECT_EQ(found, std::string::npos) << log;
    }
    std::filesystem::remove_all(directory);
  }
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

// The sampling index part, against the index the sampling writes to its cache (the index words, once; the estimate
// counts them twice, for the copy made while writing): a memmap dataset of 40 documents of 10 to 49 tokens, sampled
// alone, through a slice and blended, for one epoch and for several.
TEST(MemoryCheck, SamplingIndexBytesBoundTheIndexTheSamplingWrites) {
  const auto directory = fresh_directory("checks_index");
  const std::filesystem::path file = directory / "documents.fast_llm_dataset";
  data::MemmapWriter writer(file, {});
  for (int64_t document = 0; document < 40; ++document)
    writer.add_document({.tokens = std::vector<int64_t>(size_t(10 + document), 7)});
  writer.finish();
  const std::string memmap = "{type: memmap, path: '" + file.string() + "'}";
  for (const std::string& dataset :
       {memmap, "{type: slice, dataset: " + memmap + ", begin: 0.0, end: 0.5}",
        "{type: blended, datasets: [" + memmap + ", {type: random}], weights: [0.5, 0.5]}"}) {
    for (int64_t num_samples : {8, 200}) {
      const auto cache = directory / "cache";
      std::filesystem::remove_all(cache);
      const auto config = testing::load_config<data::GPTDataConfig>(
          "{datasets: {training: " + dataset + "}, micro_batch_size: 16}", "data");
      data::GPTData data(config, {.experiment_directory = cache, .vocab_size = 20});
      const int64_t estimate =
          sampling_index_bytes(config.datasets.at("training"), data.sampling_parameters(), num_samples);
      data.sample_dataset("training", num_samples);
      int64_t written = 0;
      for (const auto& entry : std::filesystem::recursive_directory_iterator(cache))
        if (entry.path().string().ends_with("_index.bin")) written += int64_t(entry.file_size());
      ASSERT_GT(written, 0) << dataset;
      // At least the index, at most one unused epoch of document order (40 entries) more, both counted twice; the
      // blend adds 12 bytes per sample.
      const int64_t blend = dataset.find("blended") != std::string::npos ? 12 * num_samples : 0;
      EXPECT_GE(estimate - blend, 2 * written) << dataset << " " << num_samples;
      EXPECT_LE(estimate - blend, 2 * (written + 8 * 40)) << dataset << " " << num_samples;
    }
  }
  std::filesystem::remove_all(directory);
}

// A fill-in-the-middle dataset rewrites the samples of the dataset it wraps, whose index is all it keeps.
TEST(MemoryCheck, SamplingIndexBytesOfFimAreTheWrappedDatasets) {
  const auto directory = fresh_directory("checks_fim_index");
  const std::filesystem::path file = directory / "documents.fast_llm_dataset";
  data::MemmapWriter writer(file, {});
  for (int64_t document = 0; document < 40; ++document)
    writer.add_document({.tokens = std::vector<int64_t>(size_t(10 + document), 7)});
  writer.finish();
  const std::string memmap = "{type: memmap, path: '" + file.string() + "'}";
  const auto config = testing::load_config<data::GPTDataConfig>(
      "{datasets: {plain: " + memmap + ", fim: {type: fim, dataset: " + memmap +
          ", tokenizer: {path: tokenizer.json}, rate: 0.5}}, micro_batch_size: 16}",
      "data");
  data::GPTData data(config, {.vocab_size = 20});
  const int64_t plain = sampling_index_bytes(config.datasets.at("plain"), data.sampling_parameters(), 100);
  EXPECT_GT(plain, 0);
  EXPECT_EQ(sampling_index_bytes(config.datasets.at("fim"), data.sampling_parameters(), 100), plain);
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace fast_llm::engine
