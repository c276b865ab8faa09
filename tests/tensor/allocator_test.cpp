// Tests of the CPU allocator: alignment, statistics (deltas, since the allocator is process-wide), peaks and
// thread safety.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "fast_llm/tensor/allocator.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm {
namespace {

TEST(CpuAllocator, AlignsTo64Bytes) {
  Allocator& allocator = allocator_for(Device::cpu());
  for (size_t bytes : {size_t(0), size_t(1), size_t(63), size_t(65), size_t(1000), size_t(1) << 20}) {
    void* pointer = allocator.allocate(bytes, Stream{});
    ASSERT_NE(pointer, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pointer) % 64, 0u) << bytes << " bytes";
    std::memset(pointer, 0xab, bytes);  // the whole request is writable (ASan would catch a short block)
    allocator.deallocate(pointer, Stream{});
  }
}

TEST(CpuAllocator, SameAllocatorForTheDevice) {
  EXPECT_EQ(&allocator_for(Device::cpu()), &allocator_for(Device::cpu()));
}

TEST(CpuAllocator, StatsCountRoundedBytes) {
  Allocator& allocator = allocator_for(Device::cpu());
  AllocatorStats before = allocator.stats();
  {
    Tensor tensor = Tensor::empty(Shape{25}, DType::float32);  // 100 bytes, held as 128
    AllocatorStats during = allocator.stats();
    EXPECT_EQ(during.allocated_bytes, before.allocated_bytes + 128);
    EXPECT_EQ(during.reserved_bytes, before.reserved_bytes + 128);
    EXPECT_EQ(during.allocations, before.allocations + 1);
    EXPECT_EQ(during.driver_allocations, before.driver_allocations + 1);
    EXPECT_GE(during.peak_allocated_bytes, during.allocated_bytes);
    EXPECT_EQ(during.driver_frees, before.driver_frees);
  }
  AllocatorStats after = allocator.stats();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes);
  EXPECT_EQ(after.driver_frees, before.driver_frees + 1);
}

TEST(CpuAllocator, PeakAndReset) {
  Allocator& allocator = allocator_for(Device::cpu());
  allocator.reset_peak();
  AllocatorStats before = allocator.stats();
  EXPECT_EQ(before.peak_allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(before.peak_reserved_bytes, before.reserved_bytes);
  {
    Tensor first = Tensor::empty(Shape{1 << 18}, DType::float32);  // 1 MiB
    Tensor second = Tensor::empty(Shape{1 << 17}, DType::float32);  // 512 KiB
  }
  { Tensor third = Tensor::empty(Shape{1 << 16}, DType::float32); }  // 256 KiB, after both were freed
  AllocatorStats after = allocator.stats();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.peak_allocated_bytes, before.allocated_bytes + (size_t(3) << 19));
  EXPECT_EQ(after.peak_reserved_bytes, before.reserved_bytes + (size_t(3) << 19));
  allocator.reset_peak();
  EXPECT_EQ(allocator.stats().peak_allocated_bytes, after.allocated_bytes);
}

TEST(CpuAllocator, ConcurrentAllocationsKeepStatsConsistent) {
  Allocator& allocator = allocator_for(Device::cpu());
  AllocatorStats before = allocator.stats();
  constexpr int kThreads = 4, kIterations = 2000;
  std::vector<std::thread> threads;
  for (int thread = 0; thread < kThreads; ++thread)
    threads.emplace_back([&allocator, thread] {
      for (int iteration = 0; iteration < kIterations; ++iteration) {
        void* pointer = allocator.allocate(size_t(64 * (1 + (iteration + thread) % 7)), Stream{});
        allocator.deallocate(pointer, Stream{});
      }
    });
  for (auto& thread : threads) thread.join();
  AllocatorStats after = allocator.stats();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.allocations, before.allocations + kThreads * kIterations);
  EXPECT_EQ(after.driver_frees, before.driver_frees + kThreads * kIterations);
}

TEST(CpuAllocator, ReleaseCachedAndRecordStreamAreNoOps) {
  Allocator& allocator = allocator_for(Device::cpu());
  void* pointer = allocator.allocate(64, Stream{});
  allocator.record_stream(pointer, Stream{});
  AllocatorStats before = allocator.stats();
  allocator.release_cached();
  EXPECT_EQ(allocator.stats().reserved_bytes, before.reserved_bytes);
  allocator.deallocate(pointer, Stream{});
}

}  // namespace
}  // namespace fast_llm
