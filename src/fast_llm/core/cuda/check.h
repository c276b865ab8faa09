// FLM_CUDA_CHECK: the one macro that checks every CUDA runtime status (host code and launchers alike).
//
//   FLM_CUDA_CHECK(cudaMalloc(&pointer, bytes));
//   -> throws fast_llm::Error: [cuda] cudaMalloc(&pointer, bytes) failed: out of memory (cudaErrorMemoryAllocation)
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <source_location>

#include "fast_llm/core/error.h"

namespace fast_llm::detail {

[[noreturn]] inline void throw_cuda_error(const char* call, cudaError_t status,
                                          std::source_location location = std::source_location::current()) {
  // The runtime also keeps the status as the thread's "last error"; clearing it keeps a later, unrelated
  // cudaGetLastError (e.g. after a kernel launch) from reporting this failure a second time.
  cudaGetLastError();
  throw Error("cuda", fmt::format("{} failed: {} ({})", call, cudaGetErrorString(status), cudaGetErrorName(status)),
              location);
}

}  // namespace fast_llm::detail

#define FLM_CUDA_CHECK(call)                                                                                  \
  do {                                                                                                        \
    const cudaError_t flm_cuda_status = (call);                                                               \
    if (flm_cuda_status != cudaSuccess) [[unlikely]]                                                          \
      ::fast_llm::detail::throw_cuda_error(#call, flm_cuda_status, std::source_location::current());          \
  } while (0)
