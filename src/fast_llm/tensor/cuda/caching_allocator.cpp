// The CUDA caching allocator: one per device, stream-aware pools, block splitting and merging.
//
// Memory comes from the driver in segments: 2 MiB segments shared by small requests (<= 1 MiB), and one segment per
// large request, rounded up to 2 MiB. A segment is a doubly linked list of blocks in address order; each block is in
// use, free (in a pool), or waiting for events recorded on other streams (record_stream) before it becomes free.
// Free blocks are kept sorted by (stream, size, address), so best fit on a stream is one lower_bound, and a freed
// block merges with the free neighbours of its segment. Blocks never change stream: work queued on one stream runs
// in order, so a block freed on stream S can go to the next allocation on S at once, without synchronising; reuse on
// any other stream would need an event, which is what record_stream arranges.
//
// Sizes are rounded up to 512 bytes; statistics count whole blocks (a large block keeps a remainder of up to 1 MiB
// that no large request could use).
//
// The graph pool (allocator.h, tensor/graph.h): while a stream is captured, its allocations take blocks from a second
// pair of pools (small, large) whose segments are marked `graph`; those blocks split, merge and return only within
// the graph pools, and their segments are never released, since captured graphs keep using their addresses. A block
// of the ordinary pools used on the capturing stream (allocated on it, or recorded there with record_stream) and
// freed during the capture may have been read by the captured work, which every launch repeats: it is retired (kept
// reserved, in no pool) rather than handed to a later ordinary allocation; that also keeps the events of freed blocks
// off the capturing stream, where they would become part of the graph. Nothing here calls cudaFree during a capture
// (it is not allowed then); cudaMalloc of new segments is, because captures run in relaxed mode.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "fast_llm/core/cuda/check.h"
#include "fast_llm/core/device.h"
#include "fast_llm/tensor/allocator.h"
#include "fast_llm/tensor/cuda/device_guard.h"

namespace fast_llm::detail {

namespace {

constexpr size_t kBlockRounding = 512;
constexpr size_t kSmallRequest = size_t(1) << 20;
constexpr size_t kSmallSegment = size_t(2) << 20;
constexpr size_t kLargeSegmentRounding = size_t(2) << 20;

size_t round_up(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

std::string format_bytes(size_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = double(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, kUnits[unit]);
}

enum class BlockState { in_use, awaiting_events, free, retired };

struct Block {
  cudaStream_t stream = nullptr;
  bool small = false;  // which pool it returns to
  bool graph = false;  // in the graph pool: for allocations on a capturing stream only, never given back
  size_t size = 0;
  char* pointer = nullptr;
  BlockState state = BlockState::free;
  Block* previous = nullptr;  // neighbours in the same segment, in address order
  Block* next = nullptr;
  std::vector<cudaStream_t> used_on;  // streams other than `stream` recorded with record_stream
  int pending_events = 0;
};

struct BlockOrder {
  bool operator()(const Block* left, const Block* right) const {
    auto key = [](const Block* block) {
      return std::tuple(reinterpret_cast<uintptr_t>(block->stream), block->size,
                        reinterpret_cast<uintptr_t>(block->pointer));
    };
    return key(left) < key(right);
  }
};

using BlockPool = std::set<Block*, BlockOrder>;

struct PendingEvent {
  cudaEvent_t event;
  Block* block;
};

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}

  void* allocate(size_t bytes, Stream stream) override {
    FLM_CHECK(bytes <= std::numeric_limits<size_t>::max() - kLargeSegmentRounding, "cuda",
              "out of memory on cuda:{}: tried to allocate {} bytes", device_, bytes);
    cudaStream_t cuda_stream = stream_of(stream);
    // Zero-byte requests still get a distinct block, so every storage owns a distinct address.
    size_t size = round_up(std::max<size_t>(bytes, 1), kBlockRounding);
    bool small = size <= kSmallRequest;
    std::lock_guard lock(mutex_);
    CudaDeviceGuard guard(device_);
    process_events();
    const bool graph = capture_stream_ != nullptr && cuda_stream == capture_stream_;
    Block* block = take_free_block(cuda_stream, size, small, graph);
    if (block == nullptr) block = allocate_segment(cuda_stream, size, small, graph, bytes);
    split(block, size);
    block->state = BlockState::in_use;
    in_use_.emplace(block->pointer, block);
    stats_.allocated_bytes += block->size;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    ++stats_.allocations;
    return block->pointer;
  }

