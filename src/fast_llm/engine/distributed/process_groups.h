// The processes of a run and the groups they talk in (Fast-LLM's `Distributed`), built once per process from the
// validated `model.distributed` config before the model's buffers exist.
//
// World size 1 builds nothing that talks: no store, and the groups below are null, so a one-process run takes the
// same paths as before this existed. Otherwise the processes meet at a store (`rendezvous: tcp`: served by rank 0 at
// MASTER_ADDR, on the port distributed/launch.h gives; under mpirun on one machine without MASTER_ADDR, files in the
// job's temporary folder; `rendezvous: file`: files in `rendezvous_directory`) and every process builds:
//   world  every rank, over the run's device: NCCL on a GPU by default, Gloo on the CPU and when `backend: gloo` (GPU
//          tensors staged through host memory, so several processes can share one GPU); the groups below are split
//          from it with the rank layout of DistributedConfig (Fast-LLM's: tensor ranks adjacent, then data, then
//          pipeline, the last two swapped when pipeline_first);
//   host   a Gloo group of the whole world over CPU tensors, for the host's own numbers (a step's label count, the
//          losses of a log interval) and the barriers around checkpoints, so those never wait for the GPU stream.
// A device group of one rank is null: a caller with nothing to exchange tests the pointer.
// Every collective gives up after `model.distributed.timeout` with an error naming the operation and the group.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fast_llm/core/device.h"
#include "fast_llm/distributed/communicator.h"
#include "fast_llm/engine/distributed/config.h"

namespace fast_llm::engine {

class ProcessGroups {
 public:
  // `config` must be validated. Blocks until every process of the world has joined (or the timeout).
  ProcessGroups(const DistributedConfig& config, Device device);
  ~ProcessGroups();
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  bool is_main() const { return rank_ == 0; }
  // Null in a one-process run.
  distributed::Communicator* world() const { return world_.get(); }
  distributed::Communicator* host() const { return host_.get(); }
  // The ranks that differ only in their tensor rank (same data and pipeline rank).
  distributed::Communicator* tensor() const { return tensor_.get(); }
  // The ranks with this rank's tensor and pipeline rank: data parallelism, sequence-data parallelism included.
  distributed::Communicator* data() const { return data_.get(); }
  // The ranks with this rank's tensor and data rank, ordered by pipeline rank.
  distributed::Communicator* pipeline() const { return pipeline_.get(); }
  // The data ranks that split one sequence (same batch-data rank), and those that read different samples (same
  // sequence-data rank).
  distributed::Communicator* sequence_data() const { return sequence_data_.get(); }
  distributed::Communicator* batch_data() const { return batch_data_.get(); }
  // Tensor and sequence-data ranks together (same batch-data and pipeline rank): where sequence-tensor parallel
  // activations are split when sequence-data parallelism is on too.
  distributed::Communicator* tensor_and_sequence_data() const { return tensor_and_sequence_data_.get(); }

  // Every process has reached this point (a host barrier; nothing in a one-process run).
  void barrier() const;
  // The sum over every process of a host integer (itself in a one-process run).
  int64_t sum(int64_t value) const;
  // Element-wise sums over every process of host doubles, in place.
  void sum(std::vector<double>& values) const;
  // Element-wise maxima over every process of host doubles, in place.
  void max(std::vector<double>& values) const;
  // Element-wise minima over every process of host doubles, in place.
  void min(std::vector<double>& values) const;

 private:
  void reduce(std::vector<double>& values, distributed::ReduceOp op) const;

  int rank_ = 0;
  int world_size_ = 1;
  std::shared_ptr<distributed::Store> store_;
  std::unique_ptr<distributed::Communicator> host_;
  std::unique_ptr<distributed::Communicator> world_;
  std::unique_ptr<distributed::Communicator> tensor_;
  std::unique_ptr<distributed::Communicator> data_;
  std::unique_ptr<distributed::Communicator> pipeline_;
  std::unique_ptr<distributed::Communicator> sequence_data_;
  std::unique_ptr<distributed::Communicator> batch_data_;
  std::unique_ptr<distributed::Communicator> tensor_and_sequence_data_;
};

}  // namespace fast_llm::engine
