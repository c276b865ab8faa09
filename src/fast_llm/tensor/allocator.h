// Device memory allocators with statistics.
//
// CPU: 64-byte aligned allocations (OpenBLAS and AVX-512 friendly). CUDA: a stream-aware caching allocator in the
// spirit of PyTorch's: freed blocks return to a pool of the stream they were allocated on and are reused by later
// allocations on that stream without synchronisation; large blocks are split; `release_cached` returns unused
// segments to the driver. A block used on another stream must be recorded with `record_stream` before it is freed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fast_llm/core/device.h"
#include "fast_llm/tensor/stream.h"

namespace fast_llm {

struct AllocatorStats {
  size_t allocated_bytes = 0;       // in use by tensors now
  size_t peak_allocated_bytes = 0;  // since start or `reset_peak`
  size_t reserved_bytes = 0;        // held from the driver (in use + cached)
  size_t peak_reserved_bytes = 0;
  uint64_t allocations = 0;        // number of allocate calls
  uint64_t driver_allocations = 0;  // allocations that reached the driver (cudaMalloc / aligned_alloc)
  uint64_t driver_frees = 0;        // memory returned to the driver (cudaFree / free)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes, Stream stream) = 0;
  virtual void deallocate(void* pointer, Stream stream) = 0;
  // Marks that `pointer` is also used on `stream`: its reuse waits for that stream's work queued so far.
  virtual void record_stream(void* pointer, Stream stream) {}
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
  virtual void release_cached() {}
};

// The process-wide allocator for a device (created on first use, never destroyed: tensors held by other static
// objects may still free into it while the process exits).
Allocator& allocator_for(Device device);

namespace detail {
// The CUDA caching allocator of one device (tensor/cuda/). A build without CUDA links tensor/no_cuda_backend.cpp
// instead, where this and the functions below throw NotSupportedError ("this build has no CUDA backend").
Allocator& cuda_caching_allocator(int device);
// Page-locked host memory (Tensor::empty_pinned, tensor/cuda/pinned.cpp). Freeing never throws (it runs in
// destructors) and reports a failure instead.
void* cuda_host_allocate(size_t bytes);
void cuda_host_free(void* pointer);
}  // namespace detail

}  // namespace fast_llm
