// Tests of the kernel registry (kernels/registry.h): choice by priority among supported variants, selection modes
// (auto, none, listed), exclusions, errors (unknown ids with a suggestion, excluded baselines, an explicit variant that
// cannot run its arguments, no variant at all, duplicate ids), the once-per-variant log line, the catalog and the
// `fast-llm kernels` table, and the `kernels` config section (kernels/config.h).
#include "fast_llm/kernels/registry.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "fast_llm/kernels/config.h"
#include "fast_llm/kernels/listing.h"
#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

// A test op whose variants record which of them ran.
struct ProbeArgs {
  int value = 0;
  std::string* ran = nullptr;
  Stream stream = {};
};
struct Probe {
  static constexpr std::string_view name = "registry_probe";
  using Args = ProbeArgs;
};

std::optional<std::string> reference_supports(const ProbeArgs& args) {
  if (std::abs(args.value) > 1000) return std::string("magnitude above 1000");
  return std::nullopt;
}
std::optional<std::string> fast_supports(const ProbeArgs& args) {
  if (args.value < 0) return std::string("negative value");
  return std::nullopt;
}
std::optional<std::string> faster_supports(const ProbeArgs& args) {
  if (args.value % 2 != 0) return std::string("odd value");
  return std::nullopt;
}
void run_reference(const ProbeArgs& args) { *args.ran = "reference"; }
void run_fast(const ProbeArgs& args) { *args.ran = "fast"; }
void run_faster(const ProbeArgs& args) { *args.ran = "faster"; }

// Registered out of priority order: the registry sorts them.
FLM_REGISTER_KERNEL(Probe, DeviceType::cpu, "fast", 100, KernelKind::optimized, &fast_supports, &run_fast,
                    "rejects negative values");
FLM_REGISTER_KERNEL(Probe, DeviceType::cpu, "reference", 0, KernelKind::baseline, &reference_supports, &run_reference,
                    "rejects magnitudes above 1000");
FLM_REGISTER_KERNEL(Probe, DeviceType::cpu, "faster", 200, KernelKind::optimized, &faster_supports, &run_faster,
                    "rejects odd values");

struct SelectionScope {
  explicit SelectionScope(const KernelSelection& selection) { set_kernel_selection(selection); }
  ~SelectionScope() { set_kernel_selection(KernelSelection{}); }
};

KernelSelection listed(std::set<std::string> included, std::set<std::string> excluded = {}) {
  return {.mode = KernelSelection::Mode::listed, .included = std::move(included), .excluded = std::move(excluded)};
}

std::string run_probe(int value) {
  std::string ran = "nothing";
  dispatch<Probe>({.value = value, .ran = &ran}, Device::cpu());
  return ran;
}

TEST(KernelRegistry, VariantsAreSortedByPriority) {
  std::vector<std::string> order;
  for (const auto& variant : OpRegistry<Probe>::instance().variants()) order.push_back(variant.info.id());
  EXPECT_EQ(order, (std::vector<std::string>{"registry_probe:cpu:faster", "registry_probe:cpu:fast",
                                             "registry_probe:cpu:reference"}));
}

TEST(KernelRegistry, AutoRunsTheHighestPrioritySupportedVariant) {
  EXPECT_EQ(run_probe(2), "faster");
  EXPECT_EQ(run_probe(3), "fast");        // faster rejects odd values
  EXPECT_EQ(run_probe(-2), "faster");     // fast rejects negatives, faster does not
  EXPECT_EQ(run_probe(-3), "reference");  // both optimized variants reject it
}

TEST(KernelRegistry, NoneRunsOnlyBaselines) {
  SelectionScope scope({.mode = KernelSelection::Mode::baseline_only, .included = {}, .excluded = {}});
  EXPECT_EQ(run_probe(2), "reference");
  EXPECT_EQ(run_probe(3), "reference");
}

