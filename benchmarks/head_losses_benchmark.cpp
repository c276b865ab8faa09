// head losses benchmark: the language-model head's loss passes over one chunk of logits on the GPU, the label loss
// (with z-loss) beside grpo, dpo or distillation, at 8192 rows x vocabulary 49152 in bf16 (SmolLM2's head) by default:
//
//   separate  what the head ran before the fused path: the other loss writes its gradient into a (rows, vocab)
//             buffer, cross-entropy overwrites the logits with its own, axpy adds the buffer;
//   fused     grpo / dpo add their per-row coefficients to a (rows) fp32 buffer and the cross-entropy pass writes
//             every loss's gradient (kernels/cross_entropy.h row_gradient_weights); distillation is the
//             cross-entropy pass's distillation term: the teacher's fp32 rows are read in the same pass, no buffer;
//   label     cross-entropy alone, the floor both approach.
// And grpo alone and distillation alone (no label loss): the op's own gradient pass over the logits (in place)
// against what the head runs, a cross-entropy pass of label weight 0 without z-loss with the coefficients or the
// distillation term. Last, the policy op's statistics alone (passes 1 and 2 with the metric sums and advantage
// extremes, row coefficients out, no gradient pass), then the dpo op's (the log-probabilities of the logits, the
// pairs with the reference's given log-probabilities, row coefficients out, no gradient pass), each under every CUDA
// variant of its op called by name, against the first one's outputs (relative error of the norm of the row
// coefficients and of the loss / metric sums / extremes; above 1e-4 the program exits with status 1). The dpo op
// reads the reference's per-row log-probabilities of the labels, computed once on the host from the fp32 reference
// logits; kernels/label_log_probabilities.h computing them on the GPU is timed beside the dpo op (when it has a CUDA
// variant), as the part of the work the dpo op did itself when it read the reference's logits.
//
//   head_losses_benchmark [rows [vocab [iterations]]]
//
// Each path first runs once on the same logits and the two gradients are compared (relative error of the norm,
// printed; above 1e-2 the program exits with status 1). Then each path is timed with CUDA events (3 warm-up runs, the
// median of `iterations`, 20), every run starting with a copy of the pristine logits into the working buffer (they
// are overwritten by their gradient); the copy alone is timed too and subtracted. Needs a GPU.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "device_timing.h"
#include "fast_llm/core/half.h"
#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/cross_entropy.h"
#include "fast_llm/kernels/distillation.h"
#include "fast_llm/kernels/dpo.h"
#include "fast_llm/kernels/label_log_probabilities.h"
#include "fast_llm/kernels/pointwise.h"
#include "fast_llm/kernels/policy_gradient.h"
#include "fast_llm/tensor/stream.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm {
namespace {

using namespace kernels;

const Device kCuda = Device::cuda(0);

// Random values in [low, high) as `dtype`, generated on the host (a pure function of the seed) and copied over.
Tensor random_device(const Shape& shape, DType dtype, uint64_t seed, float low, float high) {
  Tensor host = Tensor::empty(shape, dtype);
  const int64_t count = host.numel();
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t index = 0; index < count; ++index) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const float value = low + (high - low) * float(state >> 40) / float(1 << 24);
    if (dtype == DType::bfloat16)
      host.data_as<bfloat16>()[index] = to_bfloat16(value);
    else
      host.data_as<float>()[index] = value;
  }
  return host.to(kCuda);
}

Tensor zeros_device(const Shape& shape, DType dtype) {
  Tensor tensor = Tensor::empty(shape, dtype, kCuda);
  fill({.tensor = tensor, .value = 0.0});
  return tensor;
}

// The micro-batch around the chunk: labels (every 20th masked), grpo token data over 16 documents, dpo pairs of
// 128-row spans covering the rows, teacher / reference logits and the reference's log-probabilities of the labels.
struct Batch {
  int64_t rows, vocab;
  Tensor labels, advantages, old_log_probabilities, documents, reference_logits;
  Tensor reference_log_probabilities;  // (rows) fp32, what the dpo op reads
  std::vector<PreferencePair> pairs;
};

