// The NCCL engine of Communicator (CUDA builds only): CUDA tensors of one device per rank.
//
// Creation: rank 0 draws the unique id and publishes it under "nccl/<name>/id" of the store; every rank then joins
// with ncclCommInitRankConfig. Communicators are non-blocking (config.blocking = 0): every NCCL call may return
// ncclInProgress, and the engine polls ncclCommGetAsyncError until the call settles, for at most the timeout; an
// error or a timeout aborts the communicator (ncclCommAbort) and throws an Error naming the operation and the group.
// From then on the communicator refuses every operation, naming the first failure.
// Ordering: each communicator launches on a stream of its own. An operation first makes that stream wait for the
// caller's stream (an event), so it starts after the work queued there so far, and records an event after itself:
// Work::wait(stream) makes `stream` wait for that event on the device; Work::wait() polls it on the host under the
// timeout, watching NCCL's asynchronous errors. A device-side wait has no timeout: a dead peer is noticed at the next
// host wait (Work::wait(), barrier, split). Collectives launched on one stream complete in issue order.
// split: ncclCommSplit, with the colors also exchanged through the store to name the new group by its world ranks.
// barrier: an all-reduce of one int on the communicator's stream, waited for on the host.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>

#include "fast_llm/core/cuda/check.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/distributed/engines.h"
#include "fast_llm/tensor/cuda/device_guard.h"

namespace fast_llm::distributed::detail {

namespace {

using fast_llm::detail::CudaDeviceGuard;

constexpr const char* kComponent = "distributed";
constexpr std::chrono::microseconds kPollInterval{50};

// What a communicator and its Works share. `comm` is null once aborted, `failure` then says why.
struct NcclState {
  ncclComm_t comm = nullptr;
  int device = 0;
  std::chrono::milliseconds timeout{};
  std::string name;
  std::mutex mutex;
  std::string failure;
};

// Aborts the communicator (once) and throws the Error of `operation`.
[[noreturn]] void fail(NcclState& state, const std::string& operation, const std::string& what) {
  {
    std::lock_guard lock(state.mutex);
    if (state.failure.empty()) state.failure = fmt::format("{}: {}", operation, what);
    if (state.comm != nullptr) {
      ncclCommAbort(state.comm);
      state.comm = nullptr;
    }
  }
  throw Error(kComponent, fmt::format("{} on {} failed: {}", operation, state.name, what));
}

void check_usable(NcclState& state, const std::string& operation) {
  std::lock_guard lock(state.mutex);
  FLM_CHECK(state.failure.empty(), kComponent, "{} on {} not run: an earlier operation failed ({})", operation,
            state.name, state.failure);
}

std::string describe_result(ncclComm_t comm, ncclResult_t result) {
  const char* last = ncclGetLastError(comm);
  return fmt::format("{}{}{}", ncclGetErrorString(result), last != nullptr && *last != '\0' ? ": " : "",
                     last != nullptr ? last : "");
}

// Waits until `comm`'s last call has settled (non-blocking communicators), at most the timeout.
void settle(NcclState& state, ncclComm_t comm, ncclResult_t result, const std::string& operation) {
  const auto deadline = std::chrono::steady_clock::now() + state.timeout;
  while (result == ncclInProgress) {
    if (std::chrono::steady_clock::now() > deadline)
      fail(state, operation, fmt::format("timed out after {} ms", state.timeout.count()));
    std::this_thread::sleep_for(kPollInterval);
    const ncclResult_t query = ncclCommGetAsyncError(comm, &result);
    if (query != ncclSuccess) result = query;
  }
  if (result != ncclSuccess) fail(state, operation, describe_result(comm, result));
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

ncclDataType_t nccl_reduction_type(DType dtype, const std::string& group) {
  switch (dtype) {
    case DType::float32:
      return ncclFloat32;
    case DType::float64:
      return ncclFloat64;
    case DType::bfloat16:
      return ncclBfloat16;
    case DType::float16:
      return ncclFloat16;
    case DType::int32:
      return ncclInt32;
    case DType::int64:
      return ncclInt64;
    default:
      throw Error(kComponent, fmt::format("reduction on {}: cannot reduce {} (float32, float64, bfloat16, float16, "
                                          "int32, int64)",
                                          group, dtype_name(dtype)));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  FLM_ASSERT(false, "unknown reduction {}", int(op));
  return ncclSum;
}

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, cudaEvent_t done, std::string operation)
      : state_(std::move(state)), done_(done), operation_(std::move(operation)) {}
  ~NcclWork() override { cudaEventDestroy(done_); }

  void wait(Stream stream) override {
    CudaDeviceGuard guard(state_->device);
    cudaStream_t waiting = static_cast<cudaStream_t>(
        stream.handle != nullptr ? stream.handle : compute_stream(Device::cuda(state_->device)).handle);
    FLM_CUDA_CHECK(cudaStreamWaitEvent(waiting, done_, 0));
  }

  void wait() override {
    const auto deadline = std::chrono::steady_clock::now() + state_->timeout;
    while (true) {
      const cudaError_t status = cudaEventQuery(done_);
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) FLM_CUDA_CHECK(status);
      check_usable(*state_, operation_);
      ncclResult_t asynchronous = ncclSuccess;
      {
        std::lock_guard lock(state_->mutex);
        if (state_->comm != nullptr) ncclCommGetAsyncError(state_->comm, &asynchronous);
      }
      if (asynchronous != ncclSuccess && asynchronous != ncclInProgress)
        fail(*state_, operation_, ncclGetErrorString(asynchronous));
      if (std::chrono::steady_clock::now() > deadline)
        fail(*state_, operation_, fmt::format("timed out after {} ms", state_->timeout.count()));
      std::this_thread::sleep_for(kPollInterval);
    }
  }

