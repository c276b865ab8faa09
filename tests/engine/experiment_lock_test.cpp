// One run per experiment directory: the lock refuses a second holder (another process, or another open of the file
// in this one), names the holder, and is released by the kernel when its holder is killed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "engine/trainer_test_util.h"
#include "fast_llm/engine/training/experiment_lock.h"

namespace fast_llm::engine {
namespace {

using testing::error_message;
using testing::fresh_directory;
using testing::TrainerRun;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string holder_prefix(pid_t pid) { return "pid " + std::to_string(pid) + " on host "; }

TEST(ExperimentLock, ASecondHolderIsRefusedNamingTheFirst) {
  const auto directory = fresh_directory("lock_same_process");
  {
    ExperimentLock first(directory);
    EXPECT_EQ(first.path(), directory / "lock");
    EXPECT_EQ(read_text(first.path()).rfind(holder_prefix(::getpid()), 0), 0u) << read_text(first.path());
    // flock belongs to an open file description: a second open in the same process is a second holder.
    const std::string message = error_message([&] { ExperimentLock second(directory); });
    EXPECT_NE(message.find(directory.string() + " is in use by another run (" + holder_prefix(::getpid())),
              std::string::npos)
        << message;
  }
  // Released with its holder, and the record emptied.
  EXPECT_EQ(read_text(directory / "lock"), "");
  EXPECT_NO_THROW(ExperimentLock again(directory));
  std::filesystem::remove_all(directory);
}

TEST(ExperimentLock, AKilledHolderBlocksNothing) {
  const auto directory = fresh_directory("lock_killed");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ExperimentLock lock(directory);
    const char byte = 1;
    if (::write(ready[1], &byte, 1) != 1) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  char byte = 0;
  const bool locked = ::read(ready[0], &byte, 1) == 1;
  EXPECT_TRUE(locked);
  if (locked) {
    const std::string message = error_message([&] { ExperimentLock second(directory); });
    EXPECT_NE(message.find("is in use by another run (" + holder_prefix(child)), std::string::npos) << message;
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  // The killed run's record is still in the file, but the kernel released its lock.
  EXPECT_EQ(read_text(directory / "lock").rfind(holder_prefix(child), 0), 0u);
  ExperimentLock next(directory);
  EXPECT_EQ(read_text(directory / "lock").rfind(holder_prefix(::getpid()), 0), 0u);
  std::filesystem::remove_all(directory);
}

// Two trainers in one experiment directory: the second is refused before it writes anything there, and starts once
// the first is gone.
TEST(ExperimentLock, ASecondTrainerWaitsForTheFirstToEnd) {
  const auto directory = fresh_directory("lock_trainers");
  TrainerRun first(directory, 1, "{train_iters: 1, checkpoint: {interval: 1}}");
  auto holder = first.make_trainer();
  TrainerRun second(directory, 1, "{train_iters: 1, checkpoint: {interval: 1}}");
  const std::string message = error_message([&] { second.make_trainer(); });
  EXPECT_NE(message.find(directory.string() + " is in use by another run (" + holder_prefix(::getpid())),
            std::string::npos)
      << message;
  EXPECT_FALSE(std::filesystem::exists(directory / "runs" / "1"));
  holder->run();
  holder.reset();
  auto next = second.make_trainer();
  EXPECT_EQ(next->run_directory(), directory / "runs" / "1");
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace fast_llm::engine
