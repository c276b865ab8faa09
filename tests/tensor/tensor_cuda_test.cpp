// Tests of the CUDA side of tensor/: host <-> device copies, streams and events, the caching allocator (reuse
// without the driver, small segments, splitting and merging, per-stream pools, peaks, record_stream, release_cached,
// out of memory), and CUDA graphs (capture and replay, the allocator's graph pool, a capture that fails). Cases that
// need a GPU skip themselves when none is visible.
//
// The allocator is process-wide, so each case works on streams it creates (their pools start empty) and checks
// differences of the statistics.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "fast_llm/core/cuda/check.h"
#include "fast_llm/tensor/allocator.h"
#include "fast_llm/tensor/graph.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm {
namespace {

constexpr size_t kKiB = size_t(1) << 10;
constexpr size_t kMiB = size_t(1) << 20;

#define REQUIRE_GPU() \
  if (cuda_devices().empty()) GTEST_SKIP() << "no CUDA device visible"

// Holds a stream at a host callback until released, so that work queued on it behind the callback is still pending
// while the test looks at what the allocator or an event does. Releases itself and drains the stream when the test
// ends, passed or failed.
class StreamBlocker {
 public:
  explicit StreamBlocker(Stream stream) : stream_(static_cast<cudaStream_t>(stream.handle)) {
    FLM_CUDA_CHECK(cudaLaunchHostFunc(stream_, &StreamBlocker::wait, &released_));
  }
  ~StreamBlocker() {
    release();
    cudaStreamSynchronize(stream_);
  }
  void release() { released_.store(true); }

