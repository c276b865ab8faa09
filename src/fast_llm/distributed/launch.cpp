// Reading this process's place in the run from its launcher's environment variables (the table is in launch.h).
//
// Which launcher: torchrun if any of its four rank variables is set, else Slurm if SLURM_PROCID is (the variable only
// a task started by srun or in a batch step has; an salloc shell has job variables but no task, and is one process),
// else OpenMPI if any OMPI_COMM_WORLD_* rank variable is, else none. Once chosen, every variable that launcher always
// sets must be present and every number must parse completely; a missing or invalid one is an Error naming it. The
// environment is read through a lookup function so that tests give their own variables.
#include "fast_llm/distributed/launch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <vector>

#include "fast_llm/core/error.h"

namespace fast_llm::distributed {
namespace {

constexpr const char* kComponent = "distributed";

// The variables of one launcher, read through `lookup`, with errors that name the launcher and the variables.
class LaunchVariables {
 public:
  LaunchVariables(const EnvironmentLookup& lookup, Launcher launcher) : lookup_(lookup), launcher_(launcher) {}

  std::optional<std::string> get(const char* name) const { return lookup_(name); }
  bool is_set(const char* name) const { return get(name).has_value(); }

  // Every one of `names` is set, or an Error names those that are not (and those that are, to show the mix).
  void require(std::initializer_list<const char*> names) const {
    std::vector<std::string> missing, present;
    for (const char* name : names) (is_set(name) ? present : missing).emplace_back(name);
    FLM_CHECK(missing.empty(), kComponent, "incomplete {} launch: {} {} not set{}", launcher_name(launcher_),
              fmt::join(missing, ", "), missing.size() == 1 ? "is" : "are",
              present.empty() ? "" : fmt::format(" (set: {})", fmt::join(present, ", ")));
  }

  // The value of `name` (which must be set) as an integer in [minimum, maximum].
  int integer(const char* name, int minimum, int maximum = std::numeric_limits<int>::max()) const {
    const std::string text = *get(name);
    long long value = 0;
    const char* end = text.data() + text.size();
    const auto [stop, error] = std::from_chars(text.data(), end, value);
    FLM_CHECK(!text.empty() && error == std::errc() && stop == end, kComponent, "{} launch: {}='{}' is not an integer",
              launcher_name(launcher_), name, text);
    FLM_CHECK(value >= minimum && value <= maximum, kComponent, "{} launch: {}={} is out of range [{}, {}]",
              launcher_name(launcher_), name, value, minimum, maximum);
    return static_cast<int>(value);
  }

  // `value` holds, or an Error says `what` with the launcher's name.
  void check(bool value, const std::string& what) const {
    FLM_CHECK(value, kComponent, "{} launch: {}", launcher_name(launcher_), what);
  }