Batch make_batch(int64_t rows, int64_t vocab) {
  Batch batch{.rows = rows, .vocab = vocab, .labels = {}, .advantages = {}, .old_log_probabilities = {},
              .documents = {}, .reference_logits = {}, .reference_log_probabilities = {}, .pairs = {}};
  Tensor labels = Tensor::empty(Shape{rows}, DType::int64), advantages = Tensor::empty(Shape{rows}, DType::float32);
  Tensor old = Tensor::empty(Shape{rows}, DType::float32), documents = Tensor::empty(Shape{rows}, DType::int32);
  const int64_t document_rows = std::max<int64_t>(1, rows / 16);
  for (int64_t row = 0; row < rows; ++row) {
    labels.data_as<int64_t>()[row] = row % 20 == 7 ? -100 : (row * 7919 + 11) % vocab;
    const int64_t document = std::min<int64_t>(15, row / document_rows);
    documents.data_as<int32_t>()[row] = int32_t(document);
    advantages.data_as<float>()[row] = 0.1f * float(document) - 0.75f;
    old.data_as<float>()[row] = -float(std::log(double(vocab))) + 0.3f * float(row % 5 - 2);
  }
  batch.labels = labels.to(kCuda);
  batch.advantages = advantages.to(kCuda);
  batch.old_log_probabilities = old.to(kCuda);
  batch.documents = documents.to(kCuda);
  batch.reference_logits = random_device(Shape{rows, vocab}, DType::float32, 3, -8, 8);
  // On the host (the CPU reference): the GPU variant of label_log_probabilities is optional here, timed apart.
  Tensor reference_log_probabilities = Tensor::empty(Shape{rows}, DType::float32);
  label_log_probabilities({.logits = batch.reference_logits.to(Device::cpu()), .labels = labels,
                           .output = reference_log_probabilities});
  batch.reference_log_probabilities = reference_log_probabilities.to(kCuda);
  for (int64_t begin = 0; begin + 256 <= rows; begin += 256)
    batch.pairs.push_back({.chosen_begin = begin, .chosen_end = begin + 128, .rejected_begin = begin + 128,
                           .rejected_end = begin + 256});
  return batch;
}

enum class Other { grpo, dpo, distillation };

const char* other_name(Other other) {
  switch (other) {
    case Other::grpo: return "grpo";
    case Other::dpo: return "dpo";
    case Other::distillation: return "distillation";
  }
  return "";
}

struct Sums {
  Tensor label = zeros_device(Shape{1}, DType::float32), z = zeros_device(Shape{1}, DType::float32),
         other = zeros_device(Shape{1}, DType::float32);
};

// The other loss: its gradient into `grad` (separate path) or its row coefficients into `row_weights` (fused path).
void run_other(Other other, const Batch& batch, const Tensor& logits, Sums& sums, Tensor* grad, Tensor* row_weights) {
  const double scale = 1.0 / double(batch.rows);
  switch (other) {
    case Other::grpo:
      policy_gradient_forward_backward({.logits = logits, .labels = batch.labels, .advantages = batch.advantages,
                                        .old_log_probabilities = batch.old_log_probabilities,
                                        .label_documents = batch.documents, .num_documents = 16,
                                        .sequence_level = false, .loss_sum = sums.other, .metric_sums = nullptr,
                                        .grad_logits = grad, .grad_weight = scale, .row_coefficients = row_weights});
      return;
    case Other::dpo:
      dpo_forward_backward({.logits = logits, .reference_log_probabilities = batch.reference_log_probabilities,
                            .labels = batch.labels, .pairs = batch.pairs, .loss_sum = sums.other, .grad_logits = grad,
                            .row_coefficients = row_weights, .beta = 0.1,
                            .weight = 1.0 / double(batch.pairs.size())});
      return;
    case Other::distillation:
      distillation_forward_backward({.logits = logits, .target_logits = batch.reference_logits,
                                     .labels = batch.labels, .loss_sum = sums.other, .grad_logits = grad,
                                     .loss_type = DistillationLossType::reverse_kl, .weight = scale});
      return;
  }
}

