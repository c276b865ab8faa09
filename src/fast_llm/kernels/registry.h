// The kernel registry: every op is declared once, and each device registers variants of it.
//
// An op is a tag type with a name and an argument struct, declared in the op's own header with its entry function,
// which checks the op's contract once (kernels/contract.h) and dispatches on the device:
//   struct RmsNormForward { static constexpr std::string_view name = "rms_norm_forward"; using Args = ...; };
//   inline void rms_norm_forward(const RmsNormForwardArgs& a) { check_rms_norm_forward(a); dispatch<...>(a, device); }
// Variants register themselves in their own file (kernels/cpu/..., kernels/cuda/...), their `supports` stating only
// their own limits: FLM_REGISTER_KERNEL(RmsNormForward, DeviceType::cuda, "fused", /*priority=*/100,
// KernelKind::baseline, &supports_fused, &rms_norm_forward_fused, "one pass per row, fp32 accumulation").
// Selection (config `kernels: {include: auto | none | [ids], exclude: [ids]}`): `auto` allows every variant; `none`
// only the baselines (each device's plain implementation: the CPU `reference`, the first CUDA implementation); a list
// allows the baselines plus the listed ids, and a listed variant that cannot run the arguments it gets is an error,
// never a silent fallback. Among allowed variants that support the arguments, the highest priority runs; the choice
// is logged once per (op, variant). Variant ids are `op:device:variant`, e.g. `gemm:cuda:cublaslt`.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/core/device.h"
#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/tensor/stream.h"

namespace fast_llm::kernels {

enum class KernelKind {
  baseline,   // the plain, always-available implementation on its device (the CPU reference is one)
  optimized,  // an optional faster variant; off with `include: none`
};

struct KernelInfo {
  std::string op;
  DeviceType device = DeviceType::cpu;
  std::string variant;
  int priority = 0;
  KernelKind kind = KernelKind::baseline;
  std::string description;
  std::string source;  // "builtin" or the plugin file that registered it

  // "op:device:variant"
  std::string id() const;
};

// Which variants may run, from the config. Process-wide; set once at start-up (`set_kernel_selection`).
struct KernelSelection {
  enum class Mode { all, baseline_only, listed };
  Mode mode = Mode::all;
  std::set<std::string> included;  // with Mode::listed: ids that must be used where they apply
  std::set<std::string> excluded;  // ids never used
  // Variants with tuning choices (the cuBLASLt gemm's algorithm per shape) time their candidates on first use and keep
  // the fastest, instead of taking a heuristic's first; off: the heuristic's choice, the same in every run.
  bool autotune = true;

  bool allows(const KernelInfo& info) const;
  bool is_explicit(const KernelInfo& info) const { return mode == Mode::listed && included.contains(info.id()); }
};

// Validates the ids against what is registered (unknown ids and excluding a baseline are errors naming `path`) and
// makes `selection` the process-wide one.
void set_kernel_selection(const KernelSelection& selection, std::string_view path = "kernels");
const KernelSelection& kernel_selection();

// Every registered variant of every op, for `fast-llm kernels` and checks.
std::vector<KernelInfo> all_kernels();

template <class Args>
struct KernelVariant {
  KernelInfo info;
  // Returns why the arguments are not supported, or nothing if they are; called only with arguments that meet the
  // op's contract. nullptr: supports everything the contract allows.
  std::optional<std::string> (*supports)(const Args&) = nullptr;
  void (*run)(const Args&) = nullptr;
};

namespace detail {
void add_to_catalog(const KernelInfo& info);
std::string current_registration_source();
[[noreturn]] void throw_no_variant(std::string_view op, Device device, const std::vector<std::string>& reasons);
[[noreturn]] void throw_explicit_unsupported(const KernelInfo& info, const std::string& reason);
void log_choice(const KernelInfo& info);
// Timing of dispatches for `profiling` (op_profiler.h), kept out of this header so it stays light.
bool profiler_recording();
void run_profiled(const KernelInfo& info, Device device, Stream stream, const std::function<void()>& run);
}  // namespace detail

template <class Op>
class OpRegistry {
 public:
  using Args = typename Op::Args;

