// Device memory allocators with statistics.
//
// CPU: 64-byte aligned allocations (OpenBLAS and AVX-512 friendly). CUDA: a stream-aware caching allocator in the
// spirit of PyTorch's: freed blocks return to a pool of the stream they were allocated on and are reused by later
// allocations on that stream without synchronisation; large blocks are split; `release_cached` returns unused
// segments to the driver. A block used on another stream must be recorded with `record_stream` before it is freed.
//
// CUDA graphs (tensor/graph.h): while a stream is being captured, every allocation ordered on it comes from the
// device's graph pool, a separate set of segments whose blocks never serve ordinary allocations and never go back to
// the driver: a captured graph keeps reading and writing the addresses it was captured with, also those freed during
// or after its capture, so they must stay reserved for graphs. All graphs of a device share the pool, which is sound
// as long as they run one after another on the stream they were captured on and no graph's intermediate data is read
// by another.
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
  size_t graph_pool_reserved_bytes = 0;  // the part of reserved_bytes held by the CUDA graph pool
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
// The graph pool of the caching allocator of `device` (see above), for tensor/graph.h's GraphCapture: from `begin`
// to `end`, allocations ordered on `stream` come from the graph pool. The first `begin` gives the free cached
// segments of the ordinary pools back to the driver first, so that the graph pool does not double the memory peak.
// One capture at a time per device.
void cuda_allocator_begin_graph_capture(int device, Stream stream);
void cuda_allocator_end_graph_capture(int device);
}  // namespace detail

}  // namespace fast_llm
