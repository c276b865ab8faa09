// The experiment directory's lock.
#include "fast_llm/engine/training/experiment_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <system_error>

#include "fast_llm/core/error.h"

namespace fast_llm::engine {
namespace {

std::string reason(int error) { return std::generic_category().message(error); }

// "pid 1234 on host node-7, started 2026-11-29 07:40:01": what a refused run is told about the holder.
std::string holder_record() {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  std::array<char, 32> stamp{};
  std::strftime(stamp.data(), stamp.size(), "%Y-%m-%d %H:%M:%S", &local);
  return fmt::format("pid {} on host {}, started {}", ::getpid(), host[0] ? host.data() : "(unknown)", stamp.data());
}

// The holder's record, as the holder wrote it (empty when it has not written it yet).
std::string read_record(int descriptor) {
  std::array<char, 512> text{};
  const ssize_t size = ::pread(descriptor, text.data(), text.size(), 0);
  std::string record(text.data(), size > 0 ? size_t(size) : 0);
  while (!record.empty() && (record.back() == '\n' || record.back() == '\0')) record.pop_back();
  return record;
}

}  // namespace

std::filesystem::path experiment_lock_path(const std::filesystem::path& experiment_dir) {
  return experiment_dir / "lock";
}

ExperimentLock::ExperimentLock(const std::filesystem::path& experiment_dir)
    : path_(experiment_lock_path(experiment_dir)) {
  std::error_code created;
  std::filesystem::create_directories(experiment_dir, created);
  if (created)
    throw Error("training", fmt::format("{}: cannot create the experiment directory ({})", experiment_dir.string(),
                                        created.message()));
  descriptor_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (descriptor_ < 0)
    throw Error("training", fmt::format("{}: cannot open the experiment directory's lock file ({})", path_.string(),
                                        reason(errno)));
  // On any failure below the descriptor is closed (a constructor that throws runs no destructor), which also releases
  // the lock if it was taken.
  auto fail = [this](const std::string& message) {
    ::close(descriptor_);
    descriptor_ = -1;
    throw Error("training", message);
  };
  while (::flock(descriptor_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EINTR) continue;
    if (error != EWOULDBLOCK) fail(fmt::format("{}: cannot lock ({})", path_.string(), reason(error)));
    const std::string holder = read_record(descriptor_);
    fail(fmt::format("{} is in use by another run ({}; lock file {}). Two runs in one experiment directory would "
                     "overwrite each other's checkpoints: wait for that run to end, or set another run.experiment_dir",
                     experiment_dir.string(), holder.empty() ? "which has not recorded its process yet" : holder,
                     path_.string()));
  }
  const std::string record = holder_record() + "\n";
  if (::ftruncate(descriptor_, 0) != 0)
    fail(fmt::format("{}: cannot record the run holding the lock ({})", path_.string(), reason(errno)));
  const ssize_t written = ::pwrite(descriptor_, record.data(), record.size(), 0);
  if (written != ssize_t(record.size()))
    fail(fmt::format("{}: cannot record the run holding the lock ({})", path_.string(),
                     written < 0 ? reason(errno) : std::string("short write")));
}

ExperimentLock::~ExperimentLock() {
  // Emptied so that it names no run once none holds the lock; if that fails, the next run rewrites it anyway.
  [[maybe_unused]] const int emptied = ::ftruncate(descriptor_, 0);
  ::close(descriptor_);
}

}  // namespace fast_llm::engine
