// The `kernels` section of a config: which kernel variants may run, and which plugins add more.
//
//   kernels:
//     include: auto                 # every variant (the default); `none`: only the baselines; or a list of ids,
//                                   # e.g. [gemm:cpu:openblas]: the baselines plus those, which must then run
//                                   # wherever their op runs (an id that cannot run its arguments is an error)
//     exclude: [gemm:cpu:openblas]  # never used (a baseline cannot be excluded)
//     plugins: [/path/libmy_kernels.so]
//     autotune: true                # time the candidates of tunable variants once per shape (gemm algorithms)
//
// Ids are `op:device:variant` (`fast-llm kernels` lists them). No CUDA here: a config validates on any machine.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "fast_llm/config/config.h"
#include "fast_llm/kernels/registry.h"

namespace fast_llm::kernels {

// `include`: the word `auto` or `none`, or a list of ids.
struct KernelInclude {
  KernelSelection::Mode mode = KernelSelection::Mode::all;
  std::vector<std::string> ids;  // with Mode::listed
  bool operator==(const KernelInclude&) const = default;
};

struct KernelsConfig : config::Config {
  KernelInclude include;
  std::vector<std::string> exclude;
  std::vector<std::filesystem::path> plugins;
  bool autotune = true;

  void visit(config::Visitor& v) override;

  KernelSelection to_selection() const;
  // Loads the plugins, then makes this selection the process-wide one (so plugin ids can be included or excluded).
  // Errors name this section's path.
  void apply() const;

 protected:
  void check() const override;
};

}  // namespace fast_llm::kernels

namespace fast_llm::config {

template <>
struct Codec<kernels::KernelInclude> {
  static constexpr bool holds_configs = false;
  static void read(kernels::KernelInclude& value, const YAML::Node& node, const std::string& path);
  static YAML::Node write(const kernels::KernelInclude& value, const WriteOptions& options);
};

}  // namespace fast_llm::config
