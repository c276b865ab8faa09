// loss_op_io: runs ONE head-loss op of the kernel registry on inputs read from a safetensors file and writes what it
// computes (loss sums, metric sums, the logits gradient) to another, so that tools/loss_torch_check.py can compare
// every variant (the CPU reference, the CUDA ones) with the loss written independently in PyTorch (issue 23, Checks).
// The ops are called through their public headers exactly as the head calls them; the tool adds no math of its own
// (dpo's reference log-probabilities come from the registry's label_log_probabilities, as the head computes them).
//
//   loss_op_io --list-variants                       prints "op device variant" per registered variant of the ops
//   loss_op_io OP INPUT OUTPUT [key=value ...]       OP: cross_entropy | distillation | distillation_term | dpo |
//                                                    grpo | gspo
//
// Keys: device=cpu|cuda (cpu), variant=NAME|default (default: the registry's choice, as training makes it; a named
// variant that declines the arguments exits with status 3 and its reason), logits_scale_factor, and per op:
//   cross_entropy  label_weight, z_loss_weight, softcap                (z_loss_sum is always computed)
//   distillation   loss_type=cross_entropy|forward_kl|reverse_kl, temperature, weight, softcap
//   distillation_term  the distillation as cross_entropy's distillation term (the head's path; the registry's op is
//                  cross_entropy_forward_backward): distillation's keys and label_weight (0), z_loss_weight (0);
//                  loss_sum is the distillation's, z_loss_sum is written too (the label loss sum is not)
//   dpo            beta, weight
//   grpo, gspo     epsilon_low, epsilon_high, grad_weight, softcap, num_documents (required)
// Input tensors: logits (tokens, vocab) floating, computed in the dtype stored; labels (tokens) I64; distillation and
// distillation_term: target_logits (tokens, vocab) floating; dpo: reference_logits (tokens, vocab) floating and pairs
// (pairs, 4) I64 [chosen_begin, chosen_end, rejected_begin, rejected_end] (the op reads the reference's per-row
// log-probabilities of the labels, which the tool computes from reference_logits with label_log_probabilities's CPU
// reference in fp64, F64 for F64 reference logits and F32 otherwise, then moves to the device: the dpo variant is
// checked on its own); grpo / gspo: advantages and old_log_probabilities (tokens) F32 and label_documents (tokens)
// I32. Output: loss_sum (1) F64, z_loss_sum (1) F64 (cross_entropy, distillation_term), metric_sums (metrics) F64
// (grpo / gspo, names in the metadata "metric_names"), grad_logits in the logits' dtype; metadata
// "variant" names the variant that ran. Bad input (missing tensor, wrong dtype or shape, unknown key or value) is an
// error naming the file or key: exit status 1 (2 for a usage error).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fast_llm/core/device.h"
#include "fast_llm/core/error.h"
#include "fast_llm/engine/checkpoint/safetensors.h"
#include "fast_llm/kernels/cross_entropy.h"
#include "fast_llm/kernels/distillation.h"
#include "fast_llm/kernels/dpo.h"
#include "fast_llm/kernels/label_log_probabilities.h"
#include "fast_llm/kernels/policy_gradient.h"
#include "fast_llm/kernels/registry.h"
#include "fast_llm/layers/language_model/policy_gradient_loss.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm {
namespace {

constexpr std::string_view kTool = "loss_op_io";

// A variant that cannot run the arguments it was named for (registry `supports`): not a wrong result.
struct Declined {
  std::string message;
};

// The key=value arguments; every key must be read by the op (an unused one is a typo: an error).
class Parameters {
 public:
  Parameters(int argc, char** argv, int first) {
    for (int index = first; index < argc; ++index) {
      const std::string argument = argv[index];
      const size_t equals = argument.find('=');
      FLM_CHECK(equals != std::string::npos && equals > 0, kTool, "argument '{}' is not key=value", argument);
      const std::string key = argument.substr(0, equals);
      FLM_CHECK(!values_.contains(key), kTool, "key '{}' is given twice", key);
      values_[key] = argument.substr(equals + 1);
    }
  }

  std::string text(const std::string& key, const std::string& fallback) {
    used_.insert(key);
    const auto found = values_.find(key);
    return found == values_.end() ? fallback : found->second;
  }

