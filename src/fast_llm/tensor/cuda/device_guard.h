// Makes a CUDA device current for a scope and restores the previous one: the runtime's current device is
// per-thread state, and fast-llm code must not leave it changed behind a caller's back.
#pragma once

#include <cuda_runtime_api.h>

#include "fast_llm/core/cuda/check.h"

namespace fast_llm::detail {

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) : device_(device) {
    FLM_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device_) FLM_CUDA_CHECK(cudaSetDevice(device_));
  }
  ~CudaDeviceGuard() {
    // Going back to a device that was current a moment ago cannot fail for a reason a destructor could act on.
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

}  // namespace fast_llm::detail
