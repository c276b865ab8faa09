// Multi-process runs started the ways users start them (torchrun's variables, Slurm's, mpirun, the file rendezvous),
// and what happens when a launch is wrong or a rank dies: every case ends with an exit status and a message that says
// what happened, within the configured timeout, never a hang.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../cli/run_fast_llm.h"
#include "distributed_test_util.h"

namespace fast_llm {
namespace {

namespace fs = std::filesystem;
using testing::ChildProcess;
using testing::Environment;
using testing::Outcome;

constexpr const char* kConfig = R"(
training: {train_iters: 2, logs: {interval: 1}, checkpoint: {interval: 2}}
data:
  datasets: {training: {type: random}}
  micro_batch_size: 16
optimizer: {learning_rate: {base: 1.0e-3}}
model:
  base_model:
    embeddings: {vocab_size: 64}
    decoder:
      block:
        mixer: {type: attention, heads: 2, head_groups: 1, head_size: 8}
        mlp: {intermediate_size: 32, gated: true}
        normalization: {type: rms_norm}
      num_blocks: 1
    hidden_size: 16
  distributed: {compute_dtype: fp32, use_cuda: false, timeout: 10}
)";

// A socket listening on a port of 127.0.0.1 that the system chose.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(fd_, 1), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
  }
  ~Listener() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A port that is free now, as is the next one (torchrun's variables put our store on MASTER_PORT + 1).
int free_port_pair() {
  for (int attempt = 0; attempt < 32; ++attempt) {
    int port = 0;
    {
      Listener listener;
      port = listener.port();
    }
    const int next = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(uint16_t(port + 1));
    const bool free = port < 65535 && bind(next, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    close(next);
    if (free) return port;
  }
  ADD_FAILURE() << "no free pair of ports";
  return 0;
}

// What every process of these tests runs with: no launcher's variables but those a test gives, one thread each.
Environment clean_environment() {
  Environment environment;
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                           "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_NNODES",
                           "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                           "OMPI_COMM_WORLD_LOCAL_SIZE"})
    environment[name] = std::nullopt;
  environment["OMP_NUM_THREADS"] = "1";
  return environment;
}

Environment torchrun_environment(int rank, int world_size, int port) {
  Environment environment = clean_environment();
  environment["RANK"] = std::to_string(rank);
  environment["WORLD_SIZE"] = std::to_string(world_size);
  environment["LOCAL_RANK"] = std::to_string(rank);
  environment["LOCAL_WORLD_SIZE"] = std::to_string(world_size);
  environment["MASTER_ADDR"] = "127.0.0.1";
  environment["MASTER_PORT"] = std::to_string(port);
  return environment;
}

class LaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = testing::fresh_test_folder("fast_llm_launch_test");
    std::ofstream(directory_ / "config.yaml") << kConfig;
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(directory_);
  }

  std::vector<std::string> train_arguments(const std::vector<std::string>& overrides = {}) const {
    std::vector<std::string> arguments{testing::fast_llm_binary(), "train",
                                       "gpt",
                                       "-c",
                                       (directory_ / "config.yaml").string(),
                                       "run.experiment_dir=" + (directory_ / "experiment").string()};
    arguments.insert(arguments.end(), overrides.begin(), overrides.end());
    return arguments;
  }

  std::unique_ptr<ChildProcess> start(int rank, const Environment& environment,
                                      const std::vector<std::string>& overrides = {}) const {
    return std::make_unique<ChildProcess>(testing::fast_llm_binary(), train_arguments(overrides), directory_,
                                          directory_ / ("rank_" + std::to_string(rank) + ".log"), environment);
  }

  // Both processes trained and the checkpoint of step 2 holds both ranks' shards.
  void expect_trained(std::vector<std::unique_ptr<ChildProcess>>& processes) const {
    for (size_t rank = 0; rank < processes.size(); ++rank) {
      const Outcome outcome = processes[rank]->wait(std::chrono::seconds(120));
      EXPECT_TRUE(outcome.exited && outcome.status == 0) << "rank " << rank << ":\n" << outcome.output;
    }
    const fs::path checkpoint = directory_ / "experiment" / "checkpoint" / "2";
    EXPECT_TRUE(fs::exists(checkpoint / "ok"));
    EXPECT_TRUE(fs::exists(checkpoint / "rank_0.safetensors"));
    EXPECT_TRUE(fs::exists(checkpoint / "rank_1.safetensors"));
  }

  fs::path directory_;
};

