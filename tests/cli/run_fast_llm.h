// Runs the `fast-llm` binary of this build (or another program) as a user would: a child process with its output in
// a log file, a time limit, the exit status or signal; several at once for the distributed tests. For the tests that
// drive the command line: cli_test and the distributed training tests.
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

using Environment = std::map<std::string, std::optional<std::string>>;

// A program started in `directory` with `arguments` (argv[0] is the program), its output in the file `log`
// (standard output to `standard_output` instead when given, e.g. /dev/full), and `environment` added to (or, for
// variables without a value, removed from) this process's.
class ChildProcess {
 public:
  ChildProcess(const std::string& program, const std::vector<std::string>& arguments, const fs::path& directory,
               const fs::path& log, const Environment& environment = {},
               const std::optional<fs::path>& standard_output = std::nullopt)
      : log_(log) {
    std::string binary = program;
    pid_ = fork();
    if (pid_ != 0) return;
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
    std::vector<std::string> copies = arguments;
    std::vector<char*> argv;
    for (auto& argument : copies) argv.push_back(argument.data());
    argv.push_back(nullptr);
    execvp(binary.c_str(), argv.data());
    _exit(127);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    if (!finished_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  void signal(int number) const { kill(pid_, number); }
  // The output so far.
  std::string output() const {
    std::ifstream stream(log_);
    std::stringstream text;
    text << stream.rdbuf();
    return text.str();
  }
  // Waits for the process to end, for at most `limit` (then kills it: `exited` false).
  Outcome wait(std::chrono::seconds limit) {
    int wait_status = 0;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (waitpid(pid_, &wait_status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &wait_status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    finished_ = true;
    Outcome outcome;
    outcome.exited = WIFEXITED(wait_status);
    outcome.status = outcome.exited ? WEXITSTATUS(wait_status) : -1;
    outcome.output = output();
    return outcome;
  }

 private:
  fs::path log_;
  pid_t pid_ = -1;
  bool finished_ = false;
};

// Runs the fast-llm binary with `arguments` in `directory`, for at most `limit`, its output (standard output and
// error, or standard error only with `standard_output`) in `directory`/output.log and in the outcome.
inline Outcome run_fast_llm(const std::vector<std::string>& arguments, const fs::path& directory,
                            std::chrono::seconds limit = std::chrono::seconds(120),
                            const std::optional<fs::path>& standard_output = std::nullopt,
                            const Environment& environment = {}) {
  std::vector<std::string> argv{fast_llm_binary()};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  ChildProcess child(argv.front(), argv, directory, directory / "output.log", environment, standard_output);
  return child.wait(limit);
}

}  // namespace fast_llm::testing