// The distillation term with the settings of run_other's distillation.
CrossEntropyDistillation distillation_term(const Batch& batch, Sums& sums) {
  return {.target_logits = batch.reference_logits, .loss_sum = sums.other,
          .loss_type = DistillationLossType::reverse_kl, .weight = 1.0 / double(batch.rows)};
}

void run_label(const Batch& batch, Tensor& logits, Sums& sums, const Tensor* row_weights,
               const CrossEntropyDistillation* distillation = nullptr) {
  cross_entropy_forward_backward({.logits = logits, .labels = batch.labels, .label_loss_sum = sums.label,
                                  .z_loss_sum = &sums.z, .grad_logits = &logits,
                                  .label_weight = 1.0 / double(batch.rows), .row_gradient_weights = row_weights,
                                  .distillation = distillation, .z_loss_weight = 1e-4});
}

void separate_path(Other other, const Batch& batch, Tensor& logits, Tensor& buffer, Sums& sums) {
  run_other(other, batch, logits, sums, &buffer, nullptr);
  run_label(batch, logits, sums, nullptr);
  axpy({.input = buffer, .output = logits, .alpha = 1.0});
}

void fused_path(Other other, const Batch& batch, Tensor& logits, Tensor& row_weights, Sums& sums) {
  if (other == Other::distillation) {
    const CrossEntropyDistillation distillation = distillation_term(batch, sums);
    run_label(batch, logits, sums, nullptr, &distillation);
    return;
  }
  fill({.tensor = row_weights, .value = 0.0});
  run_other(other, batch, logits, sums, nullptr, &row_weights);
  run_label(batch, logits, sums, &row_weights);
}

// The relative error of the norm of `actual` against `expected`.
double relative_error(const std::vector<double>& actual, const std::vector<double>& expected) {
  double error = 0, norm = 0;
  for (size_t index = 0; index < actual.size(); ++index) {
    error += (actual[index] - expected[index]) * (actual[index] - expected[index]);
    norm += expected[index] * expected[index];
  }
  return std::sqrt(error / norm);
}

// A variant's outputs as doubles: its row coefficients, then its sums.
using VariantOutputs = std::pair<std::vector<double>, std::vector<double>>;

// Each CUDA variant of Op called by name on `args` (every run after `reset`, which refills the outputs), timed and
// compared with the first variant's outputs; whether they agree (relative error of the norm within 1e-4).
template <class Op>
bool compare_variants(const typename Op::Args& args, const std::function<void()>& reset,
                      const std::function<VariantOutputs()>& outputs, int iterations) {
  bool agree = true;
  std::optional<VariantOutputs> first;
  for (const auto& variant : OpRegistry<Op>::instance().variants()) {
    if (variant.info.device != DeviceType::cuda) continue;
    if (variant.supports != nullptr)
      if (const auto reason = variant.supports(args)) {
        std::printf("    %-10s declines: %s\n", variant.info.variant.c_str(), reason->c_str());
        continue;
      }
    auto run = [&] {
      reset();
      variant.run(args);
    };
    run();
    const VariantOutputs result = outputs();
    if (!first) first = result;
    const double coefficient_error = relative_error(result.first, first->first);
    const double sum_error = relative_error(result.second, first->second);
    agree = agree && coefficient_error <= 1e-4 && sum_error <= 1e-4;
    const double ms = benchmarks::median_ms(run, 3, iterations);
    std::printf("    %-10s %8.3f ms   (against the first: row coefficients %.2e, sums %.2e; loss sum %.9g)\n",
                variant.info.variant.c_str(), ms, coefficient_error, sum_error, result.second[0]);
  }
  return agree;
}

