// A kernel plugin for registry_plugin_test: registers `fill:cpu:plugin`, a contiguous float32 fill at a priority above
// the builtin reference, and counts its calls so the test can tell that it ran.
#include <algorithm>

#include "fast_llm/kernels/copy.h"

namespace {

int fill_calls = 0;

std::optional<std::string> supports_plugin_fill(const fast_llm::kernels::FillArgs& args) {
  if (args.tensor.dtype() != fast_llm::DType::float32 || !args.tensor.is_contiguous())
    return std::string("the test plugin fills contiguous float32 tensors only");
  return std::nullopt;
}

void plugin_fill(const fast_llm::kernels::FillArgs& args) {
  ++fill_calls;
  float* data = args.tensor.data_as<float>();
  std::fill(data, data + args.tensor.numel(), float(args.value));
}

}  // namespace

FLM_REGISTER_KERNEL(fast_llm::kernels::Fill, fast_llm::DeviceType::cpu, "plugin", /*priority=*/1000,
                    fast_llm::kernels::KernelKind::optimized, &supports_plugin_fill, &plugin_fill,
                    "test plugin: contiguous float32 fill");

extern "C" int fast_llm_kernel_plugin_abi() { return fast_llm::kernels::kKernelPluginAbi; }
extern "C" int test_plugin_fill_calls() { return fill_calls; }
