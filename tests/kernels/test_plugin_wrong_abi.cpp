// A kernel plugin built for another ABI version, for registry_plugin_test.
#include "fast_llm/kernels/registry.h"

extern "C" int fast_llm_kernel_plugin_abi() { return fast_llm::kernels::kKernelPluginAbi + 1; }
