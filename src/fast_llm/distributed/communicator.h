// Collective communication within a process group: the one interface the engine uses, with two engines behind it,
// NCCL for CUDA tensors and Gloo for CPU tensors (and for CUDA tensors staged through page-locked host memory, so that
// several processes can share one GPU in tests: NCCL refuses two ranks on one device).
//
// Ordering: every operation takes the stream its tensors are produced and consumed on. It starts after the work
// queued on that stream so far, runs on the communicator's own stream (NCCL) or worker thread (Gloo), and returns a
// Work; `Work::wait(stream)` makes `stream` wait for it (a CUDA event, no host sync), `Work::wait()` waits on the host.
// The caller keeps the tensors alive until the work has been waited for. Operations on one communicator complete in
// the order they were issued, and every rank of the group must issue the same operations in the same order.
// In-place where the semantics allow: all_reduce and broadcast modify `tensor`; reduce_scatter and all_gather read
// `input` and write `output` (sizes: output = input / size for reduce_scatter, output = input * size for all_gather,
// rank r's part at offset r * part). Tensors must be contiguous; dtypes: float32, float64, bfloat16, float16, int32,
// int64 (reductions of bf16/fp16 accumulate as the engine does; the engine reduces fp32 gradients).
//
// Faults: an operation that does not complete within the communicator's timeout throws an Error naming the operation,
// the group and the ranks that did not take part when that is known; a dead peer ends the job on every rank.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "fast_llm/distributed/store.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::distributed {

enum class ReduceOp { sum, max, min };

class Work {
 public:
  virtual ~Work() = default;
  // `stream` waits for the operation (the device's stream; on the CPU the host waits).
  virtual void wait(Stream stream) = 0;
  // The host waits for the operation; throws its error, if any.
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "data (ranks 0, 2, 4, 6)", for error messages and logs.
  virtual const std::string& name() const = 0;

  virtual std::unique_ptr<Work> all_reduce(Tensor& tensor, ReduceOp op, Stream stream) = 0;
  virtual std::unique_ptr<Work> reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op, Stream stream) = 0;
  virtual std::unique_ptr<Work> all_gather(const Tensor& input, Tensor& output, Stream stream) = 0;
  virtual std::unique_ptr<Work> broadcast(Tensor& tensor, int root, Stream stream) = 0;
  virtual std::unique_ptr<Work> send(const Tensor& tensor, int peer, Stream stream) = 0;
  virtual std::unique_ptr<Work> recv(Tensor& tensor, int peer, Stream stream) = 0;
  // Every rank of the group has reached this point (host).
  virtual void barrier() = 0;

  // A sub-group. Every rank of this communicator calls it, in the same order as its other operations; the ranks that
  // pass the same non-negative `color` form one group, ranked in this communicator's order, named `name`. A rank that
  // passes a negative color takes part in the call but belongs to no group and gets null.
  virtual std::unique_ptr<Communicator> split(int color, const std::string& name) = 0;
};

enum class CommunicationBackend { nccl, gloo };

struct CommunicatorOptions {
  CommunicationBackend backend = CommunicationBackend::gloo;
  // The device whose tensors the communicator moves: NCCL needs a CUDA device; Gloo takes CPU tensors and, on a CUDA
  // device, stages them through page-locked host memory.
  Device device = Device::cpu();
  int rank = 0;
  int size = 1;
  std::shared_ptr<Store> store;  // rendezvous of this group (unused when size is 1)
  std::chrono::milliseconds timeout{60000};
  std::string name = "world";
  // Every rank runs on this machine: Gloo binds to 127.0.0.1 unless FAST_LLM_GLOO_INTERFACE says otherwise.
  bool local = false;
};

// The communicator of the group `options` describes; every rank of the group calls it with the same backend, size,
// store and name. A NCCL communicator on a build without CUDA, or Gloo on a build without it, is an Error.
std::unique_ptr<Communicator> create_communicator(const CommunicatorOptions& options);

}  // namespace fast_llm::distributed
