// Field list, environment defaults and layout checks of the distributed config.
#include "fast_llm/engine/distributed/config.h"

#include <fmt/format.h>

#include "fast_llm/core/error.h"
#include "fast_llm/distributed/launch.h"


namespace fast_llm::engine {

using config::Hint;
using config::Visitor;
namespace check = config::check;

void DistributedConfig::visit(Visitor& v) {
  v(tensor_parallel, "tensor_parallel", "Size of the tensor-parallel group.", Hint::performance, check::gt(0));
  v(pipeline_parallel, "pipeline_parallel",
    "Number of pipeline ranks: stage s of the model runs on pipeline rank s % pipeline_parallel.", Hint::performance,
    check::gt(0));
  v(sequence_tensor_parallel, "sequence_tensor_parallel",
    "Split the sequence over the tensor-parallel group outside the tensor-parallel layers (ignored without tensor "
    "parallelism).",
    Hint::performance);
  v(sequence_data_parallel, "sequence_data_parallel",
    "Split each sequence over this many data-parallel ranks; must divide the data-parallel size.", Hint::performance,
    check::gt(0));
  v(world_size, "world_size", "Number of processes. Unset: the launcher's (torchrun's WORLD_SIZE, Slurm's SLURM_NTASKS, OpenMPI's "
    "OMPI_COMM_WORLD_SIZE), or 1.", Hint::setup,
    check::gt(0));
  v(rank, "rank", "Rank of this process. Unset: the launcher's (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK), or 0.", Hint::setup, check::ge(0));
  v(local_world_size, "local_world_size",
    "Number of processes on each node. Unset: the launcher's (LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE, "
    "OMPI_COMM_WORLD_LOCAL_SIZE), or 1.", Hint::setup,
    check::gt(0));
  v(pipeline_first, "pipeline_first", "Place pipeline-parallel groups on nearby ranks before data-parallel groups.",
    Hint::expert);
  v(backend, "backend",
    "Communication library of the data-parallel group on a GPU (nccl; gloo stages the tensors through host memory, "
    "which lets several processes share one GPU). CPU runs always use gloo.",
    Hint::expert);
  v(rendezvous, "rendezvous",
    "How the processes meet: tcp (a store served by rank 0 at MASTER_ADDR) or file (a folder every process sees, "
    "rendezvous_directory).",
    Hint::expert);
  v(rendezvous_directory, "rendezvous_directory",
    "Folder of the file rendezvous, seen by every process and empty of an earlier run's files.", Hint::expert);
  v(timeout, "timeout", "Timeout of collective operations, in seconds.", Hint::optional, check::gt(0.0));
  v(use_cuda, "use_cuda", "Run on the GPU when one is available.", Hint::expert);
  v(force_cpu_initialization, "force_cpu_initialization",
    "Initialize parameters on the CPU even when running on the GPU.", Hint::expert);
  v(seed, "seed", "Seed of every random stream of the run (initialization, dropout, sampling).", Hint::optional);
  v(compute_dtype, "compute_dtype", "Data type of the forward and backward passes (bf16, fp16 or fp32).", Hint::core);
  v(optimization_dtype, "optimization_dtype", "Data type of the master weights, gradient shards and optimizer state.",
    Hint::expert);
  v(dp_seed_shift, "dp_seed_shift", "Seed offset per data-parallel rank.", Hint::optional);
  v(pp_seed_shift, "pp_seed_shift", "Seed offset per pipeline-parallel rank.", Hint::optional);
  v(pp_gen_seed_shift, "pp_gen_seed_shift", "Seed offset of the pipeline-parallel random stream.", Hint::optional);
  v(pp_gen_init_seed_shift, "pp_gen_init_seed_shift",
    "Seed offset of the pipeline-parallel random stream used for initialization.", Hint::optional);
  v(tp_seed_shift, "tp_seed_shift", "Seed offset per tensor-parallel rank.", Hint::optional);
  v(tp_gen_seed_shift, "tp_gen_seed_shift", "Seed offset of the tensor-parallel random stream.", Hint::optional);
  v(tp_gen_init_seed_shift, "tp_gen_init_seed_shift",
    "Seed offset of the tensor-parallel random stream used for initialization.", Hint::optional);
  v(sample_seed_shift, "sample_seed_shift", "Seed offset per sample.", Hint::optional);
  v(train_seed_shift, "train_seed_shift", "Seed offset of the training phase.", Hint::optional);
  v(valid_seed_shift, "valid_seed_shift", "Seed offset of the validation phase.", Hint::optional);
  v(inference_seed_shift, "inference_seed_shift", "Seed offset of the inference phase.", Hint::optional);
  v(reproducible_init, "reproducible_init",
    "Give the same initial weights whatever the parallel layout (slower, for testing).", Hint::testing);
}

void DistributedConfig::derive() {
  if (!world_size || !rank || !local_world_size) {
    // Whatever the config leaves unset comes from the launcher: torchrun, Slurm or OpenMPI (distributed/launch.h).
    distributed::ProcessLaunch launch;
    try {
      launch = distributed::read_process_launch();
    } catch (const Error& error) {
      fail(!world_size ? "world_size" : !rank ? "rank" : "local_world_size",
           fmt::format("is not set, and the launcher's environment does not give it: {}", error.what()));
    }
    if (!world_size) world_size = launch.world_size;
    if (!rank) rank = launch.rank;
    if (!local_world_size) local_world_size = launch.local_world_size;
  }
  // Sequence-tensor parallelism means nothing without tensor parallelism (as Fast-LLM).
  if (tensor_parallel == 1) sequence_tensor_parallel = false;
}

void DistributedConfig::check() const {
  if (*world_size % model_parallel() != 0)
    fail("world_size", fmt::format("must be a multiple of tensor_parallel * pipeline_parallel = {} * {} = {}, got {}",
                                   tensor_parallel, pipeline_parallel, model_parallel(), *world_size));
  if (data_parallel() % sequence_data_parallel != 0)
    fail("sequence_data_parallel", fmt::format("must divide the data-parallel size {} (world_size {} / {}), got {}",
                                               data_parallel(), *world_size, model_parallel(), sequence_data_parallel));
  if (*local_world_size % tensor_parallel != 0)
    fail("tensor_parallel", fmt::format("must divide local_world_size ({}): a tensor-parallel group stays on one node, "
                                        "got {}",
                                        *local_world_size, tensor_parallel));
  if (rendezvous == RendezvousKind::file && !rendezvous_directory && *world_size > 1)
    fail("rendezvous_directory", "must be set when rendezvous is file");
  if (*rank >= *world_size) fail("rank", fmt::format("must be less than world_size ({}), got {}", *world_size, *rank));
  if (!is_floating(compute_dtype))
    fail("compute_dtype", fmt::format("must be a floating-point type, got {}", dtype_name(compute_dtype)));
  if (!is_floating(optimization_dtype))
    fail("optimization_dtype", fmt::format("must be a floating-point type, got {}", dtype_name(optimization_dtype)));
}

}  // namespace fast_llm::engine

namespace fast_llm::config {

void Codec<engine::SeedShift>::read(engine::SeedShift& value, const YAML::Node& node, const std::string& path) {
  const std::string& text = detail::require_scalar(node, path, "an integer");
  auto parsed = engine::decimal_modulo_2_64(text);
  if (!parsed) throw ConfigError(path, fmt::format("expected an integer, got '{}'", text));
  value.value = *parsed;
}

YAML::Node Codec<engine::SeedShift>::write(const engine::SeedShift& value, const WriteOptions&) {
  return YAML::Node(value.value);
}

}  // namespace fast_llm::config