 private:
  static void wait(void* flag) {
    while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  cudaStream_t stream_;
  std::atomic<bool> released_{false};
};

bool is_device_pointer(const void* pointer) {
  cudaPointerAttributes attributes{};
  FLM_CUDA_CHECK(cudaPointerGetAttributes(&attributes, pointer));
  return attributes.type == cudaMemoryTypeDevice;
}

char* as_bytes(void* pointer) { return static_cast<char*>(pointer); }

TEST(CudaCheck, ThrowsWithTheCallAndTheErrorString) {
  // Runs without a GPU too: an invalid ordinal fails with or without a device.
  try {
    FLM_CUDA_CHECK(cudaSetDevice(-1));
    FAIL() << "cudaSetDevice(-1) succeeded";
  } catch (const Error& error) {
    EXPECT_EQ(error.component(), "cuda");
    EXPECT_TRUE(std::string(error.what()).starts_with("[cuda] cudaSetDevice(-1) failed: ")) << error.what();
  }
  // The failure does not linger as the thread's last error (without a driver every call reports the failed
  // initialisation again, so this part needs a GPU).
  if (!cuda_devices().empty()) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

TEST(CudaDevices, UnknownDeviceIsAnError) {
  try {
    Tensor::empty(Shape{4}, DType::float32, Device::cuda(99));
    FAIL() << "allocated on cuda:99";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("cuda:99 requested"), std::string::npos) << error.what();
  }
}

TEST(CudaStreams, ComputeStreamIsStableAndNotTheLegacyStream) {
  REQUIRE_GPU();
  Stream compute = compute_stream(Device::cuda());
  EXPECT_NE(compute.handle, nullptr);
  EXPECT_EQ(compute, compute_stream(Device::cuda()));
  Stream created = create_stream(Device::cuda());
  EXPECT_NE(created.handle, nullptr);
  EXPECT_NE(created, compute);
  unsigned flags = 0;
  FLM_CUDA_CHECK(cudaStreamGetFlags(static_cast<cudaStream_t>(compute.handle), &flags));
  EXPECT_EQ(flags & cudaStreamNonBlocking, unsigned(cudaStreamNonBlocking));
  // A tensor allocated with Stream{} belongs to the compute stream.
  Tensor tensor = Tensor::empty(Shape{8}, DType::float32, Device::cuda());
  EXPECT_EQ(tensor.storage()->stream(), compute);
}

TEST(CudaTensor, HostDeviceRoundTrip) {
  REQUIRE_GPU();
  std::vector<float> values(30);
  std::iota(values.begin(), values.end(), -7.0f);
  Tensor host = Tensor::from_values(values, Shape{2, 3, 5}, DType::bfloat16);
  Tensor device = host.to(Device::cuda());
  EXPECT_EQ(device.device(), Device::cuda(0));
  EXPECT_EQ(device.shape(), host.shape());
  EXPECT_TRUE(is_device_pointer(device.data()));
  Tensor back = device.to(Device::cpu());
  EXPECT_EQ(back.device(), Device::cpu());
  EXPECT_NE(back.data(), host.data());
  for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(back.data_as<bfloat16>()[i].bits, host.data_as<bfloat16>()[i].bits);
  // Views of a device tensor: item copies one element, to(cpu) gathers a strided view.
  EXPECT_EQ(device.select(0, 1).select(0, 2).select(0, 4).item(), double(values[29]));
  Tensor transposed = device.transpose(0, 2).slice(1, 1, 3).to(Device::cpu());
  EXPECT_EQ(transposed.shape(), Shape({5, 2, 2}));
  for (int64_t k = 0; k < 5; ++k)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < 2; ++i) {
        std::array<int64_t, 3> index{k, j, i};
        EXPECT_EQ(transposed.item_as_double(index), double(values[size_t(15 * i + 5 * (j + 1) + k)]));
      }
  // A strided host view goes to the device as a contiguous copy.
  Tensor from_strided = host.transpose(0, 1).to(Device::cuda()).to(Device::cpu());
  std::array<int64_t, 3> index{2, 1, 3};
  EXPECT_EQ(from_strided.item_as_double(index), double(values[15 + 10 + 3]));
}

TEST(CudaTensor, PrintsThroughTheHost) {
  REQUIRE_GPU();
  Tensor tensor = Tensor::from_values(std::vector<float>{1, 2.5f, -3, 4}, Shape{2, 2}).to(Device::cuda());
  EXPECT_EQ(tensor.str(),
            "Tensor(shape=(2, 2), dtype=float32, device=cuda:0)\n"
            "[[ 1.0000,  2.5000],\n"
            " [-3.0000,  4.0000]]");
}

TEST(CudaTensor, DeviceCopiesAndSetBytes) {
  REQUIRE_GPU();
  Stream stream = create_stream(Device::cuda());
  Tensor source = Tensor::from_values(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{6}, DType::int32)
                      .to(Device::cuda(), stream);
  Tensor destination = Tensor::empty(Shape{6}, DType::int32, Device::cuda(), stream);
  destination.copy_bytes_from(source, stream);
  set_bytes(destination.slice(0, 4, 6).data(), Device::cuda(), 0, 2 * sizeof(int32_t), stream);
  Tensor host = destination.to(Device::cpu(), stream);
  EXPECT_EQ((std::vector<int32_t>(host.data_as<int32_t>(), host.data_as<int32_t>() + 6)),
            (std::vector<int32_t>{1, 2, 3, 4, 0, 0}));
  // Device to host into an existing tensor, then wait on the stream.
  Tensor into = Tensor::empty(Shape{6}, DType::int32);
  into.copy_bytes_from(source, stream);
  synchronize(Device::cuda(), stream);
  EXPECT_EQ(into.data_as<int32_t>()[5], 6);
}

TEST(CudaAllocator, SameSizeAgainDoesNotReachTheDriver) {
  REQUIRE_GPU();
  Allocator& allocator = allocator_for(Device::cuda());
  Stream stream = create_stream(Device::cuda());
  void* first = allocator.allocate(3 * kMiB, stream);
  EXPECT_TRUE(is_device_pointer(first));
  allocator.deallocate(first, stream);
  AllocatorStats before = allocator.stats();
  void* second = allocator.allocate(3 * kMiB, stream);
  AllocatorStats after = allocator.stats();
  EXPECT_EQ(second, first);
  EXPECT_EQ(after.driver_allocations, before.driver_allocations);
  EXPECT_EQ(after.allocations, before.allocations + 1);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes);
  allocator.deallocate(second, stream);
  // Through tensors: a freed tensor's block goes to the next tensor of that size on that stream.
  void* data = nullptr;
  { data = Tensor::empty(Shape{1024}, DType::float32, Device::cuda(), stream).data(); }
  before = allocator.stats();
  Tensor again = Tensor::empty(Shape{1024}, DType::float32, Device::cuda(), stream);
  EXPECT_EQ(again.data(), data);
  EXPECT_EQ(allocator.stats().driver_allocations, before.driver_allocations);
}

