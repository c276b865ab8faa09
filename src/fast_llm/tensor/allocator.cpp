// The CPU allocator (64-byte aligned, with statistics) and the per-device allocator registry.
#include "fast_llm/tensor/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "fast_llm/core/error.h"

namespace fast_llm {

namespace {

// 64 bytes is a cache line and an AVX-512 register: vector loads from the start of any tensor are aligned.
constexpr size_t kCpuAlignment = 64;

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, Stream stream) override {
    // aligned_alloc wants a multiple of the alignment; a zero-byte request still gets a unique pointer, so every
    // storage owns a distinct address.
    size_t rounded = std::max(kCpuAlignment, (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment);
    void* pointer = std::aligned_alloc(kCpuAlignment, rounded);
    std::lock_guard lock(mutex_);
    FLM_CHECK(pointer != nullptr, "cpu", "out of memory: tried to allocate {} bytes with {} bytes allocated", bytes,
              stats_.allocated_bytes);
    sizes_.emplace(pointer, rounded);
    stats_.allocated_bytes += rounded;
    stats_.reserved_bytes += rounded;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    ++stats_.allocations;
    ++stats_.driver_allocations;
    return pointer;
  }

  void deallocate(void* pointer, Stream stream) override {
    if (pointer == nullptr) return;
    {
      std::lock_guard lock(mutex_);
      auto found = sizes_.find(pointer);
      FLM_ASSERT(found != sizes_.end(), "cpu deallocate of a pointer this allocator does not own");
      stats_.allocated_bytes -= found->second;
      stats_.reserved_bytes -= found->second;
      ++stats_.driver_frees;
      sizes_.erase(found);
    }
    std::free(pointer);
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

 private:
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> sizes_;
  AllocatorStats stats_;
};

}  // namespace

Allocator& allocator_for(Device device) {
  if (device.is_cuda()) return detail::cuda_caching_allocator(device.index);
  // Leaked on purpose (see the header): static tensors elsewhere may free into it during exit.
  static auto* cpu_allocator = new CpuAllocator();
  return *cpu_allocator;
}

}  // namespace fast_llm
