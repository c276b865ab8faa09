// The process-wide side of the kernel registry (kernels/registry.h): the catalog of every registered variant, the
// selection from the config, the messages of selection failures, the once-per-variant log line, and plugin loading.
//
// Registration happens in static initialisers (of the fast-llm libraries, then of each plugin while it is dlopen'ed),
// so everything here is reached through function-local statics: no order between translation units is assumed.
#include "fast_llm/kernels/registry.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <mutex>
#include <unordered_set>

#include "fast_llm/config/config.h"

namespace fast_llm::kernels {
namespace {

struct RegistryState {
  std::mutex mutex;
  std::vector<KernelInfo> catalog;  // registration order
  std::string registration_source = "builtin";
  // Ids registered twice, as messages: a second registration cannot be refused from inside a static initialiser
  // (throwing there terminates the process), so it is reported by the next `load_kernel_plugins` or
  // `set_kernel_selection`.
  std::vector<std::string> duplicate_registrations;
  KernelSelection selection;
};

RegistryState& state() {
  static RegistryState registry_state;
  return registry_state;
}

const KernelInfo* find_in_catalog(const std::vector<KernelInfo>& catalog, std::string_view id) {
  for (const KernelInfo& info : catalog)
    if (info.id() == id) return &info;
  return nullptr;
}

std::vector<std::string> catalog_ids(const std::vector<KernelInfo>& catalog) {
  std::vector<std::string> ids;
  ids.reserve(catalog.size());
  for (const KernelInfo& info : catalog) ids.push_back(info.id());
  return ids;
}

void throw_duplicates(std::vector<std::string>& duplicates) {
  if (duplicates.empty()) return;
  std::string message = fmt::format("{}", fmt::join(duplicates, "; "));
  duplicates.clear();
  throw Error("kernels", message);
}

}  // namespace

std::string KernelInfo::id() const { return fmt::format("{}:{}:{}", op, device_type_name(device), variant); }

bool KernelSelection::allows(const KernelInfo& info) const {
  const std::string id = info.id();
  if (excluded.contains(id)) return false;
  switch (mode) {
    case Mode::all: return true;
    case Mode::baseline_only: return info.kind == KernelKind::baseline;
    case Mode::listed: return info.kind == KernelKind::baseline || included.contains(id);
  }
  return false;
}

void set_kernel_selection(const KernelSelection& selection, std::string_view path) {
  RegistryState& registry = state();
  std::lock_guard lock(registry.mutex);
  throw_duplicates(registry.duplicate_registrations);
  const std::vector<std::string> ids = catalog_ids(registry.catalog);
  auto check_known = [&](const std::string& id, std::string_view field) {
    if (find_in_catalog(registry.catalog, id)) return;
    std::optional<std::string> suggestion = config::nearest_name(id, ids);
    throw ConfigError(fmt::format("{}.{}", path, field),
                      fmt::format("unknown kernel '{}'{} (`fast-llm kernels` lists the registered ones)", id,
                                  suggestion ? fmt::format("; did you mean '{}'?", *suggestion) : ""));
  };
  if (selection.mode == KernelSelection::Mode::listed)
    for (const std::string& id : selection.included) check_known(id, "include");
  for (const std::string& id : selection.excluded) {
    check_known(id, "exclude");
    const KernelInfo& info = *find_in_catalog(registry.catalog, id);
    // Without its baseline an op could have no variant at all on that device.
    if (info.kind == KernelKind::baseline)
      throw ConfigError(fmt::format("{}.exclude", path),
                        fmt::format("'{}' is the baseline implementation of {} on {} and cannot be excluded", id,
                                    info.op, device_type_name(info.device)));
    if (selection.mode == KernelSelection::Mode::listed && selection.included.contains(id))
      throw ConfigError(fmt::format("{}.exclude", path), fmt::format("'{}' is both included and excluded", id));
  }
  registry.selection = selection;
}

const KernelSelection& kernel_selection() {
  // Set once at start-up, before any kernel runs; reading it needs no lock afterwards.
  return state().selection;
}

std::vector<KernelInfo> all_kernels() {
  RegistryState& registry = state();
  std::lock_guard lock(registry.mutex);
  return registry.catalog;
}

namespace detail {

void add_to_catalog(const KernelInfo& info) {
  RegistryState& registry = state();
  std::lock_guard lock(registry.mutex);
  const std::string id = info.id();
  if (const KernelInfo* existing = find_in_catalog(registry.catalog, id)) {
    registry.duplicate_registrations.push_back(
        fmt::format("kernel '{}' from {} is already registered by {}", id, info.source, existing->source));
    return;
  }
  registry.catalog.push_back(info);
}

std::string current_registration_source() {
  RegistryState& registry = state();
  std::lock_guard lock(registry.mutex);
  return registry.registration_source;
}

void throw_no_variant(std::string_view op, Device device, const std::vector<std::string>& reasons) {
  if (reasons.empty())
    throw NotSupportedError("kernels", fmt::format("no variant of {} is registered for {}{}", op, device.str(),
                                                   device.is_cuda() && !cuda_compiled()
                                                       ? " (this build has no CUDA backend)"
                                                       : ""));
  throw NotSupportedError("kernels", fmt::format("no variant of {} on {} can run these arguments: {}", op,
                                                 device.str(), fmt::join(reasons, "; ")));
}

void throw_explicit_unsupported(const KernelInfo& info, const std::string& reason) {
  throw NotSupportedError("kernels", fmt::format("{} is requested by kernels.include but cannot run these arguments: "
                                                 "{} (remove it from the list to let another variant run)",
                                                 info.id(), reason));
}

void log_choice(const KernelInfo& info) {
  // Every dispatch passes here: a per-thread set of the infos already seen keeps the common case to one hash lookup,
  // without the process-wide lock of log_once_key. Infos live in their op's registry for the whole process.
  thread_local std::unordered_set<const KernelInfo*> seen;
  if (!seen.insert(&info).second) return;
  const std::string id = info.id();
  if (log_once_key("kernel:" + id)) log_main("kernel {} on {}: {}", info.op, device_type_name(info.device), id);
}

}  // namespace detail

void load_kernel_plugins(const std::vector<std::string>& paths) {
  RegistryState& registry = state();
  for (const std::string& path : paths) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(path, error))
      throw Error("kernels", fmt::format("kernel plugin {}: no such file", path));
    {
      std::lock_guard lock(registry.mutex);
      registry.registration_source = path;
    }
    // RTLD_NOW: a missing symbol is reported here, naming the plugin, not at the first call of its kernel.
    // RTLD_GLOBAL: the plugin's own dependencies may share symbols with it. The plugin's static initialisers run
    // inside dlopen and register its variants under `path`.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    {
      std::lock_guard lock(registry.mutex);
      registry.registration_source = "builtin";
    }
    if (!handle) {
      const char* message = dlerror();
      throw Error("kernels", fmt::format("kernel plugin {}: cannot be loaded: {}", path, message ? message : "?"));
    }
    dlerror();  // clears any earlier error, so a null result below can be told from a null symbol value
    void* symbol = dlsym(handle, "fast_llm_kernel_plugin_abi");
    if (!symbol)
      throw Error("kernels", fmt::format("kernel plugin {}: not a fast-llm kernel plugin (it does not export "
                                         "`extern \"C\" int fast_llm_kernel_plugin_abi()`)",
                                         path));
    const int abi = reinterpret_cast<int (*)()>(symbol)();
    if (abi != kKernelPluginAbi)
      throw Error("kernels", fmt::format("kernel plugin {}: built for kernel plugin ABI {}, this fast-llm has ABI {} "
                                         "(rebuild the plugin against this fast-llm)",
                                         path, abi, kKernelPluginAbi));
    std::lock_guard lock(registry.mutex);
    throw_duplicates(registry.duplicate_registrations);
    // The library stays loaded for the rest of the process: its variants are in the registries.
  }
}

}  // namespace fast_llm::kernels
