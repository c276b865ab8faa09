// Rendezvous and the run's process groups.
#include "fast_llm/engine/distributed/process_groups.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/distributed/launch.h"
#include "fast_llm/distributed/store.h"

namespace fast_llm::engine {

namespace {

std::shared_ptr<distributed::Store> rendezvous_store(const DistributedConfig& config,
                                                     std::chrono::milliseconds timeout) {
  if (config.rendezvous == RendezvousKind::file)
    return distributed::file_store(*config.rendezvous_directory, timeout);
  const distributed::ProcessLaunch launch = distributed::read_process_launch();
  // mpirun on one machine without MASTER_ADDR: its job's temporary folder (removed by mpirun when the job ends) is a
  // place every process sees, so the processes meet through files there.
  const char* job = std::getenv("OMPI_MCA_ess_base_jobid");
  if (launch.launcher == distributed::Launcher::openmpi && !launch.master_address && job != nullptr &&
      launch.local_world_size == launch.world_size) {
    const char* job_folder = std::getenv("PMIX_SERVER_TMPDIR");
    const std::filesystem::path folder =
        job_folder != nullptr ? std::filesystem::path(job_folder) / "fast-llm-rendezvous"
                              : std::filesystem::temp_directory_path() / fmt::format("fast-llm-rendezvous-{}", job);
    return distributed::file_store(folder, timeout);
  }
  if (!launch.master_address || !launch.store_port)
    throw ConfigError(config.field_path("world_size"),
                      fmt::format("is {}, but the environment gives no MASTER_ADDR and MASTER_PORT to meet at: start "
                                  "the processes with torchrun, srun or mpirun and set both, use `fast-llm train gpt "
                                  "--nproc-per-node N`, or set rendezvous: file with a rendezvous_directory",
                                  *config.world_size));
  return distributed::tcp_store(*launch.master_address, *launch.store_port, *config.rank, timeout);
}

}  // namespace

ProcessGroups::ProcessGroups(const DistributedConfig& config, Device device)
    : rank_(*config.rank), world_size_(*config.world_size) {
  FLM_CHECK(config.validated(), "distributed", "the distributed config must be validated first");
  set_log_rank(rank_, world_size_);
  if (world_size_ == 1) return;
  const auto timeout = std::chrono::milliseconds(int64_t(config.timeout * 1000.0));
  store_ = rendezvous_store(config, timeout);
  const bool local = *config.local_world_size == world_size_;
  host_ = distributed::create_communicator({.backend = distributed::CommunicationBackend::gloo,
                                            .device = Device::cpu(),
                                            .rank = rank_,
                                            .size = world_size_,
                                            .store = distributed::prefix_store(store_, "host"),
                                            .timeout = timeout,
                                            .name = "host",
                                            .local = local});
  const bool nccl = device.is_cuda() && config.backend == DistributedBackend::nccl;
  world_ = distributed::create_communicator(
      {.backend = nccl ? distributed::CommunicationBackend::nccl : distributed::CommunicationBackend::gloo,
       .device = device,
       .rank = rank_,
       .size = world_size_,
       .store = distributed::prefix_store(store_, "world"),
       .timeout = timeout,
       .name = "world",
       .local = local});
  // Every rank takes part in every split, in this order; a group of one rank is dropped (null).
  auto split = [&](int size, int color, const char* name) -> std::unique_ptr<distributed::Communicator> {
    std::unique_ptr<distributed::Communicator> group = world_->split(color, name);
    return size > 1 ? std::move(group) : nullptr;
  };
  const int tp = config.tensor_parallel, pp = config.pipeline_parallel, dp = config.data_parallel();
  const int tensor_rank = config.tensor_rank(), data_rank = config.data_rank(), pipeline_rank = config.pipeline_rank();
  const int sdp_rank = config.sequence_data_rank(), batch_rank = config.batch_data_rank();
  tensor_ = split(tp, data_rank * pp + pipeline_rank, "tensor");
  data_ = split(dp, tensor_rank * pp + pipeline_rank, "data");
  pipeline_ = split(pp, tensor_rank * dp + data_rank, "pipeline");
  sequence_data_ = split(config.sequence_data_parallel, (tensor_rank * pp + pipeline_rank) * dp + batch_rank,
                         "sequence_data");
  batch_data_ = split(config.batch_data_parallel(), (tensor_rank * pp + pipeline_rank) * dp + sdp_rank, "batch_data");
  tensor_and_sequence_data_ = split(tp * config.sequence_data_parallel, pipeline_rank * dp + batch_rank,
                                    "tensor_and_sequence_data");
  log_main("{} processes joined ({} rendezvous; groups on {} through {}: tensor {}, data {} (sequence {}), pipeline "
           "{})",
           world_size_, config.rendezvous == RendezvousKind::tcp ? "tcp" : "file", device.str(),
           nccl ? "NCCL" : "Gloo", tp, dp, config.sequence_data_parallel, pp);
}

ProcessGroups::~ProcessGroups() = default;

void ProcessGroups::barrier() const {
  if (host_) host_->barrier();
}

int64_t ProcessGroups::sum(int64_t value) const {
  if (!host_) return value;
  Tensor tensor = Tensor::empty(Shape{1}, DType::int64);
  *tensor.data_as<int64_t>() = value;
  host_->all_reduce(tensor, distributed::ReduceOp::sum, Stream())->wait();
  return *tensor.data_as<int64_t>();
}

void ProcessGroups::sum(std::vector<double>& values) const { reduce(values, distributed::ReduceOp::sum); }

void ProcessGroups::max(std::vector<double>& values) const { reduce(values, distributed::ReduceOp::max); }

void ProcessGroups::min(std::vector<double>& values) const { reduce(values, distributed::ReduceOp::min); }

void ProcessGroups::reduce(std::vector<double>& values, distributed::ReduceOp op) const {
  if (!host_ || values.empty()) return;
  Tensor tensor = Tensor::empty(Shape{int64_t(values.size())}, DType::float64);
  std::copy(values.begin(), values.end(), tensor.data_as<double>());
  host_->all_reduce(tensor, op, Stream())->wait();
  std::copy_n(tensor.data_as<double>(), values.size(), values.begin());
}

}  // namespace fast_llm::engine
