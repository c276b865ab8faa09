#include "fast_llm/kernels/listing.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>

#include "fast_llm/kernels/registry.h"

namespace fast_llm::kernels {

std::string format_kernel_table(std::optional<DeviceType> device) {
  std::vector<KernelInfo> kernels = all_kernels();
  std::erase_if(kernels, [&](const KernelInfo& info) { return device && info.device != *device; });
  std::stable_sort(kernels.begin(), kernels.end(), [](const KernelInfo& a, const KernelInfo& b) {
    if (a.op != b.op) return a.op < b.op;
    if (a.device != b.device) return a.device < b.device;
    return a.priority > b.priority;
  });

  // CPU variants always run; CUDA ones need a visible GPU (and a build with the CUDA backend, without which none
  // is visible).
  const bool have_cuda = !cuda_devices().empty();
  constexpr size_t kColumns = 7;
  using Row = std::array<std::string, kColumns>;
  std::vector<Row> rows;
  rows.push_back({"id", "device", "kind", "priority", "usable", "description", "source"});
  for (const KernelInfo& info : kernels) {
    const bool usable = info.device == DeviceType::cpu || have_cuda;
    rows.push_back({info.id(), std::string(device_type_name(info.device)),
                    info.kind == KernelKind::baseline ? "baseline" : "optimized", std::to_string(info.priority),
                    usable ? "yes" : "no", info.description, info.source});
  }

  std::array<size_t, kColumns> widths{};
  for (const Row& row : rows)
    for (size_t column = 0; column < kColumns; ++column) widths[column] = std::max(widths[column], row[column].size());
  std::string table;
  for (const Row& row : rows) {
    std::string line;
    for (size_t column = 0; column < kColumns; ++column) {
      // The last column is not padded, so lines carry no trailing spaces.
      if (column + 1 < kColumns)
        line += fmt::format("{:<{}}  ", row[column], widths[column]);
      else
        line += row[column];
    }
    table += line;
    table += '\n';
  }
  if (kernels.empty()) table += "(no kernels registered)\n";
  return table;
}

}  // namespace fast_llm::kernels
