// FLM_CUBLAS_CHECK: checks a cuBLAS / cuBLASLt status like FLM_CUDA_CHECK checks the runtime's.
//
//   FLM_CUBLAS_CHECK(cublasLtMatmul(...));
//   -> throws fast_llm::Error: [cublas] cublasLtMatmul(...) failed: CUBLAS_STATUS_NOT_SUPPORTED (the functionality
//      requested is not supported)
#pragma once

#include <cublasLt.h>
#include <fmt/format.h>

#include <source_location>

#include "fast_llm/core/error.h"

namespace fast_llm::kernels::cuda {

[[noreturn]] inline void throw_cublas_error(const char* call, cublasStatus_t status,
                                            std::source_location location = std::source_location::current()) {
  throw Error("cublas",
              fmt::format("{} failed: {} ({})", call, cublasLtGetStatusName(status), cublasLtGetStatusString(status)),
              location);
}

}  // namespace fast_llm::kernels::cuda

#define FLM_CUBLAS_CHECK(call)                                                                                \
  do {                                                                                                        \
    const cublasStatus_t flm_cublas_status = (call);                                                          \
    if (flm_cublas_status != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                              \
      ::fast_llm::kernels::cuda::throw_cublas_error(#call, flm_cublas_status, std::source_location::current()); \
  } while (0)