 private:
  std::shared_ptr<NcclState> state_;
  cudaEvent_t done_;
  std::string operation_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclState> state, int rank, int size, std::shared_ptr<Store> store,
                   std::vector<int> world_ranks, std::string prefix)
      : state_(std::move(state)),
        rank_(rank),
        size_(size),
        store_(std::move(store)),
        world_ranks_(std::move(world_ranks)),
        prefix_(std::move(prefix)) {
    CudaDeviceGuard guard(state_->device);
    FLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    FLM_CUDA_CHECK(cudaEventCreateWithFlags(&issued_, cudaEventDisableTiming));
    FLM_CUDA_CHECK(cudaMalloc(&barrier_value_, sizeof(int32_t)));
  }

  ~NcclCommunicator() override {
    CudaDeviceGuard guard(state_->device);
    {
      std::lock_guard lock(state_->mutex);
      if (state_->comm != nullptr) {
        // Flush what was issued, then free; a communicator that does not finish in time is aborted instead.
        ncclResult_t result = ncclCommFinalize(state_->comm);
        const auto deadline = std::chrono::steady_clock::now() + state_->timeout;
        while (result == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(kPollInterval);
          ncclCommGetAsyncError(state_->comm, &result);
        }
        if (result == ncclSuccess) {
          ncclCommDestroy(state_->comm);
        } else {
          log_error("[distributed] {}: finalising the NCCL communicator failed ({}); aborting it", state_->name,
                    ncclGetErrorString(result));
          ncclCommAbort(state_->comm);
        }
        state_->comm = nullptr;
      }
    }
    cudaFree(barrier_value_);
    cudaEventDestroy(issued_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return state_->name; }

  std::unique_ptr<Work> all_reduce(Tensor& tensor, ReduceOp op, Stream stream) override {
    check_tensor("all_reduce", tensor);
    const ncclDataType_t type = nccl_reduction_type(tensor.dtype(), name());
    return enqueue("all_reduce", stream, [&](ncclComm_t comm) {
      return ncclAllReduce(tensor.data(), tensor.data(), size_t(tensor.numel()), type, nccl_op(op), comm, stream_);
    });
  }

  std::unique_ptr<Work> reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op, Stream stream) override {
    check_tensor("reduce_scatter", input);
    check_tensor("reduce_scatter", output);
    const ncclDataType_t type = nccl_reduction_type(input.dtype(), name());
    FLM_CHECK(input.dtype() == output.dtype() && input.numel() == output.numel() * size_, kComponent,
              "reduce_scatter on {}: input {} of {} elements, output {} of {} (the input must be {} outputs)", name(),
              dtype_name(input.dtype()), input.numel(), dtype_name(output.dtype()), output.numel(), size_);
    return enqueue("reduce_scatter", stream, [&](ncclComm_t comm) {
      return ncclReduceScatter(input.data(), output.data(), size_t(output.numel()), type, nccl_op(op), comm,
                               stream_);
    });
  }