  // The block goes back to the pool of the stream it was allocated on, whatever `stream` says: that is the stream
  // whose order makes the reuse safe.
  void deallocate(void* pointer, Stream stream) override {
    if (pointer == nullptr) return;
    std::lock_guard lock(mutex_);
    Block* block = take_in_use(pointer, "deallocate");
    stats_.allocated_bytes -= block->size;
    if (capture_stream_ != nullptr && !block->graph &&
        (block->stream == capture_stream_ ||
         std::find(block->used_on.begin(), block->used_on.end(), capture_stream_) != block->used_on.end())) {
      block->state = BlockState::retired;
      return;
    }
    if (block->used_on.empty()) {
      free_block(block);
      return;
    }
    // Used on other streams: it becomes free only once each of them has finished the work queued so far.
    CudaDeviceGuard guard(device_);
    block->state = BlockState::awaiting_events;
    for (cudaStream_t other : block->used_on) {
      cudaEvent_t event = take_event();
      FLM_CUDA_CHECK(cudaEventRecord(event, other));
      pending_.push_back(PendingEvent{event, block});
      ++block->pending_events;
    }
    block->used_on.clear();
  }

  void record_stream(void* pointer, Stream stream) override {
    cudaStream_t cuda_stream = stream_of(stream);
    std::lock_guard lock(mutex_);
    auto found = in_use_.find(pointer);
    FLM_CHECK(found != in_use_.end(), "cuda",
              "record_stream: {} is not a live allocation of the caching allocator of cuda:{}", pointer, device_);
    Block* block = found->second;
    if (cuda_stream == block->stream) return;
    if (std::find(block->used_on.begin(), block->used_on.end(), cuda_stream) == block->used_on.end())
      block->used_on.push_back(cuda_stream);
  }

  AllocatorStats stats() const override {
    std::lock_guard lock(mutex_);
    return stats_;
  }

  void reset_peak() override {
    std::lock_guard lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }

  void release_cached() override {
    std::lock_guard lock(mutex_);
    FLM_ASSERT(capture_stream_ == nullptr, "release_cached on cuda:{} during a CUDA graph capture (no cudaFree then)",
               device_);
    release_cached_locked();
  }

  void begin_graph_capture(Stream stream) {
    std::lock_guard lock(mutex_);
    FLM_ASSERT(capture_stream_ == nullptr, "a second CUDA graph capture on cuda:{} while one is in progress",
               device_);
    // The blocks cached by eager steps would stay reserved beside the graph pool's copies of the same activations.
    // Every capture, not only the first: eager steps between captures (a new shape, an evicted graph) cache blocks
    // again. Captures are rare (one per shape), and this wait is what a step's log line costs.
    release_cached_locked();
    capture_stream_ = stream_of(stream);
  }

  void end_graph_capture() {
    std::lock_guard lock(mutex_);
    FLM_ASSERT(capture_stream_ != nullptr, "end of a CUDA graph capture on cuda:{} that did not begin", device_);
    capture_stream_ = nullptr;
  }

 private:
  // release_cached's work, with the mutex held and no capture in progress.
  void release_cached_locked() {
    CudaDeviceGuard guard(device_);
    wait_for_events();
    release_free_segments();
  }

  cudaStream_t stream_of(Stream stream) const {
    return static_cast<cudaStream_t>(stream.handle != nullptr ? stream.handle : cuda_compute_stream(device_).handle);
  }

