// The backend-consistency harness: every registered variant of an op, on every device it is registered for, against
// the CPU `reference` variant, on the same fresh random inputs.
//
// A test describes a problem once, with its tensors on the CPU:
//
//   ConsistencyProblem<Gemm> problem{.name = "bf16 (7, 13, 5)", .dtype = DType::bfloat16};
//   problem.tensors["a"] = input(random_tensor(Shape{7, 5}, DType::bfloat16, seed));
//   problem.tensors["out"] = output(Tensor::empty(Shape{7, 13}, DType::bfloat16));
//   problem.call = [](TensorMap& t, const auto& run) { run({.a = t["a"], .b = t["b"], .out = t["out"]}); };
//   ConsistencyReport report = check_variants(problem, DeviceType::cpu);
//
// For each variant the harness copies the tensors to the variant's device (the storage, then the same view of it, so
// strided and transposed layouts survive), poisons the outputs with NaN (all-ones bytes) so an element a kernel forgets
// to write cannot pass, runs the variant if it supports the arguments, and compares each output with the reference's:
// relative error of the norm within the dtype's tolerance (fp32 1e-5, fp16 2e-3, bf16 1e-2; an output may set its
// own, e.g. a copy of an fp32 result rounded to bf16, where one ulp of fp32 can move an element by one of bf16), or
// bit for bit for
// `exact` problems. Where NaN is a legitimate result (exact problems, which may convert NaN), each run is repeated
// over a second poison (0x5a bytes, a large finite value in every dtype), which an unwritten element would show. The
// reference runs over both poisons and must give the same outputs (within the tolerance: its reductions may be
// parallel).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fast_llm/core/device.h"
#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"
#include "kernels/reference_test_util.h"

