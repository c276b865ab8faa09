// Running a test body in several forked processes (the ranks of a store test), bounded in time.
//
// Each child runs `body(index)` and exits 0, or prints what it threw and exits 1; a REQUIRE that fails throws.
// The parent waits for all of them for at most `limit` and kills those still running then, so a broken store makes
// the test fail, never hang. Children must not touch the parent's stores (a TCP server's thread does not survive
// fork): each makes its own.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

// A check inside a child process: throws, which ends the child with its message.
#define FLM_REQUIRE(condition, ...)                                                                       \
  do {                                                                                                    \
    if (!(condition))                                                                                     \
      throw std::runtime_error(                                                                           \
          fmt::format("{}:{}: {} failed: {}", __FILE__, __LINE__, #condition, fmt::format(__VA_ARGS__))); \
  } while (0)

namespace fast_llm::distributed::testing {

inline void run_processes(int count, const std::function<void(int index)>& body,
                          std::chrono::seconds limit = std::chrono::seconds(180)) {
  std::vector<pid_t> children;
  for (int index = 0; index < count; ++index) {
    std::fflush(nullptr);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0) << "fork failed";
    if (child == 0) {
      int status = 0;
      try {
        body(index);
      } catch (const std::exception& error) {
        std::fprintf(stderr, "process %d: %s\n", index, error.what());
        status = 1;
      }
      std::fflush(nullptr);
      ::_exit(status);
    }
    children.push_back(child);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<bool> done(children.size(), false);
  size_t remaining = children.size();
  while (remaining > 0) {
    for (size_t index = 0; index < children.size(); ++index) {
      if (done[index]) continue;
      int status = 0;
      const pid_t result = ::waitpid(children[index], &status, WNOHANG);
      if (result == 0) continue;
      done[index] = true;
      --remaining;
      EXPECT_EQ(result, children[index]);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "process " << index << " failed";
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t index = 0; index < children.size(); ++index) {
        if (done[index]) continue;
        ::kill(children[index], SIGKILL);
        ::waitpid(children[index], nullptr, 0);
        ADD_FAILURE() << "process " << index << " still ran after " << limit.count() << " s";
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace fast_llm::distributed::testing