TEST(CudaAllocator, SmallRequestsShareATwoMegabyteSegment) {
  REQUIRE_GPU();
  Allocator& allocator = allocator_for(Device::cuda());
  Stream stream = create_stream(Device::cuda());
  AllocatorStats before = allocator.stats();
  void* first = allocator.allocate(1000, stream);  // rounded to 1024
  AllocatorStats middle = allocator.stats();
  EXPECT_EQ(middle.driver_allocations, before.driver_allocations + 1);
  EXPECT_EQ(middle.reserved_bytes, before.reserved_bytes + 2 * kMiB);
  EXPECT_EQ(middle.allocated_bytes, before.allocated_bytes + 1024);
  void* second = allocator.allocate(1000, stream);
  AllocatorStats after = allocator.stats();
  EXPECT_EQ(after.driver_allocations, middle.driver_allocations);
  EXPECT_EQ(second, as_bytes(first) + 1024);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes + 2048);
  void* tiny = allocator.allocate(0, stream);  // still a distinct block of 512 bytes
  EXPECT_EQ(tiny, as_bytes(first) + 2048);
  allocator.deallocate(tiny, stream);
  allocator.deallocate(first, stream);
  allocator.deallocate(second, stream);
  EXPECT_EQ(allocator.stats().allocated_bytes, before.allocated_bytes);
}

TEST(CudaAllocator, FreeNeighboursMerge) {
  REQUIRE_GPU();
  Allocator& allocator = allocator_for(Device::cuda());
  Stream stream = create_stream(Device::cuda());
  AllocatorStats before = allocator.stats();
  std::vector<void*> blocks;
  for (int index = 0; index < 4; ++index) blocks.push_back(allocator.allocate(512 * kKiB, stream));
  EXPECT_EQ(allocator.stats().driver_allocations, before.driver_allocations + 1);
  for (int index = 1; index < 4; ++index) EXPECT_EQ(blocks[size_t(index)], as_bytes(blocks[0]) + index * 512 * kKiB);
  // Blocks 0 and 2 are free but not neighbours: no 1 MiB hole exists, so 1 MiB needs a new segment.
  allocator.deallocate(blocks[0], stream);
  allocator.deallocate(blocks[2], stream);
  void* elsewhere = allocator.allocate(kMiB, stream);
  EXPECT_EQ(allocator.stats().driver_allocations, before.driver_allocations + 2);
  // Freeing 1 and 3 joins each with the free blocks on both sides: the whole first segment is one free block.
  allocator.deallocate(blocks[1], stream);
  allocator.deallocate(blocks[3], stream);
  AllocatorStats merged = allocator.stats();
  void* rest = allocator.allocate(kMiB, stream);    // best fit: the exact 1 MiB left in the second segment
  void* joined = allocator.allocate(kMiB, stream);  // only the merged first segment can hold another
  EXPECT_EQ(rest, as_bytes(elsewhere) + kMiB);
  EXPECT_EQ(joined, blocks[0]);
  EXPECT_EQ(allocator.stats().driver_allocations, merged.driver_allocations);
  for (void* pointer : {elsewhere, rest, joined}) allocator.deallocate(pointer, stream);
  EXPECT_EQ(allocator.stats().allocated_bytes, before.allocated_bytes);
}

