// read_process_launch: each launcher's variables, which launcher wins when several are present, the store port of
// each, and every incomplete or inconsistent set of variables an Error naming them. The variables come through the
// lookup overload; one test reads the real environment of a forked child.
#include "fast_llm/distributed/launch.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fast_llm/core/error.h"

namespace fast_llm::distributed {
namespace {

using Variables = std::map<std::string, std::string>;

ProcessLaunch read(const Variables& variables) {
  return read_process_launch([&](const std::string& name) -> std::optional<std::string> {
    const auto found = variables.find(name);
    if (found == variables.end()) return std::nullopt;
    return found->second;
  });
}

// The message of the Error reading `variables` throws ("" if none).
std::string error_of(const Variables& variables) {
  try {
    read(variables);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

Variables merged(Variables base, const Variables& changes) {
  for (const auto& [name, value] : changes) base[name] = value;
  return base;
}

const Variables kTorchrun = {{"RANK", "5"},
                             {"WORLD_SIZE", "8"},
                             {"LOCAL_RANK", "1"},
                             {"LOCAL_WORLD_SIZE", "4"},
                             {"MASTER_ADDR", "node-0"},
                             {"MASTER_PORT", "29500"}};
const Variables kSlurm = {{"SLURM_PROCID", "6"},
                          {"SLURM_NTASKS", "8"},
                          {"SLURM_LOCALID", "2"},
                          {"SLURM_NTASKS_PER_NODE", "4"},
                          {"SLURM_NNODES", "2"}};
const Variables kOpenmpi = {{"OMPI_COMM_WORLD_RANK", "3"},
                            {"OMPI_COMM_WORLD_SIZE", "6"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};

TEST(LaunchTest, NoLauncherIsOneProcess) {
  const ProcessLaunch launch = read({{"HOME", "/root"}});
  EXPECT_EQ(launch.launcher, Launcher::none);
  EXPECT_EQ(launch.rank, 0);
  EXPECT_EQ(launch.world_size, 1);
  EXPECT_EQ(launch.local_rank, 0);
  EXPECT_EQ(launch.local_world_size, 1);
  EXPECT_FALSE(launch.master_address);
  EXPECT_FALSE(launch.store_port);
}

TEST(LaunchTest, MasterVariablesAloneAreNoLauncher) {
  const ProcessLaunch launch = read({{"MASTER_ADDR", "node-0"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(launch.launcher, Launcher::none);
  EXPECT_EQ(launch.world_size, 1);
  EXPECT_FALSE(launch.master_address);
}

TEST(LaunchTest, Torchrun) {
  const ProcessLaunch launch = read(kTorchrun);
  EXPECT_EQ(launch.launcher, Launcher::torchrun);
  EXPECT_EQ(launch.rank, 5);
  EXPECT_EQ(launch.world_size, 8);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.local_world_size, 4);
  EXPECT_EQ(launch.master_address, "node-0");
  // torchrun's agent listens on MASTER_PORT itself.
  EXPECT_EQ(launch.store_port, 29501);
}

TEST(LaunchTest, TorchrunOfOneProcessHasNoStore) {
  const ProcessLaunch launch =
      read(merged(kTorchrun, {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}}));
  EXPECT_EQ(launch.launcher, Launcher::torchrun);
  EXPECT_EQ(launch.world_size, 1);
  EXPECT_FALSE(launch.master_address);
  EXPECT_FALSE(launch.store_port);
}

TEST(LaunchTest, SlurmWithTasksPerNode) {
  const ProcessLaunch launch = read(kSlurm);
  EXPECT_EQ(launch.launcher, Launcher::slurm);
  EXPECT_EQ(launch.rank, 6);
  EXPECT_EQ(launch.world_size, 8);
  EXPECT_EQ(launch.local_rank, 2);
  EXPECT_EQ(launch.local_world_size, 4);
  EXPECT_FALSE(launch.master_address);
  EXPECT_FALSE(launch.store_port);
}

TEST(LaunchTest, SlurmLocalSizeFromNodes) {
  Variables variables = merged(kSlurm, {{"SLURM_NTASKS", "12"}, {"SLURM_NNODES", "3"}});
  variables.erase("SLURM_NTASKS_PER_NODE");
  const ProcessLaunch launch = read(variables);
  EXPECT_EQ(launch.world_size, 12);
  EXPECT_EQ(launch.local_world_size, 4);
}

TEST(LaunchTest, SlurmStorePortIsMasterPort) {
  const ProcessLaunch launch = read(merged(kSlurm, {{"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(launch.master_address, "10.1.2.3");
  EXPECT_EQ(launch.store_port, 29500);
}

TEST(LaunchTest, SlurmAllocationShellWithoutTaskIsOneProcess) {
  // salloc sets the job's variables but no SLURM_PROCID: this process is not one of srun's tasks.
  const ProcessLaunch launch = read({{"SLURM_NTASKS", "8"}, {"SLURM_NNODES", "2"}, {"SLURM_JOB_ID", "42"}});
  EXPECT_EQ(launch.launcher, Launcher::none);
  EXPECT_EQ(launch.world_size, 1);
}

TEST(LaunchTest, Openmpi) {
  const ProcessLaunch launch = read(merged(kOpenmpi, {{"MASTER_ADDR", "head"}, {"MASTER_PORT", "4000"}}));
  EXPECT_EQ(launch.launcher, Launcher::openmpi);
  EXPECT_EQ(launch.rank, 3);
  EXPECT_EQ(launch.world_size, 6);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.local_world_size, 2);
  EXPECT_EQ(launch.master_address, "head");
  EXPECT_EQ(launch.store_port, 4000);
  EXPECT_FALSE(read(kOpenmpi).master_address);
}

TEST(LaunchTest, TorchrunWinsOverSlurmAndOpenmpi) {
  // torchrun inside srun: both sets of variables, torchrun's describe this process.
  Variables variables = merged(kSlurm, kTorchrun);
  variables = merged(variables, kOpenmpi);
  const ProcessLaunch launch = read(variables);
  EXPECT_EQ(launch.launcher, Launcher::torchrun);
  EXPECT_EQ(launch.rank, 5);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.store_port, 29501);
}

TEST(LaunchTest, SlurmWinsOverOpenmpi) {
  const ProcessLaunch launch = read(merged(kSlurm, kOpenmpi));
  EXPECT_EQ(launch.launcher, Launcher::slurm);
  EXPECT_EQ(launch.rank, 6);
}

TEST(LaunchTest, IncompleteTorchrunNamesTheMissingVariables) {
  Variables variables = kTorchrun;
  variables.erase("LOCAL_WORLD_SIZE");
  variables.erase("MASTER_PORT");
  const std::string message = error_of(variables);
  EXPECT_NE(message.find("[distributed]"), std::string::npos) << message;
  EXPECT_NE(message.find("torchrun"), std::string::npos) << message;
  EXPECT_NE(message.find("LOCAL_WORLD_SIZE, MASTER_PORT are not set"), std::string::npos) << message;
}

TEST(LaunchTest, OneTorchrunVariableIsAnIncompleteTorchrunLaunch) {
  // Never a guess: RANK alone does not fall back to Slurm's variables, even when they are complete.
  const std::string message = error_of(merged(kSlurm, {{"RANK", "0"}}));
  EXPECT_NE(message.find("torchrun"), std::string::npos) << message;
  EXPECT_NE(message.find("WORLD_SIZE"), std::string::npos) << message;
}

TEST(LaunchTest, RankOutsideTheWorld) {
  const std::string message = error_of(merged(kTorchrun, {{"RANK", "8"}}));
  EXPECT_NE(message.find("RANK=8 is outside the world (WORLD_SIZE=8)"), std::string::npos) << message;
}

TEST(LaunchTest, LocalRankOutsideTheNode) {
  const std::string message = error_of(merged(kOpenmpi, {{"OMPI_COMM_WORLD_LOCAL_RANK", "2"}}));
  EXPECT_NE(message.find("OMPI_COMM_WORLD_LOCAL_RANK=2"), std::string::npos) << message;
  EXPECT_NE(message.find("OMPI_COMM_WORLD_LOCAL_SIZE=2"), std::string::npos) << message;
}

TEST(LaunchTest, LocalSizeThatDoesNotDivideTheWorld) {
  const std::string message = error_of(merged(kTorchrun, {{"LOCAL_WORLD_SIZE", "3"}}));
  EXPECT_NE(message.find("LOCAL_WORLD_SIZE=3 does not divide WORLD_SIZE=8"), std::string::npos) << message;
}

TEST(LaunchTest, NumbersMustParseCompletely) {
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"RANK", "abc"}, {"RANK", "1x"}, {"WORLD_SIZE", ""}, {"MASTER_PORT", "29500.0"}, {"LOCAL_RANK", " 1"}}) {
    const std::string message = error_of(merged(kTorchrun, {{name, value}}));
    EXPECT_NE(message.find(fmt::format("{}='{}' is not an integer", name, value)), std::string::npos)
        << name << "=" << value << ": " << message;
  }
}

TEST(LaunchTest, NumbersOutOfRange) {
  EXPECT_NE(error_of(merged(kTorchrun, {{"WORLD_SIZE", "0"}})).find("WORLD_SIZE=0 is out of range"), std::string::npos);
  EXPECT_NE(error_of(merged(kTorchrun, {{"RANK", "-1"}})).find("RANK=-1 is out of range"), std::string::npos);
  EXPECT_NE(error_of(merged(kTorchrun, {{"MASTER_PORT", "0"}})).find("MASTER_PORT=0 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of(merged(kTorchrun, {{"RANK", "99999999999"}})).find("RANK=99999999999 is out of range"),
            std::string::npos);
  // The last port leaves none for our store under torchrun, but is fine where the store takes MASTER_PORT itself.
  EXPECT_NE(error_of(merged(kTorchrun, {{"MASTER_PORT", "65535"}})).find("MASTER_PORT=65535 is out of range"),
            std::string::npos);
  EXPECT_EQ(read(merged(kSlurm, {{"MASTER_ADDR", "a"}, {"MASTER_PORT", "65535"}})).store_port, 65535);
}

TEST(LaunchTest, EmptyMasterAddress) {
  const std::string message = error_of(merged(kTorchrun, {{"MASTER_ADDR", ""}}));
  EXPECT_NE(message.find("MASTER_ADDR is empty"), std::string::npos) << message;
}

TEST(LaunchTest, HalfOfTheMasterVariables) {
  const std::string message = error_of(merged(kSlurm, {{"MASTER_ADDR", "node-0"}}));
  EXPECT_NE(message.find("slurm"), std::string::npos) << message;
  EXPECT_NE(message.find("MASTER_PORT is not set (set: MASTER_ADDR)"), std::string::npos) << message;
}

TEST(LaunchTest, SlurmWithoutTasksPerNode) {
  Variables variables = kSlurm;
  variables.erase("SLURM_NTASKS_PER_NODE");
  variables.erase("SLURM_NNODES");
  const std::string message = error_of(variables);
  EXPECT_NE(message.find("SLURM_NTASKS_PER_NODE and SLURM_NNODES are both unset"), std::string::npos) << message;
}

TEST(LaunchTest, SlurmTasksSpreadUnevenly) {
  Variables variables = merged(kSlurm, {{"SLURM_NTASKS", "7"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}});
  variables.erase("SLURM_NTASKS_PER_NODE");
  const std::string message = error_of(variables);
  EXPECT_NE(message.find("SLURM_NTASKS=7 tasks do not spread evenly over SLURM_NNODES=2 nodes"), std::string::npos)
      << message;
}

TEST(LaunchTest, IncompleteSlurmAndOpenmpi) {
  Variables slurm = kSlurm;
  slurm.erase("SLURM_LOCALID");
  EXPECT_NE(error_of(slurm).find("incomplete slurm launch: SLURM_LOCALID is not set"), std::string::npos)
      << error_of(slurm);
  const std::string message = error_of({{"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_NE(message.find("incomplete openmpi launch: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_LOCAL_RANK, "
                         "OMPI_COMM_WORLD_LOCAL_SIZE are not set (set: OMPI_COMM_WORLD_SIZE)"),
            std::string::npos)
      << message;
}

TEST(LaunchTest, LauncherNames) {
  EXPECT_STREQ(launcher_name(Launcher::none), "none");
  EXPECT_STREQ(launcher_name(Launcher::torchrun), "torchrun");
  EXPECT_STREQ(launcher_name(Launcher::slurm), "slurm");
  EXPECT_STREQ(launcher_name(Launcher::openmpi), "openmpi");
}

TEST(LaunchTest, ReadsTheProcessEnvironment) {
  // In a child, so that this process's environment stays as it was.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (const auto& [name, value] : kTorchrun) ::setenv(name.c_str(), value.c_str(), 1);
    int status = 1;
    try {
      const ProcessLaunch launch = read_process_launch();
      status = launch.launcher == Launcher::torchrun && launch.rank == 5 && launch.store_port == 29501 ? 0 : 2;
    } catch (...) {
      status = 3;
    }
    ::_exit(status);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace fast_llm::distributed
