// Skipped training steps on the test model, whose learning rate of 1e30 makes its first update so large that every
// later step has gradients too large to square (a finite loss, a non-finite gradient norm): they are counted as nan
// iterations with their loss in the interval's mean, a run of them stops training with an error before the next save,
// and pruning keeps the last checkpoint from before them.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/trainer_test_util.h"
#include "fast_llm/engine/checkpoint/distributed.h"

namespace fast_llm::engine {
namespace {

using testing::error_message;
using testing::fresh_directory;
using testing::load_config;
using testing::read_records;
using testing::TrainerRun;

constexpr const char* kDiverging = "{learning_rate: {base: 1.0e+30}}";

TEST(SkippedSteps, AreNanIterationsAndTheirLossesCount) {
  const auto directory = fresh_directory("skipped_counted");
  TrainerRun run(directory, 1, "{train_iters: 4, logs: {interval: 2}, max_consecutive_skipped_iterations: null}");
  run.optimizer = load_config<OptimizerConfig>(kDiverging, "optimizer");
  run.make_trainer()->run();
  const auto records = read_records(directory / "runs" / "0" / "metrics.jsonl");
  ASSERT_EQ(records.size(), 2u);
  // Step 1 went through, steps 2 to 4 were skipped for their gradients, with finite losses.
  EXPECT_EQ(records[0].at("skipped_iters"), 1);
  EXPECT_EQ(records[0].at("nan_iters"), 1);
  EXPECT_EQ(records[1].at("skipped_iters"), 2);
  EXPECT_EQ(records[1].at("nan_iters"), 2);
  // The loss of an interval whose every step was skipped is the mean of theirs, not NaN (null).
  ASSERT_TRUE(records[1].at("mse").is_number()) << records[1].dump();
  EXPECT_GT(records[1].at("mse").get<double>(), 1e100);
  std::filesystem::remove_all(directory);
}

TEST(SkippedSteps, ARunOfThemStopsTrainingAndKeepsTheCheckpointBeforeThem) {
  const auto directory = fresh_directory("skipped_stop");
  TrainerRun run(directory, 1,
                 "{train_iters: 40, logs: {interval: 1}, checkpoint: {interval: 1, keep: 2}, "
                 "max_consecutive_skipped_iterations: 4}");
  run.optimizer = load_config<OptimizerConfig>(kDiverging, "optimizer");
  auto trainer = run.make_trainer();
  const std::string message = error_message([&] { trainer->run(); });
  EXPECT_NE(message.find("training diverged: steps 2 to 5 were all skipped (non-finite gradients), and "
                         "training.max_consecutive_skipped_iterations (4) stops a run after that many in a row"),
            std::string::npos)
      << message;
  const std::filesystem::path checkpoints = directory / "checkpoint";
  EXPECT_NE(message.find("The last checkpoint before them, " + (checkpoints / "1").string() + ", is kept"),
            std::string::npos)
      << message;
  // Stopped before the checkpoint of step 5; the two newest are kept, and step 1's, the last before the skips.
  EXPECT_EQ(trainer->completed_steps(), 5);
  for (int step : {1, 3, 4}) EXPECT_TRUE(checkpoint_complete(checkpoints / std::to_string(step))) << step;
  for (int step : {2, 5}) EXPECT_FALSE(std::filesystem::exists(checkpoints / std::to_string(step))) << step;
  // The log line of the step that stopped it was written.
  EXPECT_EQ(read_records(directory / "runs" / "0" / "metrics.jsonl").size(), 5u);
  std::filesystem::remove_all(directory);
}

TEST(SkippedSteps, TheStopIsOnByDefault) {
  EXPECT_EQ(TrainingConfig{}.max_consecutive_skipped_iterations, 100);
  const auto directory = fresh_directory("skipped_default");
  TrainerRun run(directory, 1, "{train_iters: 150, logs: {interval: 50}}");
  run.optimizer = load_config<OptimizerConfig>(kDiverging, "optimizer");
  auto trainer = run.make_trainer();
  const std::string message = error_message([&] { trainer->run(); });
  // Seen at the log line of step 150, when the 100th skip in a row (step 101) was long past.
  EXPECT_NE(message.find("steps 2 to 150 were all skipped"), std::string::npos) << message;
  EXPECT_NE(message.find("No checkpoint was saved before them"), std::string::npos) << message;
  std::filesystem::remove_all(directory);
}

// Pruning alone: the newest save before a given step survives however many saves follow it.
TEST(SkippedSteps, PruningKeepsTheNewestSaveBeforeTheStreak) {
  const auto directory = fresh_directory("skipped_prune");
  for (int step : {2, 4, 6, 8, 10, 12}) {
    std::filesystem::create_directories(directory / std::to_string(step));
    std::ofstream(directory / std::to_string(step) / "ok");
  }
  prune_checkpoints(directory, {.keep = 2, .keep_newest_before = 7});
  for (int step : {6, 10, 12}) EXPECT_TRUE(std::filesystem::exists(directory / std::to_string(step))) << step;
  for (int step : {2, 4, 8}) EXPECT_FALSE(std::filesystem::exists(directory / std::to_string(step))) << step;
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace fast_llm::engine