TEST(CudaAllocator, LargeBlocksSplit) {
  REQUIRE_GPU();
  Allocator& allocator = allocator_for(Device::cuda());
  Stream stream = create_stream(Device::cuda());
  AllocatorStats before = allocator.stats();
  void* whole = allocator.allocate(9 * kMiB, stream);  // a 10 MiB segment; the 1 MiB rest is too small to split off
  AllocatorStats held = allocator.stats();
  EXPECT_EQ(held.reserved_bytes, before.reserved_bytes + 10 * kMiB);
  EXPECT_EQ(held.allocated_bytes, before.allocated_bytes + 10 * kMiB);
  allocator.deallocate(whole, stream);
  void* first = allocator.allocate(4 * kMiB, stream);
  void* second = allocator.allocate(5 * kMiB, stream);
  AllocatorStats after = allocator.stats();
  EXPECT_EQ(first, whole);
  EXPECT_EQ(second, as_bytes(whole) + 4 * kMiB);
  EXPECT_EQ(after.driver_allocations, held.driver_allocations);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes + 10 * kMiB);  // 4 MiB + (5 MiB with its 1 MiB rest)
  allocator.deallocate(first, stream);
  allocator.deallocate(second, stream);
  // Merged back: the whole segment serves a 10 MiB request.
  void* merged = allocator.allocate(10 * kMiB, stream);
  EXPECT_EQ(merged, whole);
  EXPECT_EQ(allocator.stats().driver_allocations, held.driver_allocations);
  allocator.deallocate(merged, stream);
}

TEST(CudaAllocator, StreamsHaveSeparatePools) {
  REQUIRE_GPU();
  Allocator& allocator = allocator_for(Device::cuda());
  Stream first_stream = create_stream(Device::cuda()), second_stream = create_stream(Device::cuda());
  void* block = allocator.allocate(3 * kMiB, first_stream);
  allocator.deallocate(block, first_stream);
  AllocatorStats before = allocator.stats();
  void* other = allocator.allocate(3 * kMiB, second_stream);
  EXPECT_NE(other, block);
  EXPECT_EQ(allocator.stats().driver_allocations, before.driver_allocations + 1);
  void* again = allocator.allocate(3 * kMiB, first_stream);
  EXPECT_EQ(again, block);
  allocator.deallocate(other, second_stream);
  allocator.deallocate(again, first_stream);
}

TEST(CudaAllocator, PeakStatistics) {
  REQUIRE_GPU();
  Allocator& allocator = allocator_for(Device::cuda());
  Stream stream = create_stream(Device::cuda());
  allocator.reset_peak();
  AllocatorStats before = allocator.stats();
  EXPECT_EQ(before.peak_allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(before.peak_reserved_bytes, before.reserved_bytes);
  void* big = allocator.allocate(8 * kMiB, stream);
  void* small = allocator.allocate(4 * kMiB, stream);
  allocator.deallocate(big, stream);
  allocator.deallocate(small, stream);
  void* later = allocator.allocate(2 * kMiB, stream);  // reuses cached memory: no new peak
  allocator.deallocate(later, stream);
  AllocatorStats after = allocator.stats();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.peak_allocated_bytes, before.allocated_bytes + 12 * kMiB);
  EXPECT_EQ(after.peak_reserved_bytes, before.reserved_bytes + 12 * kMiB);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes + 12 * kMiB);  // cached, not returned
  allocator.reset_peak();
  EXPECT_EQ(allocator.stats().peak_allocated_bytes, after.allocated_bytes);
  EXPECT_EQ(allocator.stats().peak_reserved_bytes, after.reserved_bytes);
}