  BlockPool& pool_for(bool small, bool graph) {
    if (graph) return small ? graph_small_free_ : graph_large_free_;
    return small ? small_free_ : large_free_;
  }
  BlockPool& pool_of(const Block* block) { return pool_for(block->small, block->graph); }

  Block* take_in_use(void* pointer, std::string_view operation) {
    auto found = in_use_.find(pointer);
    FLM_ASSERT(found != in_use_.end(), "{} of {}, which is not a live allocation of the caching allocator of cuda:{}",
               operation, pointer, device_);
    Block* block = found->second;
    in_use_.erase(found);
    return block;
  }

  // Best fit on `stream`: the smallest free block of at least `size`.
  Block* take_free_block(cudaStream_t stream, size_t size, bool small, bool graph) {
    BlockPool& pool = pool_for(small, graph);
    Block key;
    key.stream = stream;
    key.size = size;
    auto found = pool.lower_bound(&key);
    if (found == pool.end() || (*found)->stream != stream) return nullptr;
    Block* block = *found;
    pool.erase(found);
    return block;
  }

  Block* allocate_segment(cudaStream_t stream, size_t size, bool small, bool graph, size_t requested) {
    size_t segment_size = small ? kSmallSegment : round_up(size, kLargeSegmentRounding);
    void* pointer = nullptr;
    cudaError_t status = cudaMalloc(&pointer, segment_size);
    if (status == cudaErrorMemoryAllocation && capture_stream_ == nullptr) {
      cudaGetLastError();
      // Before giving up, give every cached segment (of any stream) back to the driver; waiting for blocks held back
      // by record_stream is cheaper than failing. Not during a graph capture, where cudaFree is not allowed.
      wait_for_events();
      release_free_segments();
      status = cudaMalloc(&pointer, segment_size);
    }
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      FLM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
      throw Error("cuda", fmt::format("out of memory on cuda:{}: tried to allocate {} ({} bytes){}; {} allocated by "
                                      "tensors, {} reserved by the caching allocator ({} by the CUDA graph pool); "
                                      "the device has {} free of {}",
                                      device_, format_bytes(segment_size), requested,
                                      capture_stream_ != nullptr ? " during a CUDA graph capture" : "",
                                      format_bytes(stats_.allocated_bytes), format_bytes(stats_.reserved_bytes),
                                      format_bytes(stats_.graph_pool_reserved_bytes), format_bytes(free_bytes),
                                      format_bytes(total_bytes)));
    }
    if (status != cudaSuccess) throw_cuda_error("cudaMalloc(&pointer, segment_size)", status);
    stats_.reserved_bytes += segment_size;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    if (graph) stats_.graph_pool_reserved_bytes += segment_size;
    ++stats_.driver_allocations;
    auto* block = new Block();
    block->stream = stream;
    block->small = small;
    block->graph = graph;
    block->size = segment_size;
    block->pointer = static_cast<char*>(pointer);
    return block;
  }

  // Cuts `block` down to `size` and returns the rest to the pool, when the rest can serve a request of its pool
  // (any small request; a large remainder only if it exceeds the small-request limit).
  void split(Block* block, size_t size) {
    size_t remaining = block->size - size;
    if (block->small ? remaining < kBlockRounding : remaining <= kSmallRequest) return;
    auto* rest = new Block();
    rest->stream = block->stream;
    rest->small = block->small;
    rest->graph = block->graph;
    rest->size = remaining;
    rest->pointer = block->pointer + size;
    rest->previous = block;
    rest->next = block->next;
    if (block->next != nullptr) block->next->previous = rest;
    block->next = rest;
    block->size = size;
    pool_of(rest).insert(rest);
  }

