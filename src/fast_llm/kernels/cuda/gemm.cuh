// What benchmarks need to call cuBLASLt as the `gemm:cuda:cublaslt` variant (gemm.cu) does: its workspace size and the
// algorithm it runs for a problem.
#pragma once

#include <cublasLt.h>

#include <cstddef>

#include "fast_llm/kernels/gemm.h"

namespace fast_llm::kernels::cuda {

// Workspace given to every cuBLASLt matmul (one buffer per device and stream): what Hopper kernels use at most.
inline constexpr size_t kCublasLtWorkspaceBytes = size_t(32) << 20;
// The algorithm gemm_cublaslt runs for `args`, cached per problem: the heuristic's first choice, or with autotuning
// the fastest candidate once a call with these arguments has run.
cublasLtMatmulAlgo_t gemm_cublaslt_algorithm(const GemmArgs& args);

}  // namespace fast_llm::kernels::cuda