  static OpRegistry& instance() {
    static OpRegistry registry;
    return registry;
  }

  void add(KernelVariant<Args> variant) {
    variant.info.op = std::string(Op::name);
    variant.info.source = detail::current_registration_source();
    detail::add_to_catalog(variant.info);
    variants_.push_back(std::move(variant));
    // Highest priority first; ties keep registration order.
    std::stable_sort(variants_.begin(), variants_.end(),
                     [](const auto& a, const auto& b) { return a.info.priority > b.info.priority; });
  }

  const std::vector<KernelVariant<Args>>& variants() const { return variants_; }

  // The variant that will run `args` on `device` under the current selection.
  const KernelVariant<Args>& select(const Args& args, Device device) const {
    const KernelSelection& selection = kernel_selection();
    std::vector<std::string> reasons;
    for (const auto& variant : variants_) {
      if (variant.info.device != device.type) continue;
      if (!selection.allows(variant.info)) {
        reasons.push_back(fmt::format("{}: not selected", variant.info.id()));
        continue;
      }
      if (variant.supports) {
        if (auto reason = variant.supports(args)) {
          if (selection.is_explicit(variant.info)) detail::throw_explicit_unsupported(variant.info, *reason);
          reasons.push_back(fmt::format("{}: {}", variant.info.id(), *reason));
          continue;
        }
      }
      return variant;
    }
    detail::throw_no_variant(Op::name, device, reasons);
  }

  // Runs a named variant (per-layer `implementation:` settings); errors if it is missing or cannot run `args`.
  const KernelVariant<Args>& find(std::string_view variant_name, Device device) const {
    for (const auto& variant : variants_)
      if (variant.info.device == device.type && variant.info.variant == variant_name) return variant;
    detail::throw_no_variant(Op::name, device, {fmt::format("no variant named '{}'", variant_name)});
  }

 private:
  std::vector<KernelVariant<Args>> variants_;
};

// Runs the best allowed variant of `Op` for `args` on `device`.
template <class Op>
void dispatch(const typename Op::Args& args, Device device) {
  const auto& variant = OpRegistry<Op>::instance().select(args, device);
  detail::log_choice(variant.info);
  if (detail::profiler_recording()) [[unlikely]] {
    detail::run_profiled(variant.info, device, args.stream, [&] { variant.run(args); });
    return;
  }
  variant.run(args);
}

namespace detail {
template <class Op>
struct KernelRegistrar {
  KernelRegistrar(DeviceType device, const char* variant, int priority, KernelKind kind,
                  std::optional<std::string> (*supports)(const typename Op::Args&),
                  void (*run)(const typename Op::Args&), const char* description) {
    OpRegistry<Op>::instance().add(KernelVariant<typename Op::Args>{
        .info = KernelInfo{.op = std::string(Op::name), .device = device, .variant = variant, .priority = priority,
                           .kind = kind, .description = description, .source = {}},
        .supports = supports,
        .run = run});
  }
};
}  // namespace detail

#define FLM_KERNEL_CONCAT_INNER(a, b) a##b
#define FLM_KERNEL_CONCAT(a, b) FLM_KERNEL_CONCAT_INNER(a, b)
#define FLM_REGISTER_KERNEL(Op, device, variant, priority, kind, supports, run, description)                  \
  static const ::fast_llm::kernels::detail::KernelRegistrar<Op> FLM_KERNEL_CONCAT(flm_kernel_registrar_,         \
                                                                                  __COUNTER__)(                 \
      device, variant, priority, kind, supports, run, description)

// Loads kernel plugins: shared libraries whose static initialisers call FLM_REGISTER_KERNEL (against the symbols of
// the running fast-llm). Each must export `extern "C" int fast_llm_kernel_plugin_abi()` returning
// kKernelPluginAbi. Errors name the file (missing, not loadable, not a plugin, wrong ABI). Bumped whenever an op's
// Args change layout (2: adam_step's state and compute_weights), so that a plugin built against older headers is
// refused instead of reading the wrong fields.
inline constexpr int kKernelPluginAbi = 2;
void load_kernel_plugins(const std::vector<std::string>& paths);

}  // namespace fast_llm::kernels