namespace fast_llm::kernels::testing {

using TensorMap = std::map<std::string, Tensor>;

// One tensor of a problem: its storage (a contiguous CPU tensor) and the view of it the op sees.
struct TensorSpec {
  Tensor storage;
  std::function<Tensor(const Tensor&)> view = nullptr;  // nullptr: the storage itself
  bool output = false;        // written by the op: compared with the reference
  bool keep_initial = false;  // an output whose initial values are read (+=, beta != 0): not poisoned
  std::optional<double> tolerance = std::nullopt;  // an output's own tolerance, instead of the problem's
};

inline TensorSpec input(Tensor storage, std::function<Tensor(const Tensor&)> view = nullptr) {
  return {.storage = std::move(storage), .view = std::move(view), .output = false, .keep_initial = false,
          .tolerance = std::nullopt};
}
inline TensorSpec output(Tensor storage, std::function<Tensor(const Tensor&)> view = nullptr) {
  return {.storage = std::move(storage), .view = std::move(view), .output = true, .keep_initial = false,
          .tolerance = std::nullopt};
}
// An output that is also read (its initial values come from `storage`).
inline TensorSpec accumulated_output(Tensor storage, std::function<Tensor(const Tensor&)> view = nullptr) {
  return {.storage = std::move(storage), .view = std::move(view), .output = true, .keep_initial = true,
          .tolerance = std::nullopt};
}

template <class Op>
struct ConsistencyProblem {
  std::string name;
  DType dtype = DType::float32;  // sets the tolerance
  // Overrides the dtype's tolerance, for long fp32 reductions whose rounding grows with their length.
  std::optional<double> tolerance = std::nullopt;
  bool exact = false;            // outputs must match the reference bit for bit (copies, casts, fills)
  std::map<std::string, TensorSpec> tensors;
  // Builds the op's arguments from the tensors (views, on the device under test) and passes them to `run`.
  std::function<void(TensorMap&, const std::function<void(const typename Op::Args&)>&)> call;
};

// Relative error of the norm allowed for results in `dtype` (against a reference computed the same way on the CPU).
inline double consistency_tolerance(DType dtype) {
  switch (dtype) {
    case DType::float32: return 1e-5;
    case DType::float16: return 2e-3;
    case DType::bfloat16: return 1e-2;
    case DType::float64: return 1e-12;
    default: return 0;
  }
}

struct VariantOutcome {
  std::string id;
  std::optional<std::string> unsupported;  // why the variant did not run, if it did not
};
using ConsistencyReport = std::vector<VariantOutcome>;

inline bool report_ran(const ConsistencyReport& report, std::string_view id) {
  for (const VariantOutcome& outcome : report)
    if (outcome.id == id) return !outcome.unsupported;
  return false;
}

// The bytes of each tensor, brought to the host: what a bitwise reproducibility test compares between two runs.
inline std::vector<std::vector<char>> host_bytes(std::initializer_list<const Tensor*> tensors) {
  std::vector<std::vector<char>> bytes;
  for (const Tensor* tensor : tensors) {
    const Tensor host = tensor->to(Device::cpu());
    const char* data = static_cast<const char*>(host.data());
    bytes.emplace_back(data, data + host.nbytes());
  }
  return bytes;
}

namespace detail {

inline constexpr unsigned char kNanPoison = 0xff;  // NaN in every floating dtype (-1 / the maximum in integer ones)
inline constexpr unsigned char kFinitePoison = 0x5a;

// The problem's tensors on `device`: each storage copied there, viewed as specified, outputs poisoned with `poison`
// bytes unless kept.
template <class Op>
TensorMap materialize(const ConsistencyProblem<Op>& problem, Device device, unsigned char poison) {
  TensorMap tensors;
  for (const auto& [name, spec] : problem.tensors) {
    Tensor host = Tensor::empty(spec.storage.shape(), spec.storage.dtype());
    std::memcpy(host.data(), spec.storage.data(), spec.storage.nbytes());
    if (spec.output && !spec.keep_initial) std::memset(host.data(), poison, host.nbytes());
    Tensor storage = device.is_cpu() ? host : host.to(device);
    tensors[name] = spec.view ? spec.view(storage) : storage;
  }
  return tensors;
}

// Every output of the problem read back to the host as doubles, row-major.
template <class Op>
std::map<std::string, std::vector<double>> read_outputs(const ConsistencyProblem<Op>& problem, TensorMap& tensors,
                                                        Device device) {
  if (device.is_cuda()) synchronize_device(device);
  std::map<std::string, std::vector<double>> outputs;
  for (const auto& [name, spec] : problem.tensors)
    if (spec.output) outputs[name] = values_of(tensors.at(name).to(Device::cpu()));
  return outputs;
}

inline void compare_output(const std::vector<double>& actual, const std::vector<double>& expected, double tolerance,
                           bool exact, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double error = 0, norm = 0;
  int reported = 0;
  for (size_t index = 0; index < actual.size(); ++index) {
    const bool both_nan = std::isnan(actual[index]) && std::isnan(expected[index]);
    if (exact) {
      if (!both_nan && !(actual[index] == expected[index]) && reported++ < 5)
        ADD_FAILURE() << what << ": element " << index << " is " << actual[index] << ", reference "
                      << expected[index];
      continue;
    }
    if (std::isnan(actual[index]) != std::isnan(expected[index])) {
      if (reported++ < 5)
        ADD_FAILURE() << what << ": element " << index << " is " << actual[index] << ", reference "
                      << expected[index] << " (unwritten elements stay NaN)";
      continue;
    }
    if (both_nan) continue;
    error += (actual[index] - expected[index]) * (actual[index] - expected[index]);
    norm += expected[index] * expected[index];
  }
  if (exact) return;
  if (norm == 0.0) {
    // An exactly zero reference (e.g. attention gradients when each query sees one key) has no scale to be relative
    // to: the root-mean-square error must then be far below the tolerance, as an absolute value.
    const double rms = std::sqrt(error / double(std::max<size_t>(actual.size(), 1)));
    EXPECT_LE(rms, 1e-2 * tolerance) << what << ": the reference is zero, root-mean-square error " << rms;
    return;
  }
  const double relative = std::sqrt(error) / std::sqrt(norm);
  EXPECT_LE(relative, tolerance) << what << ": relative error of the norm " << relative << " (reference norm "
                                 << std::sqrt(norm) << ")";
}

}  // namespace detail

// Runs every variant of Op registered for `device_type` (except the CPU reference) on `problem` and compares it with
// the reference. CUDA variants run on cuda:0; the caller skips when no GPU is visible.
template <class Op>
ConsistencyReport check_variants(const ConsistencyProblem<Op>& problem, DeviceType device_type) {
  using Args = typename Op::Args;
  SCOPED_TRACE(fmt::format("{} {}", Op::name, problem.name));
  ConsistencyReport report;
  const double problem_tolerance = problem.tolerance.value_or(consistency_tolerance(problem.dtype));
  auto tolerance = [&](const std::string& name) {
    return problem.tensors.at(name).tolerance.value_or(problem_tolerance);
  };

  const KernelVariant<Args>& reference = OpRegistry<Op>::instance().find("reference", Device::cpu());
  // Runs `variant` on the problem's tensors on `device` under `poison`; nothing if it declines (the reason is kept).
  auto run = [&](const KernelVariant<Args>& variant, Device device, unsigned char poison,
                 std::optional<std::string>& unsupported) -> std::map<std::string, std::vector<double>> {
    TensorMap tensors = detail::materialize(problem, device, poison);
    problem.call(tensors, [&](const Args& args) {
      if (variant.supports) unsupported = variant.supports(args);
      if (!unsupported) variant.run(args);
    });
    if (unsupported) return {};
    return detail::read_outputs(problem, tensors, device);
  };

  std::optional<std::string> reference_unsupported;
  const auto expected = run(reference, Device::cpu(), detail::kNanPoison, reference_unsupported);
  if (reference_unsupported) {
    ADD_FAILURE() << reference.info.id() << " does not support the problem: " << *reference_unsupported;
    return report;
  }
  // An element the reference leaves unwritten keeps the poison, so it differs between the two poisons.
  const auto expected_again = run(reference, Device::cpu(), detail::kFinitePoison, reference_unsupported);
  for (const auto& [name, values] : expected)
    detail::compare_output(expected_again.at(name), values, tolerance(name), problem.exact,
                           fmt::format("{} output {} under two poisons (unwritten elements?)", reference.info.id(),
                                       name));

  const Device device = device_type == DeviceType::cpu ? Device::cpu() : Device::cuda(0);
  for (const KernelVariant<Args>& variant : OpRegistry<Op>::instance().variants()) {
    if (variant.info.device != device_type || &variant == &reference) continue;
    VariantOutcome outcome{.id = variant.info.id(), .unsupported = std::nullopt};
    const auto actual = run(variant, device, detail::kNanPoison, outcome.unsupported);
    report.push_back(outcome);
    if (outcome.unsupported) continue;
    for (const auto& [name, values] : actual)
      detail::compare_output(values, expected.at(name), tolerance(name), problem.exact,
                             fmt::format("{} output {}", outcome.id, name));
    if (!problem.exact) continue;
    const auto actual_again = run(variant, device, detail::kFinitePoison, outcome.unsupported);
    for (const auto& [name, values] : actual_again)
      detail::compare_output(values, expected.at(name), tolerance(name), /*exact=*/true,
                             fmt::format("{} output {} (second poison)", outcome.id, name));
  }
  return report;
}

// Whether a CUDA device is visible (CUDA tests skip themselves without one).
inline bool have_cuda_device() { return !cuda_devices().empty(); }

}  // namespace fast_llm::kernels::testing
