// Linked when the CUDA backend is not compiled in: no CUDA device exists.
#include "fast_llm/core/device.h"

namespace fast_llm::detail {
std::vector<DeviceInfo> probe_cuda_devices() { return {}; }
bool cuda_backend_compiled() { return false; }
size_t cuda_free_memory(int) { return 0; }
}  // namespace fast_llm::detail
