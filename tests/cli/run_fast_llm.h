// Runs the `fast-llm` binary of this build as a user would (a child process with its output in a log file, a time
// limit, the exit status or signal), for the tests that drive the command line: cli_test, the distributed training
// tests.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fast_llm::testing {

namespace fs = std::filesystem;

struct Outcome {
  bool exited = false;  // false: killed by a signal (or by the time limit)
  int status = -1;      // the exit status when `exited`
  std::string output;   // stdout and stderr together
};

// The fast-llm binary of this build: beside this test (both go to the build's bin/, which may have been moved to
// another machine since), else where the build put it.
inline std::string fast_llm_binary() {
  const fs::path beside = fs::read_symlink("/proc/self/exe").parent_path() / "fast-llm";
  return fs::exists(beside) ? beside.string() : std::string(FAST_LLM_BINARY);
}

// Runs the fast-llm binary with `arguments` in `directory`, for at most `limit`; standard output goes to
// `standard_output` when given (e.g. /dev/full), else with standard error into the outcome.
// `environment` adds (or, with no value, removes) variables in the child's environment.
inline Outcome run_fast_llm(const std::vector<std::string>& arguments, const fs::path& directory,
                            std::chrono::seconds limit = std::chrono::seconds(120),
                            const std::optional<fs::path>& standard_output = std::nullopt,
                            const std::map<std::string, std::optional<std::string>>& environment = {}) {
  const fs::path log = directory / "output.log";
  std::string binary = fast_llm_binary();
  const pid_t child = fork();
  if (child == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(standard_output ? open(standard_output->c_str(), O_WRONLY) : fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    if (chdir(directory.c_str()) != 0) _exit(126);
    for (const auto& [name, value] : environment) {
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
    std::vector<char*> argv;
    argv.push_back(binary.data());
    std::vector<std::string> copies = arguments;
    for (auto& argument : copies) argv.push_back(argument.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  Outcome outcome;
  int wait_status = 0;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (waitpid(child, &wait_status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &wait_status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  outcome.exited = WIFEXITED(wait_status);
  outcome.status = outcome.exited ? WEXITSTATUS(wait_status) : -1;
  std::ifstream stream(log);
  std::stringstream text;
  text << stream.rdbuf();
  outcome.output = text.str();
  return outcome;
}

}  // namespace fast_llm::testing