TEST(KernelRegistry, ListedAllowsBaselinesAndTheListedOnes) {
  SelectionScope scope(listed({"registry_probe:cpu:fast"}));
  EXPECT_EQ(run_probe(2), "fast");  // faster is not listed
  // The listed variant cannot run a negative value: an error naming it and why, not a fallback to the reference.
  expect_error([] { run_probe(-2); },
               "registry_probe:cpu:fast is requested by kernels.include but cannot run these arguments: negative value");
}

TEST(KernelRegistry, ExcludedVariantsNeverRun) {
  SelectionScope scope({.mode = KernelSelection::Mode::all, .included = {}, .excluded = {"registry_probe:cpu:faster"}});
  EXPECT_EQ(run_probe(2), "fast");
  EXPECT_FALSE(kernel_selection().allows({.op = "registry_probe", .device = DeviceType::cpu, .variant = "faster",
                                          .priority = 200, .kind = KernelKind::optimized, .description = {},
                                          .source = {}}));
}

TEST(KernelRegistry, NoSupportingVariantListsEveryReason) {
  expect_error([] { run_probe(-1001); },
               "[kernels] no variant of registry_probe on cpu can run these arguments: registry_probe:cpu:faster: odd "
               "value; registry_probe:cpu:fast: negative value; registry_probe:cpu:reference: magnitude above 1000");
  {
    SelectionScope scope({.mode = KernelSelection::Mode::baseline_only, .included = {}, .excluded = {}});
    expect_error([] { run_probe(1002); }, "registry_probe:cpu:faster: not selected");
  }
  std::string ran;
  expect_error([&] { dispatch<Probe>({.value = 0, .ran = &ran}, Device::cuda(0)); },
               "[kernels] no variant of registry_probe is registered for cuda:0");
}

TEST(KernelRegistry, FindNamesAVariantOrFails) {
  EXPECT_EQ(OpRegistry<Probe>::instance().find("fast", Device::cpu()).info.priority, 100);
  expect_error([] { OpRegistry<Probe>::instance().find("fastest", Device::cpu()); }, "no variant named 'fastest'");
}

TEST(KernelSelectionValidation, UnknownIdsAreConfigErrorsWithASuggestion) {
  try {
    set_kernel_selection(listed({"registry_probe:cpu:fsat"}), "training.kernels");
    FAIL() << "no error for an unknown id";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.path(), "training.kernels.include");
    EXPECT_NE(std::string(error.what()).find("unknown kernel 'registry_probe:cpu:fsat'; did you mean "
                                             "'registry_probe:cpu:fast'?"),
              std::string::npos)
        << error.what();
  }
  try {
    set_kernel_selection({.mode = KernelSelection::Mode::all, .included = {}, .excluded = {"gemm:cpu:openblsa"}});
    FAIL() << "no error for an unknown excluded id";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.path(), "kernels.exclude");
    EXPECT_NE(std::string(error.what()).find("did you mean 'gemm:cpu:openblas'?"), std::string::npos) << error.what();
  }
  // The failed calls left the previous (default) selection in place.
  EXPECT_EQ(kernel_selection().mode, KernelSelection::Mode::all);
  EXPECT_TRUE(kernel_selection().excluded.empty());
}

TEST(KernelSelectionValidation, BaselinesCannotBeExcluded) {
  expect_error(
      [] {
        set_kernel_selection(
            {.mode = KernelSelection::Mode::all, .included = {}, .excluded = {"registry_probe:cpu:reference"}});
      },
      "kernels.exclude: 'registry_probe:cpu:reference' is the baseline implementation of registry_probe on cpu and "
      "cannot be excluded");
  expect_error([] { set_kernel_selection(listed({"registry_probe:cpu:fast"}, {"registry_probe:cpu:fast"})); },
               "'registry_probe:cpu:fast' is both included and excluded");
}

// A second registration of an id is reported by the next selection, naming both sources.
struct Duplicated {
  static constexpr std::string_view name = "registry_duplicated";
  using Args = ProbeArgs;
};