  std::optional<double> optional_number(const std::string& key) {
    used_.insert(key);
    const auto found = values_.find(key);
    if (found == values_.end()) return std::nullopt;
    const std::string& value = found->second;
    double number = 0.0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
    FLM_CHECK(error == std::errc() && end == value.data() + value.size() && std::isfinite(number), kTool,
              "{}={}: expected a finite number", key, value);
    return number;
  }

  double number(const std::string& key, double fallback) { return optional_number(key).value_or(fallback); }

  // Every key given was read by the op.
  void check_all_used(std::string_view op) const {
    for (const auto& [key, value] : values_)
      FLM_CHECK(used_.contains(key), kTool, "key '{}' is not a parameter of {}", key, op);
  }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> used_;
};

std::string dtype_list(const std::vector<DType>& dtypes) {
  std::string text;
  for (const DType dtype : dtypes)
    text += (text.empty() ? "" : " or ") + std::string(engine::safetensors_dtype(dtype).name);
  return text;
}

// The inputs file: each tensor checked (present, dtype, shape; -1 in `shape` takes any size) before it is read.
class Inputs {
 public:
  Inputs(const std::filesystem::path& path, Device device) : file_(path), device_(device) {}

  Tensor read(const std::string& name, const std::vector<DType>& dtypes, const std::vector<int64_t>& shape) const {
    FLM_CHECK(file_.contains(name), kTool, "{}: no tensor '{}' (this op needs it)", file_.path().string(), name);
    const engine::SafetensorsTensorInfo& info = file_.info(name);
    const bool dtype_ok =
        info.dtype.dtype && std::find(dtypes.begin(), dtypes.end(), *info.dtype.dtype) != dtypes.end();
    FLM_CHECK(dtype_ok, kTool, "{}: tensor '{}' has dtype {}, expected {}", file_.path().string(), name,
              info.dtype.name, dtype_list(dtypes));
    bool shape_ok = info.shape.size() == shape.size();
    for (size_t axis = 0; shape_ok && axis < shape.size(); ++axis)
      shape_ok = shape[axis] < 0 || info.shape[axis] == shape[axis];
    FLM_CHECK(shape_ok, kTool, "{}: tensor '{}' has shape {}, expected {}", file_.path().string(), name,
              fmt::format("[{}]", fmt::join(info.shape, ", ")),
              fmt::format("[{}] (-1: any size)", fmt::join(shape, ", ")));
    const Tensor host = file_.read(name);
    return device_.is_cpu() ? host : host.to(device_);
  }

