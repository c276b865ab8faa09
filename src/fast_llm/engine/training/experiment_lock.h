// One run at a time per experiment directory.
//
//   ExperimentLock lock(experiment_dir);  // throws Error naming the holder when another run has the directory
//
// The lock is flock(2) on `<experiment_dir>/lock`, taken without waiting and held until the object goes. The kernel
// releases it when the process ends in any way (kill -9 included), so a file left by a killed run never blocks the
// next one: the file's content only names the holder (pid, host, start time) for the refusal message, and is
// rewritten by each run that takes the lock. flock locks belong to an open file description, so a second open of the
// file in the same process is refused too. In a run of several processes, rank 0 alone takes it (the others learn the
// outcome from rank 0, as they learn everything else about the experiment directory).
#pragma once

#include <filesystem>
#include <string>

namespace fast_llm::engine {

class ExperimentLock {
 public:
  // Creates the directory if needed and takes the lock. Throws Error("training", ...) naming the directory and the
  // holder when another run holds it, or naming the lock file and the system's reason when it cannot be created.
  explicit ExperimentLock(const std::filesystem::path& experiment_dir);
  // Empties the holder record, then releases the lock.
  ~ExperimentLock();
  ExperimentLock(const ExperimentLock&) = delete;
  ExperimentLock& operator=(const ExperimentLock&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int descriptor_ = -1;
};

// The lock file of an experiment directory.
std::filesystem::path experiment_lock_path(const std::filesystem::path& experiment_dir);

}  // namespace fast_llm::engine
