#include "fast_llm/kernels/config.h"

#include <fmt/format.h>

#include <algorithm>

namespace fast_llm::kernels {
namespace {

// `op:device:variant` with three non-empty parts and a known device; whether the id is registered is checked by
// `set_kernel_selection`, once plugins are loaded.
std::optional<std::string> id_form_error(const std::string& id) {
  const size_t first = id.find(':');
  const size_t second = first == std::string::npos ? std::string::npos : id.find(':', first + 1);
  if (second == std::string::npos || id.find(':', second + 1) != std::string::npos || first == 0 ||
      second == first + 1 || second + 1 == id.size())
    return fmt::format("'{}' is not a kernel id of the form op:device:variant (e.g. gemm:cuda:cublaslt)", id);
  const std::string device = id.substr(first + 1, second - first - 1);
  if (device != "cpu" && device != "cuda")
    return fmt::format("'{}' names device '{}'; expected cpu or cuda", id, device);
  return std::nullopt;
}

std::optional<std::string> check_ids(const std::vector<std::string>& ids) {
  for (size_t index = 0; index < ids.size(); ++index)
    if (auto error = id_form_error(ids[index])) return fmt::format("element {}: {}", index, *error);
  return std::nullopt;
}

}  // namespace

void KernelsConfig::visit(config::Visitor& v) {
  using config::Hint;
  v(include, "include",
    "Kernel variants that may run: `auto` (all, the best supported one wins), `none` (only each op's baseline: the "
    "CPU reference and the first CUDA implementation), or a list of ids `op:device:variant` that must be used where "
    "their op runs (an explicit id that cannot run its arguments is an error, never a silent fallback).",
    Hint::performance, [](const KernelInclude& value) { return check_ids(value.ids); });
  v(exclude, "exclude", "Kernel variant ids never to use (a baseline cannot be excluded).", Hint::performance,
    &check_ids);
  v(plugins, "plugins",
    "Shared libraries loaded at start-up that register more kernel variants (`fast-llm kernels` lists them).",
    Hint::expert);
  v(autotune, "autotune",
    "Time the candidates of tunable kernels once per shape and keep the fastest (CUDA gemm: the algorithms "
    "cuBLASLt's heuristic proposes; up to 1.3x faster at some shapes, measured on an H200). The choice, and so the "
    "rounding, can differ between runs; false takes the heuristic's first, the same every run.",
    Hint::performance);
}

void KernelsConfig::check() const {
  for (const std::string& id : exclude)
    if (std::find(include.ids.begin(), include.ids.end(), id) != include.ids.end())
      fail("exclude", fmt::format("'{}' is both included and excluded", id));
}

KernelSelection KernelsConfig::to_selection() const {
  KernelSelection selection;
  selection.mode = include.mode;
  selection.included.insert(include.ids.begin(), include.ids.end());
  selection.excluded.insert(exclude.begin(), exclude.end());
  selection.autotune = autotune;
  return selection;
}

void KernelsConfig::apply() const {
  std::vector<std::string> plugin_paths;
  for (const std::filesystem::path& plugin : plugins) plugin_paths.push_back(plugin.string());
  load_kernel_plugins(plugin_paths);
  set_kernel_selection(to_selection(), path().empty() ? "kernels" : path());
}

}  // namespace fast_llm::kernels

namespace fast_llm::config {

void Codec<kernels::KernelInclude>::read(kernels::KernelInclude& value, const YAML::Node& node,
                                         const std::string& path) {
  using Mode = kernels::KernelSelection::Mode;
  if (node.IsSequence()) {
    kernels::KernelInclude listed{.mode = Mode::listed, .ids = {}};
    Codec<std::vector<std::string>>::read(listed.ids, node, path);
    value = std::move(listed);
    return;
  }
  if (!node.IsScalar()) throw ConfigError(path, "expected `auto`, `none` or a list of kernel ids");
  const std::string& word = node.Scalar();
  if (word == "auto")
    value = {.mode = Mode::all, .ids = {}};
  else if (word == "none")
    value = {.mode = Mode::baseline_only, .ids = {}};
  else
    throw ConfigError(path, fmt::format("expected `auto`, `none` or a list of kernel ids, got '{}' (a single id is "
                                        "written as a list: [{}])",
                                        word, word));
}

YAML::Node Codec<kernels::KernelInclude>::write(const kernels::KernelInclude& value, const WriteOptions& options) {
  using Mode = kernels::KernelSelection::Mode;
  switch (value.mode) {
    case Mode::all: return YAML::Node("auto");
    case Mode::baseline_only: return YAML::Node("none");
    case Mode::listed: return Codec<std::vector<std::string>>::write(value.ids, options);
  }
  return YAML::Node("auto");
}

}  // namespace fast_llm::config