TEST(CudaAllocator, RecordStreamDelaysReuseUntilThatStreamIsDone) {
  REQUIRE_GPU();
  Allocator& allocator = allocator_for(Device::cuda());
  Stream owner = create_stream(Device::cuda()), user = create_stream(Device::cuda());
  void* block = allocator.allocate(256 * kKiB, owner);
  {
    StreamBlocker blocker(user);
    allocator.record_stream(block, user);
    allocator.deallocate(block, owner);
    // `user` has not reached the point recorded at free time: the block must not be handed out.
    void* other = allocator.allocate(256 * kKiB, owner);
    EXPECT_NE(other, block);
    blocker.release();
    synchronize(Device::cuda(), user);
    void* reused = allocator.allocate(256 * kKiB, owner);
    EXPECT_EQ(reused, block);
    allocator.deallocate(other, owner);
    allocator.deallocate(reused, owner);
  }
  // The same through Tensor::record_stream.
  Tensor tensor = Tensor::empty(Shape{64 * 1024}, DType::float32, Device::cuda(), owner);
  void* data = tensor.data();
  {
    StreamBlocker blocker(user);
    tensor.record_stream(user);
    tensor = Tensor();
    Tensor next = Tensor::empty(Shape{64 * 1024}, DType::float32, Device::cuda(), owner);
    EXPECT_NE(next.data(), data);
  }
  Tensor after = Tensor::empty(Shape{64 * 1024}, DType::float32, Device::cuda(), owner);
  EXPECT_EQ(after.data(), data);
  // Recording on the owning stream changes nothing; an unknown pointer is an error.
  void* plain = allocator.allocate(kKiB, owner);
  allocator.record_stream(plain, owner);
  allocator.deallocate(plain, owner);
  EXPECT_EQ(allocator.allocate(kKiB, owner), plain);
  allocator.deallocate(plain, owner);
  int local = 0;
  EXPECT_THROW(allocator.record_stream(&local, user), Error);
}

TEST(CudaAllocator, ReleaseCachedReturnsFreeSegments) {
  REQUIRE_GPU();
  Allocator& allocator = allocator_for(Device::cuda());
  Stream stream = create_stream(Device::cuda());
  void* kept = allocator.allocate(kKiB, stream);  // keeps its 2 MiB segment in use
  void* cached = allocator.allocate(4 * kMiB, stream);
  allocator.deallocate(cached, stream);
  AllocatorStats before = allocator.stats();
  allocator.release_cached();
  AllocatorStats after = allocator.stats();
  EXPECT_LE(after.reserved_bytes, before.reserved_bytes - 4 * kMiB);
  EXPECT_GE(after.reserved_bytes, after.allocated_bytes);
  EXPECT_GE(after.reserved_bytes, 2 * kMiB);
  EXPECT_GT(after.driver_frees, before.driver_frees);
  // The block still in use survived and is usable.
  set_bytes(kept, Device::cuda(), 0x5a, kKiB, stream);
  unsigned char byte = 0;
  copy_bytes(&byte, Device::cpu(), as_bytes(kept) + kKiB - 1, Device::cuda(), 1, stream);
  synchronize(Device::cuda(), stream);
  EXPECT_EQ(byte, 0x5a);
  // The released size comes from the driver again.
  void* again = allocator.allocate(4 * kMiB, stream);
  EXPECT_EQ(allocator.stats().driver_allocations, after.driver_allocations + 1);
  allocator.deallocate(again, stream);
  allocator.deallocate(kept, stream);
}

