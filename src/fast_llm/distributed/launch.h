// Where this process sits in a multi-process run, read from what its launcher set in the environment.
//
//   torchrun   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   Slurm      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE or SLURM_NNODES (local size),
//              MASTER_ADDR / MASTER_PORT from the job script
//   OpenMPI    OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
//   none       world size 1, rank 0
// torchrun's variables win when several launchers' are present (torchrun inside srun sets both). A set of variables
// that is incomplete or inconsistent (a rank outside the world, a local size that does not divide the world, a port
// that is not a number) is an Error naming the variables, never a guess.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace fast_llm::distributed {

enum class Launcher { none, torchrun, slurm, openmpi };

struct ProcessLaunch {
  Launcher launcher = Launcher::none;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  // Where rank 0 serves the rendezvous store: MASTER_ADDR, and our port (MASTER_PORT + 1 under torchrun, whose agent
  // already listens on MASTER_PORT; MASTER_PORT otherwise). Unset when the world is one process, and under Slurm or
  // OpenMPI when neither variable is set (a file store needs no address); torchrun always sets both.
  std::optional<std::string> master_address;
  std::optional<int> store_port;
};

// The launch of this process, from the environment.
ProcessLaunch read_process_launch();
// The same, reading variables through `lookup` (nullopt: not set) instead of the process environment: tests.
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string& name)>;
ProcessLaunch read_process_launch(const EnvironmentLookup& lookup);

const char* launcher_name(Launcher launcher);

}  // namespace fast_llm::distributed
