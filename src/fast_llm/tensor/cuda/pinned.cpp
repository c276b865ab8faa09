// Page-locked host memory through the CUDA runtime (Tensor::empty_pinned): the copy engines read and write it directly,
// so a cudaMemcpyAsync from or to it is truly asynchronous (from pageable memory the driver stages it first).
#include <cuda_runtime_api.h>

#include "fast_llm/core/cuda/check.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/tensor/allocator.h"

namespace fast_llm::detail {

void* cuda_host_allocate(size_t bytes) {
  void* pointer = nullptr;
  // Portable: usable with every device of the process, whichever is current.
  FLM_CUDA_CHECK(cudaHostAlloc(&pointer, bytes > 0 ? bytes : 1, cudaHostAllocPortable));
  return pointer;
}

void cuda_host_free(void* pointer) {
  if (pointer == nullptr) return;
  // Runs from a tensor's storage destructor, which cannot throw; a failure leaks the block and is reported.
  const cudaError_t status = cudaFreeHost(pointer);
  if (status != cudaSuccess && status != cudaErrorCudartUnloading) {
    log_error("[cuda] cudaFreeHost failed: {}", cudaGetErrorString(status));
    cudaGetLastError();
  }
}

}  // namespace fast_llm::detail
