// A full disk for tests, without root: while a FileSizeLimit lives, any write that would take a file of this process
// past `bytes` fails with EFBIG ("File too large"), the way a full disk fails it with ENOSPC (RLIMIT_FSIZE, with the
// SIGXFSZ that would kill the process ignored). It is process-wide: no other thread may write files meanwhile.
// `/dev/full` is the other way, for writers that can be pointed at it (every write fails with ENOSPC).
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdint>

namespace fast_llm::testing {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(uint64_t bytes) {
    EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &saved_), 0);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = std::min<rlim_t>(rlim_t(bytes), saved_.rlim_max);
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*previous_handler_)(int) = SIG_DFL;
};

}  // namespace fast_llm::testing
