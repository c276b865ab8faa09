// Rank-aware logging.
//
// Every line carries a timestamp and, in a distributed run, the rank: `2026-11-29 07:40:01 [rank 3] message`.
// By default only rank 0 prints info lines (`log_main`); warnings and errors print on every rank.
// Lines go to stderr so that stdout stays clean for what a command is asked to print (`--validate`, `kernels`).
//
// A line that cannot be written (standard error on a full disk, a closed terminal) throws Error("log", ...): a run
// whose log is lost stops rather than going on unseen. Error lines are the exception: they report a failure that is
// already ending the program (cli/main.cpp), or come from destructors, so one that cannot be written is dropped and
// the exit status says the rest.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace fast_llm {

enum class LogLevel { debug, info, warning, error };

// Set once at start-up by the distributed setup; world_size 1 prints no rank.
void set_log_rank(int rank, int world_size);
void set_log_level(LogLevel level);
LogLevel log_level();

void log_line(LogLevel level, std::string_view message, bool main_rank_only);
// Writes `text` to standard error as it is (a progress line redrawn in place), checked as log lines are.
void write_to_terminal(std::string_view text);
// Writes and flushes `text` to standard output (what a command was asked to print: `--validate`, `kernels`); throws
// Error("output", ...) when it cannot, so that `fast-llm ... > full_disk/file` does not exit 0 having printed nothing.
void write_to_standard_output(std::string_view text);

// Logs a line once per process for a given key (e.g. the kernel chosen for an op).
bool log_once_key(std::string_view key);

template <class... Args>
void log_info(fmt::format_string<Args...> format, Args&&... args) {
  log_line(LogLevel::info, fmt::format(format, std::forward<Args>(args)...), /*main_rank_only=*/false);
}
template <class... Args>
void log_main(fmt::format_string<Args...> format, Args&&... args) {
  log_line(LogLevel::info, fmt::format(format, std::forward<Args>(args)...), /*main_rank_only=*/true);
}
template <class... Args>
void log_debug(fmt::format_string<Args...> format, Args&&... args) {
  if (log_level() <= LogLevel::debug)
    log_line(LogLevel::debug, fmt::format(format, std::forward<Args>(args)...), /*main_rank_only=*/false);
}
template <class... Args>
void log_warning(fmt::format_string<Args...> format, Args&&... args) {
  log_line(LogLevel::warning, fmt::format(format, std::forward<Args>(args)...), /*main_rank_only=*/false);
}
template <class... Args>
void log_error(fmt::format_string<Args...> format, Args&&... args) {
  log_line(LogLevel::error, fmt::format(format, std::forward<Args>(args)...), /*main_rank_only=*/false);
}

}  // namespace fast_llm
