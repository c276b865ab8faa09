// The table printed by `fast-llm kernels`: every registered variant with its device, kind, priority, whether it can
// run on this machine, what it does and where it comes from (builtin or a plugin file).
#pragma once

#include <optional>
#include <string>

#include "fast_llm/core/device.h"

namespace fast_llm::kernels {

// One line per variant, sorted by op, device, then priority (highest first: the order `auto` tries them), under a
// header line. `device` keeps only that device's variants; nothing lists all.
std::string format_kernel_table(std::optional<DeviceType> device = std::nullopt);

}  // namespace fast_llm::kernels
