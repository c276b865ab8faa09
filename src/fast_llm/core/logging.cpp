#include "fast_llm/core/logging.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <set>

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
  std::lock_guard lock(s.mutex);
  fmt::print(stderr, "{}{} {}{}\n", stamp, rank, level_prefix(level), message);
  std::fflush(stderr);
}

bool log_once_key(std::string_view key) {
  std::lock_guard lock(state().mutex);
  return state().once_keys.emplace(key).second;
}

}  // namespace fast_llm
