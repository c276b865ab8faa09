// Devices: the CPU and CUDA GPUs, probed once at start-up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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

// Memory a process could still allocate on `device`, and where the figure comes from: `MemAvailable` of /proc/meminfo
// for the CPU (what the kernel can give without swapping), the driver's free memory (cudaMemGetInfo) for a GPU.
// Nullopt where the system does not say (no /proc/meminfo).
struct AvailableMemory {
  size_t bytes = 0;
  std::string_view source;
};
std::optional<AvailableMemory> available_memory(Device device);

namespace detail {
// Implemented by the CUDA backend, or by core/no_cuda_devices.cpp (no device) when CUDA is not compiled in.
std::vector<DeviceInfo> probe_cuda_devices();
bool cuda_backend_compiled();
// Free bytes on CUDA device `index` (cudaMemGetInfo).
size_t cuda_free_memory(int index);
}  // namespace detail

}  // namespace fast_llm