// The row coefficients (fp32, rows) as doubles, then each of `sums` (fp64) in order.
VariantOutputs read_outputs(const Tensor& row_weights, std::initializer_list<const Tensor*> sums) {
  synchronize_device(kCuda);
  VariantOutputs result;
  const Tensor host_weights = row_weights.to(Device::cpu());
  for (int64_t row = 0; row < host_weights.numel(); ++row)
    result.first.push_back(double(host_weights.data_as<float>()[row]));
  for (const Tensor* tensor : sums) {
    const Tensor host = tensor->to(Device::cpu());
    for (int64_t index = 0; index < host.numel(); ++index) result.second.push_back(host.data_as<double>()[index]);
  }
  return result;
}

// The policy op's statistics under each CUDA variant (see the file comment); whether they agree.
bool compare_policy_variants(const Batch& batch, const Tensor& logits, int iterations) {
  Tensor row_weights = Tensor::empty(Shape{batch.rows}, DType::float32, kCuda);
  Tensor loss = Tensor::empty(Shape{1}, DType::float64, kCuda);
  Tensor metrics = Tensor::empty(Shape{kPolicyMetricCount}, DType::float64, kCuda);
  Tensor largest = Tensor::empty(Shape{1}, DType::float64, kCuda);
  Tensor smallest = Tensor::empty(Shape{1}, DType::float64, kCuda);
  const PolicyGradientArgs args{.logits = logits, .labels = batch.labels, .advantages = batch.advantages,
                                .old_log_probabilities = batch.old_log_probabilities,
                                .label_documents = batch.documents, .num_documents = 16, .sequence_level = false,
                                .loss_sum = loss, .metric_sums = &metrics, .grad_logits = nullptr,
                                .grad_weight = 1.0 / double(batch.rows), .row_coefficients = &row_weights,
                                .max_advantage = &largest, .min_advantage = &smallest};
  check_policy_gradient_forward_backward(args);
  std::printf("  grpo statistics (metrics, extremes, row coefficients; no gradient pass) by CUDA variant, each run "
              "after 5 fills of its outputs (a few us):\n");
  return compare_variants<PolicyGradientForwardBackward>(
      args,
      [&] {
        fill({.tensor = row_weights, .value = 0.0});
        fill({.tensor = loss, .value = 0.0});
        fill({.tensor = metrics, .value = 0.0});
        fill({.tensor = largest, .value = -INFINITY});
        fill({.tensor = smallest, .value = INFINITY});
      },
      [&] { return read_outputs(row_weights, {&loss, &metrics, &largest, &smallest}); }, iterations);
}

// label_log_probabilities on the fp32 reference logits under the variant the registry selects on the GPU (as training
// does): its median time and the relative error of its output against the host's (batch.reference_log_probabilities);
// whether they agree.
bool time_reference_log_probabilities(const Batch& batch, int iterations) {
  Tensor output = Tensor::empty(Shape{batch.rows}, DType::float32, kCuda);
  const LabelLogProbabilitiesArgs args{.logits = batch.reference_logits, .labels = batch.labels, .output = output};
  check_label_log_probabilities(args);
  const auto& chosen = OpRegistry<LabelLogProbabilities>::instance().select(args, kCuda);
  const double ms = benchmarks::median_ms([&] { chosen.run(args); }, 3, iterations);
  synchronize_device(kCuda);
  std::vector<double> actual, expected;
  const Tensor host = output.to(Device::cpu()), host_expected = batch.reference_log_probabilities.to(Device::cpu());
  for (int64_t row = 0; row < host.numel(); ++row) {
    actual.push_back(double(host.data_as<float>()[row]));
    expected.push_back(double(host_expected.data_as<float>()[row]));
  }
  const double error = relative_error(actual, expected);
  std::printf("  reference log-probabilities (label_log_probabilities \"%s\" on the fp32 reference logits, the work "
              "the dpo op did itself before): %.3f ms (against the host's: %.2e)\n",
              chosen.info.variant.c_str(), ms, error);
  return error <= 1e-4;
}

