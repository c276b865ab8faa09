// The single-machine launcher: fork and exec of this program per rank, and a supervisor loop over waitpid.
#include "fast_llm/cli/local_launcher.h"

#include <algorithm>
#include <vector>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <thread>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"

namespace fast_llm::cli {
namespace {

constexpr std::string_view kComponent = "launcher";

// Whether a TCP port of 127.0.0.1 can be bound now.
bool port_free(int port) {
  const int socket_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (socket_fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(uint16_t(port));
  const bool bound = ::bind(socket_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(socket_fd);
  return bound;
}

// A port the system gives out now, whose successor is free too (rank 0 serves the rendezvous store on MASTER_PORT + 1
// under torchrun's variables, distributed/launch.h).
int free_port_pair() {
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int socket_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (socket_fd < 0) break;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof(address);
    int port = -1;
    if (::bind(socket_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
        ::getsockname(socket_fd, reinterpret_cast<sockaddr*>(&address), &length) == 0)
      port = ntohs(address.sin_port);
    ::close(socket_fd);
    if (port > 0 && port < 65535 && port_free(port) && port_free(port + 1)) return port;
  }
  throw Error(kComponent, "found no free pair of TCP ports on 127.0.0.1 for the processes to meet at");
}

volatile sig_atomic_t forwarded_signal = 0;
void remember_signal(int signal_number) { forwarded_signal = signal_number; }

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("ended with wait status {}", status);
}

}  // namespace

int run_local_processes(const LocalLaunch& launch) {
  FLM_CHECK(launch.processes >= 1, kComponent, "--nproc-per-node must be at least 1, got {}", launch.processes);
  const int port = free_port_pair();
  log_main("Starting {} processes on this machine (MASTER_ADDR=127.0.0.1, MASTER_PORT={})", launch.processes, port);

  std::vector<std::string> arguments{"fast-llm"};
  arguments.insert(arguments.end(), launch.arguments.begin(), launch.arguments.end());
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);

  struct sigaction action{};
  action.sa_handler = remember_signal;
  sigemptyset(&action.sa_mask);
  struct sigaction previous_interrupt{}, previous_terminate{};
  ::sigaction(SIGINT, &action, &previous_interrupt);
  ::sigaction(SIGTERM, &action, &previous_terminate);

  std::map<pid_t, int> running;  // pid -> rank
  for (int rank = 0; rank < launch.processes; ++rank) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (const auto& [child, child_rank] : running) ::kill(child, SIGKILL);
      throw Error(kComponent, fmt::format("cannot start process {}: {}", rank, std::strerror(errno)));
    }
    if (pid == 0) {
      ::sigaction(SIGINT, &previous_interrupt, nullptr);
      ::sigaction(SIGTERM, &previous_terminate, nullptr);
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(launch.processes).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(launch.processes).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::execv("/proc/self/exe", argv.data());
      fmt::print(stderr, "[launcher] rank {}: cannot run /proc/self/exe: {}\n", rank, std::strerror(errno));
      ::_exit(127);
    }
    running.emplace(pid, rank);
  }

  std::optional<std::string> failure;
  int exit_code = 0;
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  auto stop_all = [&](int signal_number) {
    for (const auto& [pid, rank] : running) ::kill(pid, signal_number);
  };
  while (!running.empty()) {
    if (forwarded_signal != 0) {
      stop_all(forwarded_signal);
      forwarded_signal = 0;
      if (!kill_at) kill_at = std::chrono::steady_clock::now() + launch.grace;
      exit_code = exit_code == 0 ? 1 : exit_code;
    }
    if (kill_at && std::chrono::steady_clock::now() >= *kill_at) stop_all(SIGKILL);
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, kill_at ? WNOHANG : 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;  // no children left
    }
    if (pid == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const auto child = running.find(pid);
    if (child == running.end()) continue;
    const int rank = child->second;
    running.erase(child);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (failure) continue;  // the others end because they were stopped
    // A rank that dies takes its peers down at their next collective ("connection reset by peer"), and waitpid may
    // hand over such a peer first. Ranks that end within a moment of the first failure are collected with it, and one
    // killed by a signal (the likely cause) is named first.
    std::vector<std::pair<int, int>> failed{{rank, status}};
    const auto settled = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (!running.empty() && std::chrono::steady_clock::now() < settled) {
      int other_status = 0;
      const pid_t other = ::waitpid(-1, &other_status, WNOHANG);
      if (other <= 0) {
        if (other < 0 && errno != EINTR) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      const auto other_child = running.find(other);
      if (other_child == running.end()) continue;
      if (!WIFEXITED(other_status) || WEXITSTATUS(other_status) != 0)
        failed.emplace_back(other_child->second, other_status);
      running.erase(other_child);
    }
    std::stable_partition(failed.begin(), failed.end(),
                          [](const std::pair<int, int>& entry) { return WIFSIGNALED(entry.second); });
    std::vector<std::string> descriptions;
    for (const auto& [failed_rank, failed_status] : failed)
      descriptions.push_back(fmt::format("rank {} {}", failed_rank, describe_status(failed_status)));
    failure = fmt::format("{}", fmt::join(descriptions, "; then "));
    exit_code = WIFEXITED(failed.front().second) ? WEXITSTATUS(failed.front().second) : 1;
    if (!running.empty()) {
      log_error("[launcher] {}: stopping the other {} processes", *failure, running.size());
      stop_all(SIGTERM);
      kill_at = std::chrono::steady_clock::now() + launch.grace;
    }
  }
  ::sigaction(SIGINT, &previous_interrupt, nullptr);
  ::sigaction(SIGTERM, &previous_terminate, nullptr);
  if (failure) log_error("[launcher] the job failed: {}", *failure);
  return exit_code;
}

}  // namespace fast_llm::cli