TEST(CudaAllocator, OutOfMemoryIsAnErrorThatSaysHowMuch) {
  REQUIRE_GPU();
  Allocator& allocator = allocator_for(Device::cuda());
  Stream stream = create_stream(Device::cuda());
  void* cached = allocator.allocate(4 * kMiB, stream);
  allocator.deallocate(cached, stream);
  AllocatorStats before = allocator.stats();
  try {
    allocator.allocate(size_t(1) << 50, stream);  // 1 PiB
    FAIL() << "allocated 1 PiB";
  } catch (const Error& error) {
    std::string message = error.what();
    EXPECT_TRUE(message.starts_with("[cuda] out of memory on cuda:0: tried to allocate 1.00 PiB")) << message;
    EXPECT_NE(message.find("allocated by tensors"), std::string::npos) << message;
    EXPECT_NE(message.find("reserved by the caching allocator"), std::string::npos) << message;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // Cached segments were released before giving up, and the allocator still works.
  AllocatorStats after = allocator.stats();
  EXPECT_LE(after.reserved_bytes, before.reserved_bytes - 4 * kMiB);
  void* block = allocator.allocate(kMiB, stream);
  allocator.deallocate(block, stream);
}

TEST(CudaAllocator, ConcurrentUseFromThreads) {
  REQUIRE_GPU();
  Allocator& allocator = allocator_for(Device::cuda());
  AllocatorStats before = allocator.stats();
  std::vector<std::thread> threads;
  for (int thread = 0; thread < 4; ++thread)
    threads.emplace_back([&allocator, thread] {
      Stream stream = create_stream(Device::cuda());
      std::vector<void*> live;
      for (int iteration = 0; iteration < 500; ++iteration) {
        live.push_back(allocator.allocate(size_t(1 + (iteration * 7 + thread) % 13) * 100 * kKiB, stream));
        if (live.size() > 8) {
          allocator.deallocate(live.front(), stream);
          live.erase(live.begin());
        }
      }
      for (void* pointer : live) allocator.deallocate(pointer, stream);
    });
  for (auto& thread : threads) thread.join();
  AllocatorStats after = allocator.stats();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.allocations, before.allocations + 2000);
}

TEST(CudaEvents, OrderStreamsWithoutTheHost) {
  REQUIRE_GPU();
  Stream producer = create_stream(Device::cuda()), consumer = create_stream(Device::cuda());
  Tensor buffer = Tensor::empty(Shape{1024}, DType::uint8, Device::cuda(), consumer);
  Event event(Device::cuda());
  {
    StreamBlocker blocker(producer);
    event.record(producer);
    event.wait(consumer);
    set_bytes(buffer.data(), Device::cuda(), 7, 1024, consumer);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // The consumer's memset waits behind the event, which waits behind the blocked producer.
    EXPECT_EQ(cudaStreamQuery(static_cast<cudaStream_t>(consumer.handle)), cudaErrorNotReady);
    cudaGetLastError();
    blocker.release();
    event.synchronize();
  }
  synchronize(Device::cuda(), consumer);
  EXPECT_EQ(cudaStreamQuery(static_cast<cudaStream_t>(consumer.handle)), cudaSuccess);
  EXPECT_EQ(buffer.to(Device::cpu(), consumer).data_as<uint8_t>()[1023], 7);
}

TEST(CudaEvents, ElapsedTime) {
  REQUIRE_GPU();
  Stream stream = create_stream(Device::cuda());
  Event start(Device::cuda()), end(Device::cuda());
  {
    start.record(stream);
    StreamBlocker blocker(stream);
    end.record(stream);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    blocker.release();
    end.synchronize();
  }
  float milliseconds = start.elapsed_ms(end);
  EXPECT_GE(milliseconds, 25.0f);
  EXPECT_LT(milliseconds, 10000.0f);
  // Stream{} records on the compute stream.
  Event on_compute(Device::cuda());
  on_compute.record(Stream{});
  on_compute.synchronize();
}

// 4 KiB on the GPU, ordered on `stream`, every byte `value`.
Tensor byte_buffer(int value, Stream stream) {
  Tensor buffer = Tensor::empty(Shape{4096}, DType::uint8, Device::cuda(), stream);
  set_bytes(buffer.data(), Device::cuda(), value, buffer.nbytes(), stream);
  return buffer;
}