TEST_F(LaunchTest, TorchrunVariables) {
  const int port = free_port_pair();
  std::vector<std::unique_ptr<ChildProcess>> processes;
  for (int rank = 0; rank < 2; ++rank) processes.push_back(start(rank, torchrun_environment(rank, 2, port)));
  expect_trained(processes);
}

TEST_F(LaunchTest, SlurmVariables) {
  const int port = free_port_pair();
  std::vector<std::unique_ptr<ChildProcess>> processes;
  for (int rank = 0; rank < 2; ++rank) {
    Environment environment = clean_environment();
    environment["SLURM_PROCID"] = std::to_string(rank);
    environment["SLURM_LOCALID"] = std::to_string(rank);
    environment["SLURM_NTASKS"] = "2";
    environment["SLURM_NNODES"] = "1";
    environment["MASTER_ADDR"] = "127.0.0.1";
    environment["MASTER_PORT"] = std::to_string(port);
    processes.push_back(start(rank, environment));
  }
  expect_trained(processes);
}

TEST_F(LaunchTest, FileRendezvous) {
  std::vector<std::unique_ptr<ChildProcess>> processes;
  for (int rank = 0; rank < 2; ++rank) {
    Environment environment = clean_environment();
    environment["RANK"] = std::to_string(rank);
    environment["WORLD_SIZE"] = "2";
    environment["LOCAL_RANK"] = std::to_string(rank);
    environment["LOCAL_WORLD_SIZE"] = "2";
    // torchrun always sets both; the file rendezvous does not use them.
    environment["MASTER_ADDR"] = "127.0.0.1";
    environment["MASTER_PORT"] = "1";
    processes.push_back(start(rank, environment,
                              {"model.distributed.rendezvous=file",
                               "model.distributed.rendezvous_directory=" + (directory_ / "rendezvous").string()}));
  }
  expect_trained(processes);
}

TEST_F(LaunchTest, Mpirun) {
  if (!fs::exists("/usr/bin/mpirun")) GTEST_SKIP() << "no mpirun (Debian's openmpi-bin)";
  std::vector<std::string> arguments{"/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
                                     "-x", "OMP_NUM_THREADS=1"};
  for (const std::string& argument : train_arguments()) arguments.push_back(argument);
  ChildProcess mpirun("/usr/bin/mpirun", arguments, directory_, directory_ / "mpirun.log", clean_environment());
  const Outcome outcome = mpirun.wait(std::chrono::seconds(180));
  EXPECT_TRUE(outcome.exited && outcome.status == 0) << outcome.output;
  EXPECT_NE(outcome.output.find("2 processes joined"), std::string::npos) << outcome.output;
  EXPECT_TRUE(fs::exists(directory_ / "experiment" / "checkpoint" / "2" / "rank_1.safetensors"));
}

TEST_F(LaunchTest, MissingMasterAddressIsRefused) {
  Environment environment = torchrun_environment(0, 2, free_port_pair());
  environment["MASTER_ADDR"] = std::nullopt;
  const Outcome outcome = start(0, environment)->wait(std::chrono::seconds(60));
  EXPECT_TRUE(outcome.exited && outcome.status == 1) << outcome.output;
  EXPECT_NE(outcome.output.find("MASTER_ADDR"), std::string::npos) << outcome.output;
  EXPECT_EQ(outcome.output.find("[internal]"), std::string::npos) << outcome.output;
}

TEST_F(LaunchTest, StorePortInUseIsRefused) {
  // Under torchrun's variables our store listens on MASTER_PORT + 1: occupy it.
  Listener occupied;
  const Outcome outcome =
      start(0, torchrun_environment(0, 2, occupied.port() - 1))->wait(std::chrono::seconds(60));
  EXPECT_TRUE(outcome.exited && outcome.status == 1) << outcome.output;
  EXPECT_NE(outcome.output.find(std::to_string(occupied.port())), std::string::npos) << outcome.output;
  EXPECT_EQ(outcome.output.find("[internal]"), std::string::npos) << outcome.output;
}

