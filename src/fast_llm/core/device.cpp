#include "fast_llm/core/device.h"

#include <fmt/format.h>

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

}  // namespace fast_llm