// The first byte of a device buffer, read on `stream`.
unsigned char first_byte(const void* pointer, Stream stream) {
  unsigned char byte = 0;
  copy_bytes(&byte, Device::cpu(), pointer, Device::cuda(), 1, stream);
  synchronize(Device::cuda(), stream);
  return byte;
}

TEST(CudaGraph, CapturedWorkRunsAtEachLaunchNotDuringTheCapture) {
  REQUIRE_GPU();
  const Device device = Device::cuda();
  const Stream stream = create_stream(device);
  Tensor source = byte_buffer(1, stream);
  Tensor destination = byte_buffer(0, stream);
  Graph graph;
  EXPECT_FALSE(is_capturing(device, stream));
  {
    GraphCapture capture(device, stream);
    EXPECT_TRUE(is_capturing(device, stream));
    EXPECT_FALSE(is_capturing(device, compute_stream(device)));
    copy_bytes(destination.data(), device, source.data(), device, source.nbytes(), stream);
    graph = capture.finish();
  }
  EXPECT_FALSE(is_capturing(device, stream));
  ASSERT_TRUE(graph.defined());
  EXPECT_EQ(first_byte(destination.data(), stream), 0);  // recorded, not run
  for (unsigned char value : {7, 9}) {
    set_bytes(source.data(), device, value, source.nbytes(), stream);
    graph.launch(stream);
    EXPECT_EQ(first_byte(destination.data(), stream), value);
  }
}

TEST(CudaGraph, AllocationsOfTheCapturedStreamComeFromTheGraphPool) {
  REQUIRE_GPU();
  const Device device = Device::cuda();
  Allocator& allocator = allocator_for(device);
  const Stream stream = create_stream(device);
  const Stream other = create_stream(device);
  // Cached in the ordinary pool: a capture gives it back to the driver before it begins.
  allocator.deallocate(allocator.allocate(4 * kMiB, other), other);
  const AllocatorStats before = allocator.stats();
  void* small = nullptr;
  void* large = nullptr;
  Graph graph;
  {
    GraphCapture capture(device, stream);
    small = allocator.allocate(256 * kKiB, stream);
    set_bytes(small, device, 3, 256 * kKiB, stream);
    allocator.deallocate(small, stream);
    // Freed during the capture: reused within it (the graph orders the two uses).
    void* again = allocator.allocate(256 * kKiB, stream);
    EXPECT_EQ(again, small);
    large = allocator.allocate(4 * kMiB, stream);
    set_bytes(large, device, 4, 4 * kMiB, stream);
    // Another stream's allocations stay ordinary.
    allocator.deallocate(allocator.allocate(kKiB, other), other);
    graph = capture.finish();
    allocator.deallocate(again, stream);
  }
  const AllocatorStats after = allocator.stats();
  // One small segment and one large one, counted in reserved too; `large` still counts as allocated.
  EXPECT_EQ(after.graph_pool_reserved_bytes, before.graph_pool_reserved_bytes + 2 * kMiB + 4 * kMiB);
  EXPECT_GE(after.reserved_bytes, after.graph_pool_reserved_bytes);
  EXPECT_GE(after.allocated_bytes, before.allocated_bytes + 4 * kMiB);
  EXPECT_GE(after.peak_reserved_bytes, after.reserved_bytes);
  // The 4 MiB cached on `other` was given back to the driver when the capture began.
  EXPECT_GT(after.driver_frees, before.driver_frees);
  // After the capture, ordinary allocations on the same stream never get graph-pool blocks...
  void* ordinary = allocator.allocate(256 * kKiB, stream);
  EXPECT_NE(ordinary, small);
  allocator.deallocate(ordinary, stream);
  // ... release_cached leaves the graph pool alone...
  allocator.release_cached();
  EXPECT_EQ(allocator.stats().graph_pool_reserved_bytes, after.graph_pool_reserved_bytes);
  // ... and the next capture on the stream reuses the graph pool's free blocks, without the driver.
  const uint64_t driver_allocations = allocator.stats().driver_allocations;
  {
    GraphCapture capture(device, stream);
    void* reused = allocator.allocate(256 * kKiB, stream);
    EXPECT_EQ(reused, small);
    set_bytes(reused, device, 5, 256 * kKiB, stream);
    allocator.deallocate(reused, stream);
    capture.finish();
  }
  EXPECT_EQ(allocator.stats().driver_allocations, driver_allocations);
  graph.launch(stream);
  EXPECT_EQ(first_byte(large, stream), 4);
  allocator.deallocate(large, stream);
  EXPECT_EQ(allocator.stats().graph_pool_reserved_bytes, after.graph_pool_reserved_bytes);
}