// The dpo op's statistics under each CUDA variant: the batch's pairs (128-row spans over every row), row coefficients
// and the loss sum out, no gradient pass (the head's fused path); whether they agree.
bool compare_dpo_variants(const Batch& batch, const Tensor& logits, int iterations) {
  Tensor row_weights = Tensor::empty(Shape{batch.rows}, DType::float32, kCuda);
  Tensor loss = Tensor::empty(Shape{1}, DType::float64, kCuda);
  const DpoArgs args{.logits = logits, .reference_log_probabilities = batch.reference_log_probabilities,
                     .labels = batch.labels, .pairs = batch.pairs, .loss_sum = loss, .grad_logits = nullptr,
                     .row_coefficients = &row_weights, .beta = 0.1,
                     .weight = 1.0 / double(std::max<size_t>(1, batch.pairs.size()))};
  check_dpo_forward_backward(args);
  std::printf("  dpo statistics (%zu pairs, fp32 reference log-probabilities, row coefficients; no gradient pass) by "
              "CUDA variant, each run after 2 fills of its outputs (a few us):\n",
              batch.pairs.size());
  return compare_variants<DpoForwardBackward>(
      args,
      [&] {
        fill({.tensor = row_weights, .value = 0.0});
        fill({.tensor = loss, .value = 0.0});
      },
      [&] { return read_outputs(row_weights, {&loss}); }, iterations);
}

double relative_error(const Tensor& actual, const Tensor& expected) {
  synchronize_device(kCuda);
  const Tensor a = actual.to(Device::cpu()), e = expected.to(Device::cpu());
  double error = 0, norm = 0;
  for (int64_t index = 0; index < a.numel(); ++index) {
    const double x = double(to_float(a.data_as<bfloat16>()[index]));
    const double y = double(to_float(e.data_as<bfloat16>()[index]));
    error += (x - y) * (x - y);
    norm += y * y;
  }
  return std::sqrt(error / norm);
}

