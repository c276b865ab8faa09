// A full disk for tests, without root: while a FileSizeLimit lives, any write that would take a regular file of this
// process past `bytes` fails with EFBIG ("File too large"), the way a full disk fails it with ENOSPC (RLIMIT_FSIZE,
// with the SIGXFSZ that would kill the process ignored). It is process-wide: no other thread may write files
// meanwhile, and standard output and error, when they go to files, go to /dev/null meanwhile (the limit would fail
// their writes too). `/dev/full` is the other way, for writers that can be pointed at it (every write fails with
// ENOSPC).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>

namespace fast_llm::testing {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(uint64_t bytes) {
    std::fflush(nullptr);
    for (int stream : {STDOUT_FILENO, STDERR_FILENO}) {
      struct stat status {};
      if (::fstat(stream, &status) != 0 || !S_ISREG(status.st_mode)) continue;
      saved_streams_[stream - STDOUT_FILENO] = ::dup(stream);
      const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      ::dup2(null, stream);
      ::close(null);
    }
    EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &saved_limit_), 0);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_limit_;
    limit.rlim_cur = std::min<rlim_t>(rlim_t(bytes), saved_limit_.rlim_max);
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_limit_);
    std::signal(SIGXFSZ, previous_handler_);
    std::fflush(nullptr);
    for (int stream : {STDOUT_FILENO, STDERR_FILENO}) {
      const int saved = saved_streams_[stream - STDOUT_FILENO];
      if (saved < 0) continue;
      ::dup2(saved, stream);
      ::close(saved);
    }
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_limit_{};
  void (*previous_handler_)(int) = SIG_DFL;
  int saved_streams_[2] = {-1, -1};  // stdout and stderr while they point at /dev/null
};

}  // namespace fast_llm::testing