TEST(KernelRegistry, DuplicateIdsAreReported) {
  auto variant = [] {
    return KernelVariant<ProbeArgs>{.info = {.op = {}, .device = DeviceType::cpu, .variant = "reference", .priority = 0,
                                             .kind = KernelKind::baseline, .description = "d", .source = {}},
                                    .supports = nullptr,
                                    .run = &run_reference};
  };
  OpRegistry<Duplicated>::instance().add(variant());
  set_kernel_selection(KernelSelection{});
  OpRegistry<Duplicated>::instance().add(variant());
  expect_error([] { set_kernel_selection(KernelSelection{}); },
               "kernel 'registry_duplicated:cpu:reference' from builtin is already registered by builtin");
  set_kernel_selection(KernelSelection{});  // reported once
}

// An op run only by the logging test, so its line cannot have been logged before.
struct Logged {
  static constexpr std::string_view name = "registry_logged";
  using Args = ProbeArgs;
};
FLM_REGISTER_KERNEL(Logged, DeviceType::cpu, "reference", 0, KernelKind::baseline, nullptr, &run_reference, "logged");

TEST(KernelRegistry, ChoiceIsLoggedOncePerVariant) {
  std::string ran;
  ::testing::internal::CaptureStderr();
  dispatch<Logged>({.value = 1, .ran = &ran}, Device::cpu());
  dispatch<Logged>({.value = 2, .ran = &ran}, Device::cpu());
  const std::string log = ::testing::internal::GetCapturedStderr();
  const std::string line = "kernel registry_logged on cpu: registry_logged:cpu:reference";
  const size_t first = log.find(line);
  EXPECT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find(line, first + 1), std::string::npos) << log;
  EXPECT_EQ(ran, "reference");
}

TEST(KernelCatalog, ListsEveryVariantWithItsSource) {
  bool found_probe = false, found_gemm = false;
  for (const KernelInfo& info : all_kernels()) {
    if (info.id() == "registry_probe:cpu:fast") {
      found_probe = true;
      EXPECT_EQ(info.source, "builtin");
      EXPECT_EQ(info.description, "rejects negative values");
      EXPECT_EQ(info.kind, KernelKind::optimized);
    }
    found_gemm |= info.id() == "gemm:cpu:reference";
  }
  EXPECT_TRUE(found_probe);
  EXPECT_TRUE(found_gemm);
}