int run_benchmark(int64_t rows, int64_t vocab, int iterations) {
  const Batch batch = make_batch(rows, vocab);
  const Shape shape{rows, vocab};
  const Tensor pristine = random_device(shape, DType::bfloat16, 1, -8, 8);
  Tensor logits = Tensor::empty(shape, DType::bfloat16, kCuda);
  Tensor other_logits = Tensor::empty(shape, DType::bfloat16, kCuda);
  Tensor buffer = Tensor::empty(shape, DType::bfloat16, kCuda);
  Tensor row_weights = Tensor::empty(Shape{rows}, DType::float32, kCuda);
  Sums sums;
  const double buffer_mib = double(rows * vocab * 2) / (1 << 20);
  std::printf("head losses, %lld rows x vocab %lld bf16 (label + z-loss beside another loss); median of %d runs, ms "
              "(the copy of the pristine logits each run starts with subtracted)\n",
              static_cast<long long>(rows), static_cast<long long>(vocab), iterations);
  using Path = std::function<void(Tensor&)>;  // overwrites the logits it is given with their gradient
  auto restore = [&](Tensor& target) { copy({.source = pristine, .destination = target}); };
  const double copy_ms = benchmarks::median_ms([&] { restore(logits); }, 3, iterations);
  // A path's time on fresh logits, the copy subtracted.
  auto time_ms = [&](const Path& path) {
    return benchmarks::median_ms(
               [&] {
                 restore(logits);
                 path(logits);
               },
               3, iterations) -
           copy_ms;
  };
  // The relative error of `fused`'s gradient against `separate`'s, both from the pristine logits.
  auto compare = [&](const Path& separate, const Path& fused) {
    restore(other_logits);
    separate(other_logits);
    restore(logits);
    fused(logits);
    return relative_error(logits, other_logits);
  };
  const double label_ms = time_ms([&](Tensor& target) { run_label(batch, target, sums, nullptr); });
  std::printf("  copy %.3f ms; label + z-loss alone %.3f ms\n", copy_ms, label_ms);
  bool agree = true;
  for (Other other : {Other::grpo, Other::dpo, Other::distillation}) {
    const Path separate = [&](Tensor& target) { separate_path(other, batch, target, buffer, sums); };
    const Path fused = [&](Tensor& target) { fused_path(other, batch, target, row_weights, sums); };
    const double separate_ms = time_ms(separate);
    const double error = compare(separate, fused);
    agree = agree && error < 1e-2;
    const double fused_ms = time_ms(fused);
    std::printf("  label + %-12s separate %8.3f ms   fused %8.3f ms   %.2fx   (fused gradient vs separate: relative "
                "error %.2e; %s)\n",
                other_name(other), separate_ms, fused_ms, separate_ms / fused_ms, error,
                fmt::format("{:.0f} MiB buffer saved", buffer_mib).c_str());
  }
  // grpo alone: the policy op's own gradient pass, or the head's cross-entropy pass of label weight 0.
  const Path alone_separate = [&](Tensor& target) { run_other(Other::grpo, batch, target, sums, &target, nullptr); };
  const Path alone_fused = [&](Tensor& target) {
    fill({.tensor = row_weights, .value = 0.0});
    run_other(Other::grpo, batch, target, sums, nullptr, &row_weights);
    cross_entropy_forward_backward({.logits = target, .labels = batch.labels, .label_loss_sum = sums.label,
                                    .z_loss_sum = nullptr, .grad_logits = &target, .label_weight = 0.0,
                                    .row_gradient_weights = &row_weights});
  };
  // A loss without the label loss: its own pass against the head's pass, compared, timed and printed.
  const auto time_alone = [&](const char* name, const Path& own, const Path& head) {
    const double error = compare(own, head);
    agree = agree && error < 1e-2;
    const double own_ms = time_ms(own), head_ms = time_ms(head);
    std::printf("  %-20s own pass %8.3f ms   cross-entropy pass %8.3f ms   %.2fx   (relative error %.2e)\n", name,
                own_ms, head_ms, own_ms / head_ms, error);
  };
  time_alone("grpo alone", alone_separate, alone_fused);
  // distillation alone: its op's own pass (in place), or the head's cross-entropy pass of label weight 0.
  const Path distillation_separate = [&](Tensor& target) {
    run_other(Other::distillation, batch, target, sums, &target, nullptr);
  };
  const Path distillation_fused = [&](Tensor& target) {
    const CrossEntropyDistillation distillation = distillation_term(batch, sums);
    cross_entropy_forward_backward({.logits = target, .labels = batch.labels, .label_loss_sum = sums.label,
                                    .z_loss_sum = nullptr, .grad_logits = &target, .label_weight = 0.0,
                                    .distillation = &distillation});
  };
  time_alone("distillation alone", distillation_separate, distillation_fused);
  restore(logits);
  agree = compare_policy_variants(batch, logits, iterations) && agree;
  agree = compare_dpo_variants(batch, logits, iterations) && agree;
  agree = time_reference_log_probabilities(batch, iterations) && agree;
  std::fflush(stdout);
  return agree ? 0 : 1;
}

}  // namespace
}  // namespace fast_llm

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 8192;
  const int64_t vocab = argc > 2 ? std::atoll(argv[2]) : 49152;
  const int iterations = argc > 3 ? std::atoi(argv[3]) : 20;
  if (rows <= 0 || vocab <= 0 || iterations <= 0 || argc > 4) {
    std::fprintf(stderr, "usage: head_losses_benchmark [rows [vocab [iterations]]]\n");
    return 2;
  }
  try {
    return fast_llm::run_benchmark(rows, vocab, iterations);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "head_losses_benchmark: %s\n", error.what());
    return 1;
  }
}
