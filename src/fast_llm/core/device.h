// Devices: the CPU and CUDA GPUs, probed once at start-up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fast_llm {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;
  // "cpu" or "cuda:N".
  std::string str() const;
};

std::string_view device_type_name(DeviceType type);

struct DeviceInfo {
  Device device;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  size_t total_memory = 0;
  int multiprocessor_count = 0;
  size_t l2_cache_bytes = 0;
  size_t shared_memory_per_block_optin = 0;

  int compute_capability() const { return compute_capability_major * 10 + compute_capability_minor; }
};

// Whether this binary was built with the CUDA backend.
bool cuda_compiled();
// CUDA devices visible to this process; probed on first call. Empty without CUDA or without a GPU.
const std::vector<DeviceInfo>& cuda_devices();
const DeviceInfo& device_info(Device device);
// Number of CPU threads used by the CPU backend (OpenMP), `OMP_NUM_THREADS` or the hardware's.
int cpu_thread_count();

namespace detail {
// Implemented by the CUDA backend, or by core/no_cuda_devices.cpp (no device) when CUDA is not compiled in.
std::vector<DeviceInfo> probe_cuda_devices();
bool cuda_backend_compiled();
}  // namespace detail

}  // namespace fast_llm