  std::unique_ptr<Work> all_gather(const Tensor& input, Tensor& output, Stream stream) override {
    check_tensor("all_gather", input);
    check_tensor("all_gather", output);
    FLM_CHECK(input.dtype() == output.dtype() && output.numel() == input.numel() * size_, kComponent,
              "all_gather on {}: input {} of {} elements, output {} of {} (the output must be {} inputs)", name(),
              dtype_name(input.dtype()), input.numel(), dtype_name(output.dtype()), output.numel(), size_);
    return enqueue("all_gather", stream, [&](ncclComm_t comm) {
      return ncclAllGather(input.data(), output.data(), input.nbytes(), ncclUint8, comm, stream_);
    });
  }

  std::unique_ptr<Work> broadcast(Tensor& tensor, int root, Stream stream) override {
    check_tensor("broadcast", tensor);
    FLM_CHECK(root >= 0 && root < size_, kComponent, "broadcast on {}: root {} outside the group of {}", name(), root,
              size_);
    return enqueue("broadcast", stream, [&](ncclComm_t comm) {
      return ncclBroadcast(tensor.data(), tensor.data(), tensor.nbytes(), ncclUint8, root, comm, stream_);
    });
  }

  std::unique_ptr<Work> send(const Tensor& tensor, int peer, Stream stream) override {
    check_tensor("send", tensor);
    check_peer("send", peer);
    return enqueue(fmt::format("send (to rank {})", peer), stream, [&](ncclComm_t comm) {
      return ncclSend(tensor.data(), tensor.nbytes(), ncclUint8, peer, comm, stream_);
    });
  }

  std::unique_ptr<Work> recv(Tensor& tensor, int peer, Stream stream) override {
    check_tensor("recv", tensor);
    check_peer("recv", peer);
    return enqueue(fmt::format("recv (from rank {})", peer), stream, [&](ncclComm_t comm) {
      return ncclRecv(tensor.data(), tensor.nbytes(), ncclUint8, peer, comm, stream_);
    });
  }

  void barrier() override {
    enqueue("barrier", Stream{stream_}, [&](ncclComm_t comm) {
      return ncclAllReduce(barrier_value_, barrier_value_, 1, ncclInt32, ncclSum, comm, stream_);
    })->wait();
  }