 private:
  engine::SafetensorsFile file_;
  Device device_;
};

const std::vector<DType> kFloating = {DType::float64, DType::float32, DType::bfloat16, DType::float16};

// A (1) or (n) float64 zero tensor on `device`: the loss sums the ops add to.
Tensor zeros(int64_t size, Device device) {
  const std::vector<float> values(size_t(size), 0.0f);
  const Tensor host = Tensor::from_values(values, Shape{size}, DType::float64);
  return device.is_cpu() ? host : host.to(device);
}

// Runs `variant` ("default": the registry's choice) of Op on `args` after the op's contract check; returns its id.
template <class Op>
std::string run_op(const typename Op::Args& args, void (*check)(const typename Op::Args&), Device device,
                   const std::string& variant) {
  check(args);
  const auto& registry = kernels::OpRegistry<Op>::instance();
  const auto& chosen = variant == "default" ? registry.select(args, device) : registry.find(variant, device);
  if (chosen.supports)
    if (auto reason = chosen.supports(args)) throw Declined{fmt::format("{} declines: {}", chosen.info.id(), *reason)};
  chosen.run(args);
  return chosen.info.id();
}

std::optional<double> softcap_of(Parameters& parameters) { return parameters.optional_number("softcap"); }

kernels::DistillationLossType loss_type_of(const std::string& name) {
  if (name == "cross_entropy") return kernels::DistillationLossType::cross_entropy;
  if (name == "forward_kl") return kernels::DistillationLossType::forward_kl;
  if (name == "reverse_kl") return kernels::DistillationLossType::reverse_kl;
  throw Error(kTool, fmt::format("loss_type={}: expected cross_entropy, forward_kl or reverse_kl", name));
}

int run(const std::string& op, const std::filesystem::path& input, const std::filesystem::path& output,
        Parameters& parameters) {
  const std::string device_name = parameters.text("device", "cpu");
  FLM_CHECK(device_name == "cpu" || device_name == "cuda", kTool, "device={}: expected cpu or cuda", device_name);
  const Device device = device_name == "cpu" ? Device::cpu() : Device::cuda();
  FLM_CHECK(device.is_cpu() || cuda_compiled(), kTool, "device=cuda: this build has no CUDA backend");
  const std::string variant = parameters.text("variant", "default");
  const double scale = parameters.number("logits_scale_factor", 1.0);

  const Inputs inputs(input, device);
  const Tensor logits = inputs.read("logits", kFloating, {-1, -1});
  const int64_t tokens = logits.size(0), vocab = logits.size(1);
  const Tensor labels = inputs.read("labels", {DType::int64}, {tokens});
  Tensor loss_sum = zeros(1, device);
  Tensor grad_logits = Tensor::empty(logits.shape(), logits.dtype(), device);
  std::vector<engine::SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata{{"op", op}};
  auto add_output = [&](const std::string& name, const Tensor& tensor) {
    const Tensor host = tensor.to(Device::cpu());
    entries.push_back({.name = name, .dtype = host.dtype(), .shape = host.shape(), .values = [host] { return host; }});
  };

  std::string ran;
  if (op == "cross_entropy" || op == "distillation_term") {
    // distillation_term: the cross-entropy op with its distillation term, whose loss is the loss_sum output (the label
    // loss then goes to a sum that is not written).
    const bool term = op == "distillation_term";
    Tensor z_loss_sum = zeros(1, device);
    Tensor label_loss_sum = term ? zeros(1, device) : loss_sum;
    const Tensor target_logits = term ? inputs.read("target_logits", kFloating, {tokens, vocab}) : Tensor();
    std::optional<kernels::CrossEntropyDistillation> distillation;
    if (term)
      distillation.emplace(kernels::CrossEntropyDistillation{
          .target_logits = target_logits,
          .loss_sum = loss_sum,
          .loss_type = loss_type_of(parameters.text("loss_type", "cross_entropy")),
          .temperature = parameters.number("temperature", 1.0),
          .weight = parameters.number("weight", 1.0)});
    const kernels::CrossEntropyArgs args{.logits = logits,
                                         .labels = labels,
                                         .label_loss_sum = label_loss_sum,
                                         .z_loss_sum = &z_loss_sum,
                                         .grad_logits = &grad_logits,
                                         .label_weight = parameters.number("label_weight", term ? 0.0 : 1.0),
                                         .distillation = distillation ? &*distillation : nullptr,
                                         .z_loss_weight = parameters.number("z_loss_weight", 0.0),
                                         .logits_scale_factor = scale,
                                         .softcap = softcap_of(parameters)};
    parameters.check_all_used(op);
    ran = run_op<kernels::CrossEntropyForwardBackward>(args, &kernels::check_cross_entropy_forward_backward, device,
                                                       variant);
    add_output("z_loss_sum", z_loss_sum);
  } else if (op == "distillation") {
    const Tensor target_logits = inputs.read("target_logits", kFloating, {tokens, vocab});
    const kernels::DistillationArgs args{.logits = logits,
                                         .target_logits = target_logits,
                                         .labels = labels,
                                         .loss_sum = loss_sum,
                                         .grad_logits = &grad_logits,
                                         .loss_type = loss_type_of(parameters.text("loss_type", "cross_entropy")),
                                         .temperature = parameters.number("temperature", 1.0),
                                         .weight = parameters.number("weight", 1.0),
                                         .logits_scale_factor = scale,
                                         .softcap = softcap_of(parameters)};
    parameters.check_all_used(op);
    ran = run_op<kernels::DistillationForwardBackward>(args, &kernels::check_distillation_forward_backward, device,
                                                       variant);
  } else if (op == "dpo") {
    const Tensor reference_logits = inputs.read("reference_logits", kFloating, {tokens, vocab}).to(Device::cpu());
    Tensor host_log_probabilities =
        Tensor::empty(Shape{tokens}, reference_logits.dtype() == DType::float64 ? DType::float64 : DType::float32);
    kernels::label_log_probabilities(
        {.logits = reference_logits, .labels = labels.to(Device::cpu()), .output = host_log_probabilities});
    const Tensor reference_log_probabilities =
        device.is_cpu() ? host_log_probabilities : host_log_probabilities.to(device);
    const Tensor pairs_tensor = inputs.read("pairs", {DType::int64}, {-1, 4}).to(Device::cpu());
    std::vector<kernels::PreferencePair> pairs;
    const int64_t* bounds = pairs_tensor.data_as<int64_t>();
    for (int64_t pair = 0; pair < pairs_tensor.size(0); ++pair)
      pairs.push_back({bounds[4 * pair], bounds[4 * pair + 1], bounds[4 * pair + 2], bounds[4 * pair + 3]});
    const kernels::DpoArgs args{.logits = logits,
                                .reference_log_probabilities = reference_log_probabilities,
                                .labels = labels,
                                .pairs = pairs,
                                .loss_sum = loss_sum,
                                .grad_logits = &grad_logits,
                                .beta = parameters.number("beta", 1.0),
                                .weight = parameters.number("weight", 1.0),
                                .logits_scale_factor = scale};
    parameters.check_all_used(op);
    ran = run_op<kernels::DpoForwardBackward>(args, &kernels::check_dpo_forward_backward, device, variant);
  } else if (op == "grpo" || op == "gspo") {
    const Tensor advantages = inputs.read("advantages", {DType::float32}, {tokens});
    const Tensor old_log_probabilities = inputs.read("old_log_probabilities", {DType::float32}, {tokens});
    const Tensor label_documents = inputs.read("label_documents", {DType::int32}, {tokens});
    const std::optional<double> documents = parameters.optional_number("num_documents");
    FLM_CHECK(documents && *documents >= 0 && *documents == double(int64_t(*documents)), kTool,
              "{} needs num_documents=N (a non-negative integer)", op);
    Tensor metric_sums = zeros(kernels::kPolicyMetricCount, device);
    const kernels::PolicyGradientArgs args{.logits = logits,
                                           .labels = labels,
                                           .advantages = advantages,
                                           .old_log_probabilities = old_log_probabilities,
                                           .label_documents = label_documents,
                                           .num_documents = int64_t(*documents),
                                           .sequence_level = op == "gspo",
                                           .loss_sum = loss_sum,
                                           .metric_sums = &metric_sums,
                                           .grad_logits = &grad_logits,
                                           .grad_weight = parameters.number("grad_weight", 1.0),
                                           .epsilon_low = parameters.number("epsilon_low", 0.2),
                                           .epsilon_high = parameters.number("epsilon_high", 0.2),
                                           .logits_scale_factor = scale,
                                           .softcap = softcap_of(parameters)};
    parameters.check_all_used(op);
    ran = run_op<kernels::PolicyGradientForwardBackward>(args, &kernels::check_policy_gradient_forward_backward,
                                                         device, variant);
    add_output("metric_sums", metric_sums);
    metadata["metric_names"] = fmt::format("{}", fmt::join(layers::kPolicyMetricNames, ","));
  } else {
    throw Error(kTool, fmt::format("unknown op '{}': expected cross_entropy, distillation, distillation_term, dpo, "
                                   "grpo or gspo",
                                   op));
  }
  add_output("loss_sum", loss_sum);
  add_output("grad_logits", grad_logits);
  metadata["variant"] = ran;
  engine::write_safetensors(output, entries, metadata);
  std::printf("%s: ran %s\n", std::string(kTool).c_str(), ran.c_str());
  return 0;
}

void list_variants() {
  const std::set<std::string> ops = {"cross_entropy_forward_backward", "distillation_forward_backward",
                                     "dpo_forward_backward", "policy_gradient_forward_backward"};
  for (const kernels::KernelInfo& info : kernels::all_kernels())
    if (ops.contains(info.op))
      std::printf("%s %s %s\n", info.op.c_str(), info.device == DeviceType::cpu ? "cpu" : "cuda",
                  info.variant.c_str());
}

}  // namespace
}  // namespace fast_llm

int main(int argc, char** argv) {
  const std::string usage =
      "usage: loss_op_io --list-variants\n"
      "       loss_op_io cross_entropy|distillation|distillation_term|dpo|grpo|gspo INPUT.safetensors "
      "OUTPUT.safetensors "
      "[device=cpu|cuda] [variant=NAME|default] [key=value ...]\n";
  try {
    if (argc == 2 && std::string(argv[1]) == "--list-variants") {
      fast_llm::list_variants();
      return 0;
    }
    if (argc < 4) {
      std::fputs(usage.c_str(), stderr);
      return 2;
    }
    fast_llm::Parameters parameters(argc, argv, 4);
    return fast_llm::run(argv[1], argv[2], argv[3], parameters);
  } catch (const fast_llm::Declined& declined) {
    std::fprintf(stderr, "loss_op_io: %s\n", declined.message.c_str());
    return 3;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "loss_op_io: %s\n", error.what());
    return 1;
  }
}
