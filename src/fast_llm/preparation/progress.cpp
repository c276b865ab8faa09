#include "fast_llm/preparation/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "fast_llm/core/logging.h"

namespace fast_llm::preparation {

std::string human_count(double value) {
  if (value >= 1e9) return fmt::format("{:.2f}G", value / 1e9);
  if (value >= 1e6) return fmt::format("{:.2f}M", value / 1e6);
  if (value >= 1e3) return fmt::format("{:.1f}k", value / 1e3);
  return fmt::format("{:.0f}", value);
}

std::string human_duration(double seconds) {
  const int64_t total = int64_t(std::llround(std::max(seconds, 0.0)));
  if (total >= 3600) return fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60);
  return fmt::format("{}:{:02}", total / 60, total % 60);
}

std::string ProgressReporter::format_line(const std::string& what, int64_t documents, int64_t total_documents,
                                          int64_t tokens, double seconds, int bar_width) {
  const double fraction = total_documents > 0 ? std::min(1.0, double(documents) / double(total_documents)) : 1.0;
  const double rate = seconds > 0 ? double(tokens) / seconds : 0.0;
  const double document_rate = seconds > 0 ? double(documents) / seconds : 0.0;
  const std::string eta =
      document_rate > 0 ? human_duration(double(total_documents - documents) / document_rate) : "?";
  std::string bar;
  if (bar_width > 0) {
    const int filled = int(fraction * bar_width);
    bar = fmt::format("[{}{}] ", std::string(size_t(filled), '#'), std::string(size_t(bar_width - filled), '.'));
  }
  return fmt::format("{} {}{:3.0f}% {}/{} documents, {} tokens, {} tokens/s, elapsed {}, ETA {}", what, bar,
                     100 * fraction, documents, total_documents, human_count(double(tokens)), human_count(rate),
                     human_duration(seconds), eta);
}

ProgressReporter::ProgressReporter(std::string what, int64_t total_documents)
    : what_(std::move(what)),
      total_documents_(total_documents),
      terminal_(::isatty(STDERR_FILENO) == 1),
      start_(Clock::now()),
      last_shown_(start_) {}

void ProgressReporter::update(int64_t documents, int64_t tokens) {
  const auto now = Clock::now();
  const auto interval = terminal_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(30000);
  if (now - last_shown_ < interval && documents < total_documents_) return;
  if (!terminal_ && documents >= total_documents_) return;  // the summary says the rest
  last_shown_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (terminal_) {
    write_to_terminal(fmt::format("\r{}\033[K", format_line(what_, documents, total_documents_, tokens, seconds, 30)));
    drawn_ = true;
  } else {
    log_main("{}", format_line(what_, documents, total_documents_, tokens, seconds, 0));
  }
}

void ProgressReporter::finish() {
  if (drawn_) write_to_terminal("\n");
  drawn_ = false;
}

}  // namespace fast_llm::preparation