 private:
  const EnvironmentLookup& lookup_;
  Launcher launcher_;
};

// The names of the four layout variables of one launcher, for the consistency messages.
struct LayoutNames {
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
};

// Reads and cross-checks rank, world size, local rank and local size (the local size already read by the caller).
void read_layout(const LaunchVariables& variables, const LayoutNames& names, int local_world_size,
                 ProcessLaunch& launch) {
  launch.world_size = variables.integer(names.world_size, 1);
  launch.rank = variables.integer(names.rank, 0);
  launch.local_rank = variables.integer(names.local_rank, 0);
  launch.local_world_size = local_world_size;
  variables.check(launch.rank < launch.world_size, fmt::format("{}={} is outside the world ({}={})", names.rank,
                                                               launch.rank, names.world_size, launch.world_size));
  variables.check(launch.local_rank < launch.local_world_size,
                  fmt::format("{}={} is outside the node ({}={})", names.local_rank, launch.local_rank,
                              names.local_world_size, launch.local_world_size));
  variables.check(launch.world_size % launch.local_world_size == 0,
                  fmt::format("{}={} does not divide {}={}", names.local_world_size, launch.local_world_size,
                              names.world_size, launch.world_size));
}

// MASTER_ADDR and the store's port from MASTER_PORT (plus `port_offset`), both of which must then be set.
void read_master(const LaunchVariables& variables, int port_offset, ProcessLaunch& launch) {
  variables.require({"MASTER_ADDR", "MASTER_PORT"});
  std::string address = *variables.get("MASTER_ADDR");
  variables.check(!address.empty(), "MASTER_ADDR is empty");
  const int port = variables.integer("MASTER_PORT", 1, 65535 - port_offset);
  launch.master_address = std::move(address);
  launch.store_port = port + port_offset;
}

ProcessLaunch read_torchrun(const LaunchVariables& variables) {
  variables.require({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"});
  ProcessLaunch launch{.launcher = Launcher::torchrun};
  read_layout(variables, {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
              variables.integer("LOCAL_WORLD_SIZE", 1), launch);
  // torchrun's agent serves its own store on MASTER_PORT; ours takes the next port.
  read_master(variables, 1, launch);
  return launch;
}

ProcessLaunch read_slurm(const LaunchVariables& variables) {
  variables.require({"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"});
  ProcessLaunch launch{.launcher = Launcher::slurm};
  // The tasks of one node: SLURM_NTASKS_PER_NODE when the job asked for it, otherwise the tasks spread evenly over
  // the nodes (an uneven spread has no single local size).
  int local_world_size = 1;
  const bool tasks_per_node_set = variables.is_set("SLURM_NTASKS_PER_NODE");
  if (tasks_per_node_set) {
    local_world_size = variables.integer("SLURM_NTASKS_PER_NODE", 1);
  } else {
    variables.check(variables.is_set("SLURM_NNODES"),
                    "SLURM_NTASKS_PER_NODE and SLURM_NNODES are both unset: the tasks per node are unknown");
    const int nodes = variables.integer("SLURM_NNODES", 1);
    const int tasks = variables.integer("SLURM_NTASKS", 1);
    variables.check(tasks % nodes == 0,
                    fmt::format("SLURM_NTASKS={} tasks do not spread evenly over SLURM_NNODES={} nodes (ask for "
                                "--ntasks-per-node)",
                                tasks, nodes));
    local_world_size = tasks / nodes;
  }
  read_layout(variables,
              {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
               tasks_per_node_set ? "SLURM_NTASKS_PER_NODE" : "SLURM_NTASKS/SLURM_NNODES"},
              local_world_size, launch);
  // MASTER_ADDR / MASTER_PORT are the job script's: both or neither (a file store needs neither).
  if (variables.is_set("MASTER_ADDR") || variables.is_set("MASTER_PORT")) read_master(variables, 0, launch);
  return launch;
}

ProcessLaunch read_openmpi(const LaunchVariables& variables) {
  variables.require(
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"});
  ProcessLaunch launch{.launcher = Launcher::openmpi};
  read_layout(
      variables,
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      variables.integer("OMPI_COMM_WORLD_LOCAL_SIZE", 1), launch);
  if (variables.is_set("MASTER_ADDR") || variables.is_set("MASTER_PORT")) read_master(variables, 0, launch);
  return launch;
}

bool any_set(const EnvironmentLookup& lookup, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (lookup(name)) return true;
  }
  return false;
}

}  // namespace

ProcessLaunch read_process_launch(const EnvironmentLookup& lookup) {
  ProcessLaunch launch;
  if (any_set(lookup, {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"})) {
    launch = read_torchrun(LaunchVariables(lookup, Launcher::torchrun));
  } else if (any_set(lookup, {"SLURM_PROCID"})) {
    launch = read_slurm(LaunchVariables(lookup, Launcher::slurm));
  } else if (any_set(lookup, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                              "OMPI_COMM_WORLD_LOCAL_SIZE"})) {
    launch = read_openmpi(LaunchVariables(lookup, Launcher::openmpi));
  }
  // One process needs no rendezvous.
  if (launch.world_size == 1) {
    launch.master_address.reset();
    launch.store_port.reset();
  }
  return launch;
}

ProcessLaunch read_process_launch() {
  return read_process_launch([](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

const char* launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::none:
      return "none";
    case Launcher::torchrun:
      return "torchrun";
    case Launcher::slurm:
      return "slurm";
    case Launcher::openmpi:
      return "openmpi";
  }
  FLM_ASSERT(false, "unknown launcher {}", static_cast<int>(launcher));
  return "";
}

}  // namespace fast_llm::distributed
