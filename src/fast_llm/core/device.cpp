#include "fast_llm/core/device.h"

#include <fmt/format.h>

#include <fstream>
#include <string>
#include <thread>

#include "fast_llm/core/error.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace fast_llm {

std::string_view device_type_name(DeviceType type) { return type == DeviceType::cpu ? "cpu" : "cuda"; }

std::string Device::str() const { return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index); }

bool cuda_compiled() { return detail::cuda_backend_compiled(); }

const std::vector<DeviceInfo>& cuda_devices() {
  static const std::vector<DeviceInfo> devices = detail::probe_cuda_devices();
  return devices;
}

const DeviceInfo& device_info(Device device) {
  if (device.is_cpu()) {
    static const DeviceInfo cpu_info{.device = Device::cpu(), .name = "cpu"};
    return cpu_info;
  }
  const auto& devices = cuda_devices();
  FLM_CHECK(device.index >= 0 && size_t(device.index) < devices.size(), "device",
            "{} requested but {} CUDA device(s) are visible{}", device.str(), devices.size(),
            cuda_compiled() ? "" : " (this build has no CUDA backend)");
  return devices[size_t(device.index)];
}

int cpu_thread_count() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return int(std::max(1u, std::thread::hardware_concurrency()));
#endif
}

std::optional<AvailableMemory> available_memory(Device device) {
  if (device.is_cuda()) {
    device_info(device);  // checks the index
    return AvailableMemory{.bytes = detail::cuda_free_memory(device.index), .source = "free memory of the GPU"};
  }
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    size_t kibibytes = 0;
    std::string unit;
    if (!(meminfo >> kibibytes >> unit)) break;
    if (key == "MemAvailable:")
      return AvailableMemory{.bytes = kibibytes * 1024, .source = "MemAvailable in /proc/meminfo"};
  }
  return std::nullopt;
}

}  // namespace fast_llm
