// CUDA device probing (CUDA runtime API only, no kernels).
#include <cuda_runtime_api.h>

#include "fast_llm/core/cuda/check.h"
#include "fast_llm/core/device.h"
#include "fast_llm/core/logging.h"

namespace fast_llm::detail {

std::vector<DeviceInfo> probe_cuda_devices() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    // No driver or no device is a normal situation for a CPU run; say why once, at debug level.
    log_debug("no CUDA device: {}", cudaGetErrorString(status));
    cudaGetLastError();
    return {};
  }
  std::vector<DeviceInfo> devices;
  for (int index = 0; index < count; ++index) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, index) != cudaSuccess) continue;
    devices.push_back(DeviceInfo{
        .device = Device::cuda(index),
        .name = properties.name,
        .compute_capability_major = properties.major,
        .compute_capability_minor = properties.minor,
        .total_memory = properties.totalGlobalMem,
        .multiprocessor_count = properties.multiProcessorCount,
        .l2_cache_bytes = size_t(properties.l2CacheSize),
        .shared_memory_per_block_optin = properties.sharedMemPerBlockOptin,
    });
  }
  return devices;
}

bool cuda_backend_compiled() { return true; }

size_t cuda_free_memory(int index) {
  int previous = 0;
  FLM_CUDA_CHECK(cudaGetDevice(&previous));
  FLM_CUDA_CHECK(cudaSetDevice(index));
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t status = cudaMemGetInfo(&free_bytes, &total_bytes);
  FLM_CUDA_CHECK(cudaSetDevice(previous));
  FLM_CUDA_CHECK(status);
  return free_bytes;
}

}  // namespace fast_llm::detail
