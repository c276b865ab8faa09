#include "fast_llm/core/logging.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <set>
#include <system_error>

#include "fast_llm/core/error.h"

namespace fast_llm {

namespace {
struct LogState {
  std::mutex mutex;
  int rank = 0;
  int world_size = 1;
  LogLevel level = LogLevel::info;
  std::set<std::string, std::less<>> once_keys;
};

LogState& state() {
  static LogState instance;
  return instance;
}

// Writes and flushes; returns 0, or the errno of the failure (EIO when the stream does not say).
int write_stream(std::FILE* stream, std::string_view text) {
  errno = 0;
  const bool written = std::fwrite(text.data(), 1, text.size(), stream) == text.size();
  if (std::fflush(stream) == 0 && written) return 0;
  const int error = errno != 0 ? errno : EIO;
  std::clearerr(stream);
  return error;
}

int write_stderr(std::string_view text) { return write_stream(stderr, text); }

[[noreturn]] void throw_write_failure(int error) {
  throw Error("log", fmt::format("cannot write to standard error ({}): the run stops rather than go on without its log",
                                 std::generic_category().message(error)));
}

const char* level_prefix(LogLevel level) {
  switch (level) {
    case LogLevel::debug: return "debug: ";
    case LogLevel::info: return "";
    case LogLevel::warning: return "warning: ";
    case LogLevel::error: return "error: ";
  }
  return "";
}
}  // namespace

void set_log_rank(int rank, int world_size) {
  std::lock_guard lock(state().mutex);
  state().rank = rank;
  state().world_size = world_size;
}

void set_log_level(LogLevel level) { state().level = level; }
LogLevel log_level() { return state().level; }

void log_line(LogLevel level, std::string_view message, bool main_rank_only) {
  auto& s = state();
  if (level < s.level) return;
  if (main_rank_only && s.rank != 0) return;
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
  std::string rank = s.world_size > 1 ? fmt::format(" [rank {}]", s.rank) : std::string();
  const std::string line = fmt::format("{}{} {}{}\n", stamp, rank, level_prefix(level), message);
  std::lock_guard lock(s.mutex);
  const int error = write_stderr(line);
  if (error != 0 && level != LogLevel::error) throw_write_failure(error);
}

void write_to_terminal(std::string_view text) {
  std::lock_guard lock(state().mutex);
  if (const int error = write_stderr(text); error != 0) throw_write_failure(error);
}

bool log_once_key(std::string_view key) {
  std::lock_guard lock(state().mutex);
  return state().once_keys.emplace(key).second;
}

void write_to_standard_output(std::string_view text) {
  if (const int error = write_stream(stdout, text); error != 0)
    throw Error("output", fmt::format("cannot write to standard output ({}): what was asked for was not printed",
                                      std::generic_category().message(error)));
}

}  // namespace fast_llm
