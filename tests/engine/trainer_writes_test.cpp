// What the trainer writes, on a full disk (tests/core/full_disk.h: writes past a size limit fail as ENOSPC would):
// the metrics file, the experiment's config.yaml and the profiling tables each stop the run with an error naming the
// file, instead of ending with exit 0 and a file cut short.
#include <gtest/gtest.h>

#include "core/full_disk.h"
#include "engine/trainer_test_util.h"

namespace fast_llm::engine {
namespace {

using testing::error_message;
using testing::fresh_directory;
using testing::load_config;
using testing::TrainerRun;

void expect_write_failure(const std::string& message, const std::filesystem::path& file) {
  EXPECT_NE(message.find("[training] " + file.string() + ": write failed"), std::string::npos) << message;
  EXPECT_NE(message.find("(File too large)"), std::string::npos) << message;
}

TEST(TrainerWrites, AFullDiskStopsTheRunAtTheMetricsFile) {
  const auto directory = fresh_directory("full_metrics");
  TrainerRun run(directory, 1, "{train_iters: 4, logs: {interval: 1}}");
  auto trainer = run.make_trainer();
  std::string message;
  {
    // Less than one record.
    fast_llm::testing::FileSizeLimit limit(200);
    message = error_message([&] { trainer->run(); });
  }
  expect_write_failure(message, directory / "runs" / "0" / "metrics.jsonl");
  EXPECT_EQ(trainer->completed_steps(), 1);
  std::filesystem::remove_all(directory);
}

TEST(TrainerWrites, AFullDiskStopsTheRunAtConfigYaml) {
  const auto directory = fresh_directory("full_config");
  TrainerRun run(directory, 1, "{train_iters: 1}");
  run.resolved_config = "training: {train_iters: 1}\n# " + std::string(4096, '-');
  std::string message;
  {
    fast_llm::testing::FileSizeLimit limit(1024);
    message = error_message([&] { run.make_trainer(); });
  }
  expect_write_failure(message, directory / "config.yaml");
  // Nothing is left half-written: no config.yaml, no temporary file.
  for (const auto& entry : std::filesystem::directory_iterator(directory))
    EXPECT_EQ(entry.path().filename().string().find("config.yaml"), std::string::npos) << entry.path();
  std::filesystem::remove_all(directory);
}

TEST(TrainerWrites, AFullDiskStopsTheRunAtAProfilingTable) {
  const auto directory = fresh_directory("full_profile");
  TrainerRun run(directory, 5, "{train_iters: 6, logs: {interval: null}}");
  const auto profiling = load_config<ProfilingConfig>(
      "{cpu: true, averages: true, skip: 1, wait: 0, warmup: 1, cycles: 2}", "profiling");
  auto trainer = run.make_trainer(&profiling);
  std::string message;
  {
    fast_llm::testing::FileSizeLimit limit(64);
    message = error_message([&] { trainer->run(); });
  }
  expect_write_failure(message, directory / "runs" / "0" / "profile" / "step_4.txt");
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace fast_llm::engine