  // Returns `block` to its pool, merged with whichever neighbours are free.
  void free_block(Block* block) {
    BlockPool& pool = pool_of(block);
    block->state = BlockState::free;
    if (Block* previous = block->previous; previous != nullptr && previous->state == BlockState::free) {
      pool.erase(previous);
      block->pointer = previous->pointer;
      block->size += previous->size;
      block->previous = previous->previous;
      if (block->previous != nullptr) block->previous->next = block;
      delete previous;
    }
    if (Block* next = block->next; next != nullptr && next->state == BlockState::free) {
      pool.erase(next);
      block->size += next->size;
      block->next = next->next;
      if (block->next != nullptr) block->next->previous = block;
      delete next;
    }
    pool.insert(block);
  }

  cudaEvent_t take_event() {
    if (!spare_events_.empty()) {
      cudaEvent_t event = spare_events_.back();
      spare_events_.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    // No timing: these events only order memory reuse, and timing makes record and query slower.
    FLM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    return event;
  }

  void finish_event(const PendingEvent& pending) {
    spare_events_.push_back(pending.event);
    if (--pending.block->pending_events == 0) free_block(pending.block);
  }

  // Frees the blocks whose recorded streams have all finished; never waits.
  void process_events() {
    size_t kept = 0;
    for (const PendingEvent& pending : pending_) {
      cudaError_t status = cudaEventQuery(pending.event);
      if (status == cudaErrorNotReady) {
        cudaGetLastError();  // not an error, but the runtime may still report it as the last one
        pending_[kept++] = pending;
        continue;
      }
      if (status != cudaSuccess) throw_cuda_error("cudaEventQuery(pending.event)", status);
      finish_event(pending);
    }
    pending_.resize(kept);
  }

  void wait_for_events() {
    for (const PendingEvent& pending : pending_) {
      FLM_CUDA_CHECK(cudaEventSynchronize(pending.event));
      finish_event(pending);
    }
    pending_.clear();
  }

  // Free blocks merge with free neighbours, so a segment with nothing in use is exactly one block with no
  // neighbours. cudaFree synchronises the device, so work still queued on these blocks has finished first. The graph
  // pools keep theirs.
  void release_free_segments() {
    for (BlockPool* pool : {&small_free_, &large_free_}) {
      for (auto iterator = pool->begin(); iterator != pool->end();) {
        Block* block = *iterator;
        if (block->previous != nullptr || block->next != nullptr) {
          ++iterator;
          continue;
        }
        FLM_CUDA_CHECK(cudaFree(block->pointer));
        stats_.reserved_bytes -= block->size;
        ++stats_.driver_frees;
        iterator = pool->erase(iterator);
        delete block;
      }
    }
  }

  const int device_;
  mutable std::mutex mutex_;
  BlockPool small_free_;
  BlockPool large_free_;
  BlockPool graph_small_free_;
  BlockPool graph_large_free_;
  std::unordered_map<void*, Block*> in_use_;
  std::vector<PendingEvent> pending_;
  cudaStream_t capture_stream_ = nullptr;  // the stream being captured, if any
  std::vector<cudaEvent_t> spare_events_;
  AllocatorStats stats_;
};

}  // namespace

namespace {

CachingAllocator& caching_allocator(int device) {
  // device_info checks the index against the probed devices, with a message naming how many there are.
  device_info(Device::cuda(device));
  // Leaked on purpose (see allocator.h): tensors in static objects may free into them while the process exits.
  static std::mutex mutex;
  static std::vector<CachingAllocator*> allocators(cuda_devices().size(), nullptr);
  std::lock_guard lock(mutex);
  CachingAllocator*& allocator = allocators[size_t(device)];
  if (allocator == nullptr) allocator = new CachingAllocator(device);
  return *allocator;
}

}  // namespace

Allocator& cuda_caching_allocator(int device) { return caching_allocator(device); }

void cuda_allocator_begin_graph_capture(int device, Stream stream) {
  caching_allocator(device).begin_graph_capture(stream);
}

void cuda_allocator_end_graph_capture(int device) { caching_allocator(device).end_graph_capture(); }

}  // namespace fast_llm::detail