TEST_F(LaunchTest, MissingRankTimesOut) {
  // WORLD_SIZE 2 but one process: rank 0 waits for rank 1 until model.distributed.timeout (3 s here).
  const auto begin = std::chrono::steady_clock::now();
  const Outcome outcome = start(0, torchrun_environment(0, 2, free_port_pair()), {"model.distributed.timeout=3"})
                              ->wait(std::chrono::seconds(90));
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_TRUE(outcome.exited && outcome.status == 1) << outcome.output;
  EXPECT_LT(seconds, 60.0) << outcome.output;
  EXPECT_NE(outcome.output.find("timed out"), std::string::npos) << outcome.output;
  EXPECT_EQ(outcome.output.find("[internal]"), std::string::npos) << outcome.output;
}

TEST_F(LaunchTest, DeadRankEndsTheOthers) {
  const int port = free_port_pair();
  const std::vector<std::string> long_run{"training.train_iters=1000000", "training.checkpoint.interval=null",
                                          "training.logs.interval=1"};
  std::unique_ptr<ChildProcess> survivor = start(0, torchrun_environment(0, 2, port), long_run);
  std::unique_ptr<ChildProcess> victim = start(1, torchrun_environment(1, 2, port), long_run);
  // Kill rank 1 once training has begun.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (survivor->output().find("training @ iteration") == std::string::npos &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_NE(survivor->output().find("training @ iteration"), std::string::npos) << survivor->output();
  victim->signal(SIGKILL);
  victim->wait(std::chrono::seconds(10));
  const auto begin = std::chrono::steady_clock::now();
  const Outcome outcome = survivor->wait(std::chrono::seconds(90));
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_TRUE(outcome.exited && outcome.status == 1) << outcome.output;
  EXPECT_LT(seconds, 60.0);
  // The error names the operation and the group it failed in.
  EXPECT_NE(outcome.output.find("[distributed]"), std::string::npos) << outcome.output;
  EXPECT_EQ(outcome.output.find("[internal]"), std::string::npos) << outcome.output;
}

TEST_F(LaunchTest, LocalLauncherStopsTheJobWhenARankDies) {
  std::vector<std::string> arguments = train_arguments({"training.train_iters=1000000",
                                                        "training.checkpoint.interval=null"});
  arguments.insert(arguments.begin() + 3, {"--nproc-per-node", "2"});
  ChildProcess launcher(testing::fast_llm_binary(), arguments, directory_, directory_ / "launcher.log",
                        clean_environment());
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (launcher.output().find("training @ iteration") == std::string::npos &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Rank 1 is the launcher's youngest child that runs fast-llm: find it among the processes whose parent is the
  // launcher.
  pid_t rank_1 = -1;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::ifstream status(entry.path() / "status");
    std::string line;
    pid_t parent = -1;
    while (std::getline(status, line))
      if (line.starts_with("PPid:")) parent = std::stoi(line.substr(5));
    if (parent != launcher.pid()) continue;
    std::ifstream environ(entry.path() / "environ");
    std::string variables((std::istreambuf_iterator<char>(environ)), std::istreambuf_iterator<char>());
    if (variables.find(std::string("RANK=1") + '\0') != std::string::npos &&
        variables.find(std::string("LOCAL_RANK=1") + '\0') != std::string::npos)
      rank_1 = std::stoi(entry.path().filename().string());
  }
  ASSERT_GT(rank_1, 0) << launcher.output();
  kill(rank_1, SIGKILL);
  const Outcome outcome = launcher.wait(std::chrono::seconds(90));
  EXPECT_TRUE(outcome.exited && outcome.status != 0) << outcome.output;
  EXPECT_NE(outcome.output.find("rank 1 was killed by signal 9"), std::string::npos) << outcome.output;
}

}  // namespace
}  // namespace fast_llm
