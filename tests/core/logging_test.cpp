// Log lines that cannot be written: standard error on a full disk (/dev/full) makes info and warning lines, and the
// progress line, throw a fast_llm::Error naming standard error; error lines are dropped without throwing (they report
// a failure that is already ending the program, or come from destructors).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"

namespace fast_llm {
namespace {

// Standard error goes to `path` while this lives.
class StandardErrorTo {
 public:
  explicit StandardErrorTo(const char* path) {
    std::fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    const int descriptor = ::open(path, O_WRONLY | O_CLOEXEC);
    EXPECT_GE(descriptor, 0) << path;
    ::dup2(descriptor, STDERR_FILENO);
    ::close(descriptor);
  }
  ~StandardErrorTo() {
    std::clearerr(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
  }

 private:
  int saved_ = -1;
};

std::string message_of(void (*action)()) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "no fast_llm::Error";
}

TEST(Logging, ALineThatCannotBeWrittenIsAnErrorNamingStandardError) {
  std::string info, warning, progress;
  {
    StandardErrorTo full("/dev/full");
    info = message_of([] { log_main("an info line"); });
    warning = message_of([] { log_warning("a warning"); });
    progress = message_of([] { write_to_terminal("\rstep 1/2"); });
    EXPECT_NO_THROW(log_error("an error line, dropped"));
  }
  for (const std::string& message : {info, warning, progress})
    EXPECT_EQ(message.rfind("[log] cannot write to standard error (No space left on device)", 0), 0u) << message;
  // Writable again once standard error is.
  EXPECT_NO_THROW(log_main("written"));
}

}  // namespace
}  // namespace fast_llm
