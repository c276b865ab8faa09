// Progress of a long preparation on standard error: on a terminal, one line redrawn in place (a bar, documents,
// tokens per second, ETA), at most five times a second; otherwise (a log file, CI) a plain log line every 30 seconds,
// so logs stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace fast_llm::preparation {

class ProgressReporter {
 public:
  // `total_documents`: the documents expected, for the percentage and the ETA.
  ProgressReporter(std::string what, int64_t total_documents);
  // The counts so far; redraws or logs when due.
  void update(int64_t documents, int64_t tokens);
  // Ends the redrawn line (the summary follows on its own lines).
  void finish();

  // The line shown for these counts after `seconds` (public for tests).
  static std::string format_line(const std::string& what, int64_t documents, int64_t total_documents, int64_t tokens,
                                 double seconds, int bar_width);

 private:
  using Clock = std::chrono::steady_clock;
  std::string what_;
  int64_t total_documents_;
  bool terminal_;
  Clock::time_point start_;
  Clock::time_point last_shown_;
  bool drawn_ = false;
};

// "1.23M", "45.6k", "789": counts as people read them.
std::string human_count(double value);
// "1:02:03" / "2:03".
std::string human_duration(double seconds);

}  // namespace fast_llm::preparation
