// Tests of kernel plugins (load_kernel_plugins in kernels/registry.h): a plugin's variant is listed with the plugin's
// path as its source and wins when its priority is highest; a missing file, a file that is not a shared library, a
// library that is not a plugin and a plugin of another ABI are errors naming the file. A separate executable, because
// a loaded plugin stays registered for the rest of the process.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/listing.h"
#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

// The test plugins are built into the lib/ folder beside bin/; found from the running executable, so a staged copy of
// the build (docs/gpu.md) finds its own.
std::string test_library(const char* file_name) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "lib" / file_name).string();
}

TEST(KernelPlugins, MissingFile) {
  expect_error([] { load_kernel_plugins({"/nonexistent/libplugin.so"}); },
               "[kernels] kernel plugin /nonexistent/libplugin.so: no such file");
}

TEST(KernelPlugins, NotASharedLibrary) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "fast_llm_not_a_library.so";
  std::ofstream(path) << "not an ELF file\n";
  expect_error([&] { load_kernel_plugins({path.string()}); },
               fmt::format("[kernels] kernel plugin {}: cannot be loaded: ", path.string()));
  std::filesystem::remove(path);
}

TEST(KernelPlugins, LibraryWithoutTheAbiSymbol) {
  const std::string path = test_library(FAST_LLM_TEST_NOT_A_PLUGIN);
  expect_error([&] { load_kernel_plugins({path}); },
               fmt::format("kernel plugin {}: not a fast-llm kernel plugin", path));
}

TEST(KernelPlugins, WrongAbi) {
  const std::string path = test_library(FAST_LLM_TEST_PLUGIN_WRONG_ABI);
  expect_error([&] { load_kernel_plugins({path}); },
               fmt::format("kernel plugin {}: built for kernel plugin ABI {}, this fast-llm has ABI {}", path,
                           kKernelPluginAbi + 1, kKernelPluginAbi));
}

int plugin_fill_calls() {
  auto* calls = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "test_plugin_fill_calls"));
  return calls ? calls() : -1;
}

TEST(KernelPlugins, PluginVariantIsListedAndChosen) {
  const std::string path = test_library(FAST_LLM_TEST_PLUGIN);
  Tensor tensor = filled(Shape{4, 3}, DType::float32, 0);
  fill({.tensor = tensor, .value = 1});
  EXPECT_EQ(plugin_fill_calls(), -1) << "the plugin is loaded before the test loads it";

  load_kernel_plugins({path});
  bool listed = false;
  for (const KernelInfo& info : all_kernels())
    if (info.id() == "fill:cpu:plugin") {
      listed = true;
      EXPECT_EQ(info.source, path);
      EXPECT_EQ(info.priority, 1000);
    }
  EXPECT_TRUE(listed);
  EXPECT_NE(format_kernel_table(DeviceType::cpu).find(path), std::string::npos);

  // Priority 1000 beats the reference: the plugin fills (and counts).
  fill({.tensor = tensor, .value = 2.5});
  EXPECT_EQ(plugin_fill_calls(), 1);
  expect_near(tensor, std::vector<double>(12, 2.5), 0, 0, "filled by the plugin");
  // Arguments it does not support go to the reference.
  Tensor doubles = filled(Shape{2}, DType::float64, 0);
  fill({.tensor = doubles, .value = 3});
  EXPECT_EQ(plugin_fill_calls(), 1);
  expect_near(doubles, {3, 3}, 0, 0, "filled by the reference");
  // Its id is known to the selection now: excluded, it no longer runs.
  set_kernel_selection({.mode = KernelSelection::Mode::all, .included = {}, .excluded = {"fill:cpu:plugin"}});
  fill({.tensor = tensor, .value = 4});
  EXPECT_EQ(plugin_fill_calls(), 1);
  expect_near(tensor, std::vector<double>(12, 4), 0, 0, "filled by the reference");
  set_kernel_selection(KernelSelection{});
  // Loading it again registers nothing twice.
  load_kernel_plugins({path});
  fill({.tensor = tensor, .value = 5});
  EXPECT_EQ(plugin_fill_calls(), 2);
}

}  // namespace
}  // namespace fast_llm::kernels