TEST(CudaGraph, OrdinaryBlocksFreedDuringACaptureAreNeverReused) {
  REQUIRE_GPU();
  const Device device = Device::cuda();
  const Stream stream = create_stream(device);
  Tensor before = byte_buffer(5, stream);
  Tensor destination = byte_buffer(0, stream);
  void* address = before.data();
  Graph graph;
  {
    GraphCapture capture(device, stream);
    // The graph reads `before` at every launch, so its memory must not go to a later allocation.
    copy_bytes(destination.data(), device, before.data(), device, before.nbytes(), stream);
    before = Tensor();
    graph = capture.finish();
  }
  Tensor after = byte_buffer(9, stream);
  EXPECT_NE(after.data(), address);
  graph.launch(stream);
  EXPECT_EQ(first_byte(destination.data(), stream), 5);
  // The same for a block of another stream recorded on the captured one (record_stream), even once both are idle.
  Allocator& allocator = allocator_for(device);
  const Stream owner = create_stream(device);
  void* shared = allocator.allocate(256 * kKiB, owner);
  set_bytes(shared, device, 4, 256 * kKiB, owner);
  synchronize(device, owner);
  allocator.record_stream(shared, stream);
  {
    GraphCapture capture(device, stream);
    copy_bytes(destination.data(), device, shared, device, destination.nbytes(), stream);
    allocator.deallocate(shared, owner);
    graph = capture.finish();
  }
  synchronize_device(device);
  void* reused = allocator.allocate(256 * kKiB, owner);
  EXPECT_NE(reused, shared);
  set_bytes(reused, device, 7, 256 * kKiB, owner);
  synchronize(device, owner);
  graph.launch(stream);
  EXPECT_EQ(first_byte(destination.data(), stream), 4);
  allocator.deallocate(reused, owner);
}

TEST(CudaGraph, AFailedCaptureEndsCleanlyAndTheStreamRunsAgain) {
  REQUIRE_GPU();
  const Device device = Device::cuda();
  const Stream stream = create_stream(device);
  Tensor buffer = byte_buffer(0, stream);
  std::string message;
  try {
    GraphCapture capture(device, stream);
    set_bytes(buffer.data(), device, 8, buffer.nbytes(), stream);
    synchronize(device, stream);  // the host cannot wait for work that is only being recorded
    capture.finish();
  } catch (const Error& error) {
    message = error.what();
  }
  EXPECT_NE(message.find("cudaStreamSynchronize"), std::string::npos) << message;
  EXPECT_FALSE(is_capturing(device, stream));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(first_byte(buffer.data(), stream), 0);  // the recorded memset never ran
  set_bytes(buffer.data(), device, 6, buffer.nbytes(), stream);
  EXPECT_EQ(first_byte(buffer.data(), stream), 6);
  // The allocator left its capture too: a new one can begin, and works.
  Graph graph;
  {
    GraphCapture capture(device, stream);
    set_bytes(buffer.data(), device, 2, buffer.nbytes(), stream);
    graph = capture.finish();
  }
  graph.launch(stream);
  EXPECT_EQ(first_byte(buffer.data(), stream), 2);
}

}  // namespace
}  // namespace fast_llm
