// CUDA launcher of gemm (kernels/gemm.h), registered as `gemm:cuda:cublaslt` in gemm.cu, and what benchmarks need to
// call cuBLASLt the same way directly.
#pragma once

#include <cublasLt.h>

#include <cstddef>

#include "fast_llm/kernels/gemm.h"

namespace fast_llm::kernels::cuda {

std::optional<std::string> gemm_cublaslt_supports(const GemmArgs& args);
void gemm_cublaslt(const GemmArgs& args);

// Workspace given to every cuBLASLt matmul (one buffer per device and stream): what Hopper kernels use at most.
inline constexpr size_t kCublasLtWorkspaceBytes = size_t(32) << 20;
// The process's cuBLASLt handle for `device` (created on first use).
cublasLtHandle_t cublaslt_handle(Device device);
// The algorithm gemm_cublaslt runs for `args`, cached per problem: the heuristic's first choice, or with autotuning
// the fastest candidate once a call with these arguments has run.
cublasLtMatmulAlgo_t gemm_cublaslt_algorithm(const GemmArgs& args);

}  // namespace fast_llm::kernels::cuda