  std::unique_ptr<Communicator> split(int color, const std::string& name) override {
    const std::string operation = fmt::format("split (color {}, group '{}')", color, name);
    check_usable(*state_, operation);
    FLM_CHECK(!name.empty(), kComponent, "split of {}: the new group needs a name", this->name());
    const std::string split_prefix = fmt::format("{}/split{}", prefix_, splits_++);
    std::vector<int> colors(size_t(size_), color);
    if (size_ > 1) {
      std::vector<uint8_t> bytes(sizeof(int32_t));
      const auto value = int32_t(color);
      std::memcpy(bytes.data(), &value, sizeof(value));
      store_->set(fmt::format("{}/color{}", split_prefix, rank_), bytes);
      for (int peer = 0; peer < size_; ++peer) {
        const std::string key = fmt::format("{}/color{}", split_prefix, peer);
        bytes = store_->get(key);
        FLM_CHECK(bytes.size() == sizeof(int32_t), kComponent, "store key '{}' holds {} bytes, not a split color",
                  key, bytes.size());
        std::memcpy(&colors[size_t(peer)], bytes.data(), sizeof(int32_t));
      }
    }
    CudaDeviceGuard guard(state_->device);
    // On a non-blocking parent the split runs like a collective of the parent: the call may return before the work is
    // done (even with ncclSuccess), the parent reports ncclInProgress until it is, and only then is the new handle
    // written (NCCL 2.28 on the H200 handed back no handle when it was read right after the call). So: wait for the
    // parent, then for the handle, then for the new communicator's own initialisation.
    ncclConfig_t config = nonblocking_config();
    ncclComm_t child = nullptr;
    ncclComm_t parent = state_->comm;
    ncclResult_t result = ncclCommSplit(parent, color < 0 ? NCCL_SPLIT_NOCOLOR : color, rank_, &child, &config);
    if (result == ncclSuccess) {
      const ncclResult_t query = ncclCommGetAsyncError(parent, &result);
      if (query != ncclSuccess) result = query;
    }
    settle(*state_, parent, result, operation);
    if (color >= 0) {
      std::atomic_ref<ncclComm_t> handle(child);
      const auto deadline = std::chrono::steady_clock::now() + state_->timeout;
      while (handle.load() == nullptr && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(kPollInterval);
      FLM_CHECK(handle.load() != nullptr, kComponent, "{} on {}: NCCL returned no communicator within {} ms", operation,
                state_->name, state_->timeout.count());
    }
    if (color < 0) return nullptr;
    std::vector<int> world_ranks;
    int group_rank = 0;
    for (int peer = 0; peer < size_; ++peer) {
      if (colors[size_t(peer)] != color) continue;
      if (peer == rank_) group_rank = int(world_ranks.size());
      world_ranks.push_back(world_ranks_[size_t(peer)]);
    }
    auto state = std::make_shared<NcclState>();
    state->comm = child;
    state->device = state_->device;
    state->timeout = state_->timeout;
    state->name = group_display_name(name, world_ranks);
    settle(*state, child, ncclInProgress, operation);
    const int group_size = int(world_ranks.size());
    return std::make_unique<NcclCommunicator>(std::move(state), group_rank, group_size, store_,
                                              std::move(world_ranks), fmt::format("{}/{}", split_prefix, color));
  }

 private:
  void check_tensor(const char* operation, const Tensor& tensor) const {
    FLM_CHECK(tensor.defined() && tensor.is_contiguous(), kComponent,
              "{} on {}: the tensor must be defined and contiguous", operation, name());
    FLM_CHECK(tensor.device() == Device::cuda(state_->device), kComponent,
              "{} on {}: a tensor on {}, but the communicator moves cuda:{} tensors", operation, name(),
              tensor.device().str(), state_->device);
  }

  void check_peer(const char* operation, int peer) const {
    FLM_CHECK(peer >= 0 && peer < size_ && peer != rank_, kComponent,
              "{} on {}: peer {} (another rank of the group of {}; this is rank {})", operation, name(), peer, size_,
              rank_);
  }

  // Orders the communicator's stream after `stream`, launches `call` on it, and records the Work's event after it.
  template <class Call>
  std::unique_ptr<Work> enqueue(const std::string& operation, Stream stream, Call&& call) {
    check_usable(*state_, operation);
    CudaDeviceGuard guard(state_->device);
    cudaStream_t caller = static_cast<cudaStream_t>(
        stream.handle != nullptr ? stream.handle : compute_stream(Device::cuda(state_->device)).handle);
    FLM_CUDA_CHECK(cudaEventRecord(issued_, caller));
    FLM_CUDA_CHECK(cudaStreamWaitEvent(stream_, issued_, 0));
    ncclComm_t comm = state_->comm;
    settle(*state_, comm, call(comm), operation);
    cudaEvent_t done = nullptr;
    FLM_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    auto work = std::make_unique<NcclWork>(state_, done, operation);
    FLM_CUDA_CHECK(cudaEventRecord(done, stream_));
    return work;
  }

  std::shared_ptr<NcclState> state_;
  int rank_;
  int size_;
  std::shared_ptr<Store> store_;  // null for a group of one created without a store
  std::vector<int> world_ranks_;
  std::string prefix_;
  int splits_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t issued_ = nullptr;   // recorded on the caller's stream at each issue
  void* barrier_value_ = nullptr;  // one int32 on the device, summed by barrier() (its value is never read)
};

}  // namespace

std::unique_ptr<Communicator> create_nccl_communicator(const CommunicatorOptions& options) {
  device_info(options.device);  // an index that names no visible GPU is an Error naming how many there are
  std::vector<int> world_ranks(size_t(options.size));
  std::iota(world_ranks.begin(), world_ranks.end(), 0);
  auto state = std::make_shared<NcclState>();
  state->device = options.device.index;
  state->timeout = options.timeout;
  state->name = group_display_name(options.name, world_ranks);
  const std::string prefix = "nccl/" + options.name;

  ncclUniqueId id;
  if (options.rank == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    FLM_CHECK(result == ncclSuccess, kComponent, "ncclGetUniqueId for {} failed: {}", state->name,
              ncclGetErrorString(result));
    if (options.size > 1)
      options.store->set(prefix + "/id", std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    const std::vector<uint8_t> bytes = options.store->get(prefix + "/id");
    FLM_CHECK(bytes.size() == sizeof(id.internal), kComponent, "store key '{}/id' holds {} bytes, not a NCCL id",
              prefix, bytes.size());
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  CudaDeviceGuard guard(state->device);
  ncclConfig_t config = nonblocking_config();
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRankConfig(&comm, options.size, id, options.rank, &config);
  state->comm = comm;
  if (comm == nullptr)
    throw Error(kComponent, fmt::format("creating {} failed on rank {}: {}", state->name, options.rank,
                                        ncclGetErrorString(result)));
  settle(*state, comm, result, "creation");
  return std::make_unique<NcclCommunicator>(std::move(state), options.rank, options.size, options.store,
                                            std::move(world_ranks), prefix);
}

}  // namespace fast_llm::distributed::detail