TEST(KernelCatalog, TableShowsOneLinePerVariant) {
  const std::string table = format_kernel_table();
  EXPECT_EQ(table.rfind("id ", 0), 0u) << table;  // header first
  std::vector<std::string> lines;
  for (size_t start = 0, end; (end = table.find('\n', start)) != std::string::npos; start = end + 1)
    lines.push_back(table.substr(start, end - start));
  EXPECT_EQ(lines.size(), all_kernels().size() + 1);
  auto line_of = [&](std::string_view id) -> std::string {
    for (const std::string& line : lines)
      if (line.rfind(std::string(id) + " ", 0) == 0) return line;
    return "";
  };
  const std::string openblas = line_of("gemm:cpu:openblas");
  ASSERT_FALSE(openblas.empty()) << table;
  for (const char* field : {" cpu ", " optimized ", " 100 ", " yes ", "OpenBLAS", " builtin"})
    EXPECT_NE(openblas.find(field), std::string::npos) << field << " missing from: " << openblas;
  // The highest priority first within an op.
  EXPECT_LT(table.find("registry_probe:cpu:faster"), table.find("registry_probe:cpu:fast "));
  EXPECT_LT(table.find("registry_probe:cpu:fast "), table.find("registry_probe:cpu:reference"));

  const std::string cuda_table = format_kernel_table(DeviceType::cuda);
  EXPECT_EQ(cuda_table.find(":cpu:"), std::string::npos) << cuda_table;
  // CUDA variants run only with a GPU present.
  if (cuda_devices().empty() && cuda_compiled()) {
    const size_t gemm = cuda_table.find("gemm:cuda:cublaslt");
    ASSERT_NE(gemm, std::string::npos) << cuda_table;
    const std::string line = cuda_table.substr(gemm, cuda_table.find('\n', gemm) - gemm);
    EXPECT_NE(line.find(" no "), std::string::npos) << line;
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// The `kernels` config section.

KernelsConfig load_config(const std::string& yaml) {
  KernelsConfig config;
  config.load(YAML::Load(yaml), "kernels");
  config.validate("kernels");
  return config;
}

TEST(KernelsConfig, IncludeIsAWordOrAList) {
  EXPECT_EQ(load_config("{}").include.mode, KernelSelection::Mode::all);
  EXPECT_EQ(load_config("include: auto").include.mode, KernelSelection::Mode::all);
  EXPECT_EQ(load_config("include: none").include.mode, KernelSelection::Mode::baseline_only);
  const KernelsConfig config = load_config("include: [gemm:cpu:openblas]\nexclude: [registry_probe:cpu:faster]");
  EXPECT_EQ(config.include.mode, KernelSelection::Mode::listed);
  const KernelSelection selection = config.to_selection();
  EXPECT_EQ(selection.mode, KernelSelection::Mode::listed);
  EXPECT_EQ(selection.included, std::set<std::string>{"gemm:cpu:openblas"});
  EXPECT_EQ(selection.excluded, std::set<std::string>{"registry_probe:cpu:faster"});
  EXPECT_TRUE(selection.autotune);  // the default
  EXPECT_FALSE(load_config("autotune: false").to_selection().autotune);
  EXPECT_THROW(load_config("autotune: sometimes"), ConfigError);
}

TEST(KernelsConfig, WritesBackWhatItRead) {
  for (const char* yaml : {"include: none", "include: auto", "include: [gemm:cpu:openblas, gemm:cuda:cublaslt]"}) {
    const KernelsConfig config = load_config(yaml);
    const KernelsConfig reread = load_config(config.to_yaml_string());
    EXPECT_EQ(reread.include, config.include) << yaml;
  }
  EXPECT_NE(load_config("include: none").to_yaml_string().find("include: none"), std::string::npos);
}

TEST(KernelsConfig, BadValuesNameTheField) {
  expect_error([] { load_config("include: gemm:cpu:openblas"); },
               "kernels.include: expected `auto`, `none` or a list of kernel ids, got 'gemm:cpu:openblas' (a single id "
               "is written as a list: [gemm:cpu:openblas])");
  expect_error([] { load_config("include: {gemm: 1}"); }, "kernels.include: expected `auto`, `none` or a list");
  expect_error([] { load_config("exclude: [openblas]"); },
               "kernels.exclude: element 0: 'openblas' is not a kernel id of the form op:device:variant");
  expect_error([] { load_config("include: [gemm:gpu:cublaslt]"); }, "names device 'gpu'; expected cpu or cuda");
  expect_error([] { load_config("include: [gemm:cpu:openblas]\nexclude: [gemm:cpu:openblas]"); },
               "kernels.exclude: 'gemm:cpu:openblas' is both included and excluded");
  expect_error([] { load_config("includes: none"); }, "kernels.includes: unknown field; did you mean 'include'?");
}

TEST(KernelsConfig, ApplySetsTheSelectionAndChecksIds) {
  {
    const KernelsConfig config = load_config("include: none");
    config.apply();
    EXPECT_EQ(run_probe(2), "reference");
  }
  set_kernel_selection(KernelSelection{});
  expect_error([] { load_config("include: [registry_probe:cpu:fastest]").apply(); },
               "kernels.include: unknown kernel 'registry_probe:cpu:fastest'; did you mean 'registry_probe:cpu:faster'?");
  expect_error([] { load_config("plugins: [/nonexistent/libkernels.so]").apply(); },
               "[kernels] kernel plugin /nonexistent/libkernels.so: no such file");
  EXPECT_EQ(kernel_selection().mode, KernelSelection::Mode::all);
}

}  // namespace
}  // namespace fast_llm::kernels
