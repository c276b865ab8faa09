// `fast-llm kernels`: the kernel variants registered in this binary (and plugins), and which can run here.
#include <fmt/format.h>

#include "fast_llm/cli/commands.h"
#include "fast_llm/core/device.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/kernels/listing.h"
#include "fast_llm/kernels/registry.h"

namespace fast_llm::cli {

void add_kernels_command(CLI::App& app, CommandAction& action) {
  auto* command = app.add_subcommand("kernels", "List the kernel variants available on this machine.");
  auto device = std::make_shared<std::string>("all");
  auto plugins = std::make_shared<std::vector<std::string>>();
  command->add_option("--device", *device, "Only this device's variants.")
      ->check(CLI::IsMember({"all", "cpu", "cuda"}));
  command->add_option("--plugin", *plugins, "Load this kernel plugin (a shared library) first; repeatable.");
  command->callback([&action, device, plugins] {
    action = [device, plugins] {
      if (!plugins->empty()) kernels::load_kernel_plugins(*plugins);
      std::optional<DeviceType> filter;
      if (*device == "cpu") filter = DeviceType::cpu;
      if (*device == "cuda") filter = DeviceType::cuda;
      std::string text = kernels::format_kernel_table(filter);
      const auto& gpus = cuda_devices();
      text += "\nCUDA devices:";
      if (gpus.empty()) text += fmt::format(" none{}\n", cuda_compiled() ? "" : " (this build has no CUDA backend)");
      else text += "\n";
      for (const auto& gpu : gpus)
        text += fmt::format("  {}: {}, compute capability {}.{}, {} MiB, {} multiprocessors\n", gpu.device.str(),
                            gpu.name, gpu.compute_capability_major, gpu.compute_capability_minor,
                            gpu.total_memory >> 20, gpu.multiprocessor_count);
      write_to_standard_output(text);
      return 0;
    };
  });
}

}  // namespace fast_llm::cli
