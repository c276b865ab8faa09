// Tests of the head's fused loss path (kernels/cross_entropy.h row_gradient_weights, fed by the `row_coefficients`
// outputs of kernels/policy_gradient.h and kernels/dpo.h, and the distillation term): the cross-entropy gradient with
// per-row weights against central finite differences in fp64 of label loss + z-loss + sum_r c_r (lse_r - z_r[label_r])
// (c_r constants), masked rows, in place == out of place, zero weights == no weights bit for bit; then the
// composition the head relies on: cross-entropy with the policy's and dpo's row coefficients and the distillation
// term gives the same loss sums as, and the gradient of, the separate ops' gradients added together (fp64 to 1e-12,
// 16-bit logits within their rounding); errors of the contract. The CUDA cases (named *Cuda*, skipped without a GPU)
// run the same composition on the device against the CPU reference's: the fused TMA and direct paths with row
// weights, grpo / gspo / dpo / distillation, softcap and scale. The distillation term alone:
// cross_entropy_distillation_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "fast_llm/kernels/cross_entropy.h"
#include "fast_llm/kernels/distillation.h"
#include "fast_llm/kernels/dpo.h"
#include "fast_llm/kernels/label_log_probabilities.h"
#include "fast_llm/kernels/pointwise.h"
#include "fast_llm/kernels/policy_gradient.h"
#include "kernels/consistency.h"
#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Options {
  bool z_loss = false;
  double label_weight = 0.37;
  double logits_scale_factor = 1.0;
  std::optional<double> softcap = std::nullopt;
};

std::vector<Options> all_options() {
  std::vector<Options> options;
  for (bool z_loss : {false, true})
    for (double label_weight : {0.0, 0.37})
      for (double scale : {1.0, 0.6})
        for (std::optional<double> softcap : {std::optional<double>(), std::optional<double>(2.0)})
          options.push_back(
              {.z_loss = z_loss, .label_weight = label_weight, .logits_scale_factor = scale, .softcap = softcap});
  return options;
}

std::string describe(const Options& o) {
  return fmt::format("z_loss={} label_weight={} scale={} softcap={}", o.z_loss, o.label_weight, o.logits_scale_factor,
                     o.softcap.value_or(0));
}

// The objective whose gradient the op writes: label_weight sum_r (lse_r - z_r[label]) + z_loss_weight sum_r lse_r^2
// + sum_r c_r (lse_r - z_r[label]), over unmasked rows, in fp64 straight from the definitions.
double naive_objective(const std::vector<double>& logits, const std::vector<int64_t>& labels, int64_t vocab,
                       const Options& options, double z_loss_weight, const std::vector<double>& row_weights) {
  double total = 0;
  for (size_t row = 0; row < labels.size(); ++row) {
    if (labels[row] < 0) continue;
    double sum = 0, label_z = 0;
    for (int64_t column = 0; column < vocab; ++column) {
      double z = logits[row * size_t(vocab) + size_t(column)] * options.logits_scale_factor;
      if (options.softcap) z = *options.softcap * std::tanh(z / *options.softcap);
      sum += std::exp(z);
      if (column == labels[row]) label_z = z;
    }
    const double lse = std::log(sum);
    total += (options.label_weight + row_weights[row]) * (lse - label_z);
    if (options.z_loss) total += z_loss_weight * lse * lse;
  }
  return total;
}

struct Sums {
  double label = 0, z = 0;
};

Sums run_cross_entropy(const Tensor& logits, const std::vector<int64_t>& labels, Tensor* grad,
                       const Tensor* row_weights, const Options& options, double z_loss_weight = 0.11,
                       DType sum_dtype = DType::float64) {
  Tensor label_sum = filled(Shape{1}, sum_dtype, 0.0), z_sum = filled(Shape{1}, sum_dtype, 0.0);
  const Tensor label_values = labels_tensor(labels);
  cross_entropy_forward_backward({.logits = logits,
                                  .labels = label_values,
                                  .label_loss_sum = label_sum,
                                  .z_loss_sum = options.z_loss ? &z_sum : nullptr,
                                  .grad_logits = grad,
                                  .label_weight = options.label_weight,
                                  .row_gradient_weights = row_weights,
                                  .z_loss_weight = options.z_loss ? z_loss_weight : 0.0,
                                  .logits_scale_factor = options.logits_scale_factor,
                                  .softcap = options.softcap});
  return {label_sum.item_as_double(std::vector<int64_t>{0}), z_sum.item_as_double(std::vector<int64_t>{0})};
}

// ---------------------------------------------------------------------------------------------------------------------
// Cross-entropy with row weights

TEST(FusedHeadLossesReference, RowWeightsMatchFiniteDifferences) {
  const int64_t vocab = 7;
  const std::vector<int64_t> labels{3, 0, -100, 6, 2, 3};
  // Weights of both signs; the masked row's weight must be ignored.
  const std::vector<double> weights{0.5, -0.8, 3.0, 0.0, 1.25, -0.1};
  for (DType weight_dtype : {DType::float64, DType::float32}) {
    const Tensor row_weights = make_tensor(weights, Shape{6}, weight_dtype);
    const std::vector<double> rounded = values_of(row_weights);
    for (const Options& options : all_options()) {
      SCOPED_TRACE(fmt::format("{} weights {}", describe(options), dtype_name(weight_dtype)));
      const Tensor logits = random_tensor(Shape{6, vocab}, DType::float64, 201, -3, 3);
      Tensor grad = filled(Shape{6, vocab}, DType::float64, kNaN);
      const Sums with_weights = run_cross_entropy(logits, labels, &grad, &row_weights, options);
      const Sums without = run_cross_entropy(logits, labels, nullptr, nullptr, options);
      // The weights touch the gradient only.
      EXPECT_EQ(with_weights.label, without.label);
      EXPECT_EQ(with_weights.z, without.z);
      const auto objective = [&] { return naive_objective(values_of(logits), labels, vocab, options, 0.11, rounded); };
      expect_near(grad, finite_difference_gradient(logits, objective), 1e-9, 1e-7, "grad");
      const std::vector<double> values = values_of(grad);
      for (int64_t column = 0; column < vocab; ++column) EXPECT_EQ(values[size_t(2 * vocab + column)], 0.0);
    }
  }
}

TEST(FusedHeadLossesReference, ZeroWeightsEqualNoWeightsAndInPlaceEqualsOutOfPlace) {
  const std::vector<int64_t> labels{0, 8, -100, 3};
  const Tensor zeros = filled(Shape{4}, DType::float32, 0.0);
  const Tensor weights = make_tensor({0.3, -1.5, 2.0, 0.7}, Shape{4}, DType::float32);
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float64}) {
    for (const Options& options : all_options()) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dtype), describe(options)));
      const Tensor logits = random_tensor(Shape{4, 9}, dtype, 211, -3, 3);
      Tensor plain = Tensor::empty(Shape{4, 9}, dtype), zero_weighted = Tensor::empty(Shape{4, 9}, dtype);
      run_cross_entropy(logits, labels, &plain, nullptr, options);
      run_cross_entropy(logits, labels, &zero_weighted, &zeros, options);
      expect_near(zero_weighted, values_of(plain), 0, 0, "zero weights");
      Tensor out_of_place = Tensor::empty(Shape{4, 9}, dtype);
      run_cross_entropy(logits, labels, &out_of_place, &weights, options);
      Tensor in_place = converted(logits, dtype);
      run_cross_entropy(in_place, labels, &in_place, &weights, options);
      expect_near(in_place, values_of(out_of_place), 0, 0, "in place");
    }
  }
}

TEST(FusedHeadLossesReference, RowWeightErrors) {
  const Tensor logits = random_tensor(Shape{2, 5}, DType::float32, 221);
  Tensor loss_sum = filled(Shape{1}, DType::float32, 0);
  Tensor grad = Tensor::empty(Shape{2, 5}, DType::float32);
  const Tensor labels = labels_tensor({1, -100});
  const auto call = [&](const Tensor& weights, Tensor* grad_logits) {
    cross_entropy_forward_backward({.logits = logits, .labels = labels, .label_loss_sum = loss_sum,
                                    .z_loss_sum = nullptr, .grad_logits = grad_logits,
                                    .row_gradient_weights = &weights});
  };
  expect_error([&] { call(filled(Shape{3}, DType::float32, 0), &grad); },
               "[cross_entropy_forward_backward] row_gradient_weights has shape (3), expected (2)");
  expect_error([&] { call(filled(Shape{2}, DType::bfloat16, 0), &grad); },
               "row_gradient_weights has dtype bfloat16; supported: float32, float64");
  expect_error([&] { call(filled(Shape{2}, DType::float32, 0), nullptr); },
               "row_gradient_weights are given but no grad_logits");
}

// ---------------------------------------------------------------------------------------------------------------------
// The composition the head relies on: policy / dpo coefficients into the cross-entropy pass == separate gradients.

// A micro-batch of `tokens` rows for grpo / gspo and dpo: three documents, every third row masked, two preference
// pairs over the rows (overlapping spans, a masked row inside one).
struct HeadProblem {
  int64_t tokens, vocab;
  std::vector<int64_t> labels;
  Tensor label_tensor, advantages, old_log_probabilities, documents, reference_logits;
  Tensor reference_log_probabilities;  // (tokens) fp32: the reference's per row, what dpo reads
  std::vector<PreferencePair> pairs;
};

HeadProblem head_problem(int64_t tokens, int64_t vocab, uint64_t seed) {
  HeadProblem problem{.tokens = tokens, .vocab = vocab, .labels = {}, .label_tensor = {}, .advantages = {},
                      .old_log_probabilities = {}, .documents = {}, .reference_logits = {},
                      .reference_log_probabilities = {}, .pairs = {}};
  std::vector<double> advantages, old_log_probs, documents;
  const double uniform = -std::log(double(vocab));
  for (int64_t token = 0; token < tokens; ++token) {
    problem.labels.push_back(token % 3 == 2 ? -100 : (token * 5 + 1) % vocab);
    const int64_t document = token == 0 ? 0 : token < tokens / 2 ? 1 : 2;
    documents.push_back(double(document));
    advantages.push_back(0.4 * double(document) - 0.5 + 0.05 * double(token % 4));
    old_log_probs.push_back(uniform + 0.4 * double((token * 7) % 5 - 2));
  }
  problem.label_tensor = labels_tensor(problem.labels);
  problem.advantages = make_tensor(advantages, Shape{tokens}, DType::float32);
  problem.old_log_probabilities = make_tensor(old_log_probs, Shape{tokens}, DType::float32);
  problem.documents = make_tensor(documents, Shape{tokens}, DType::int32);
  problem.reference_logits = random_tensor(Shape{tokens, vocab}, DType::float32, seed + 1, -3, 3);
  problem.reference_log_probabilities = filled(Shape{tokens}, DType::float32, 0.0);
  label_log_probabilities({.logits = problem.reference_logits,
                           .labels = problem.label_tensor,
                           .output = problem.reference_log_probabilities});
  problem.pairs = {{.chosen_begin = 0, .chosen_end = tokens / 3, .rejected_begin = tokens / 3,
                    .rejected_end = 2 * tokens / 3},
                   {.chosen_begin = 1, .chosen_end = tokens / 2, .rejected_begin = tokens / 2, .rejected_end = tokens}};
  return problem;
}

// The losses beside the label losses: row-weighted (grpo, gspo, dpo) and / or the distillation term.
enum class Row { grpo, gspo, dpo, grpo_and_dpo, distillation, all };

std::string row_name(Row row) {
  switch (row) {
    case Row::grpo: return "grpo";
    case Row::gspo: return "gspo";
    case Row::dpo: return "dpo";
    case Row::grpo_and_dpo: return "grpo+dpo";
    case Row::distillation: return "distillation";
    case Row::all: return "grpo+dpo+distillation";
  }
  return "";
}

bool has_policy(Row row) { return row == Row::grpo || row == Row::gspo || row == Row::grpo_and_dpo || row == Row::all; }
bool has_dpo(Row row) { return row == Row::dpo || row == Row::grpo_and_dpo || row == Row::all; }
bool has_distillation(Row row) { return row == Row::distillation || row == Row::all; }

struct LossSums {
  Tensor label, z, policy, dpo, distillation;
};

LossSums zero_sums(DType dtype, Device device) {
  auto zero = [&] { return filled(Shape{1}, dtype, 0.0).to(device); };
  return {zero(), zero(), zero(), zero(), zero()};
}

void run_policy(const HeadProblem& p, const Tensor& logits, bool gspo, Tensor& loss_sum, Tensor* grad,
                Tensor* row_coefficients, std::optional<double> softcap, double scale, Device device) {
  const Tensor labels = p.label_tensor.to(device), advantages = p.advantages.to(device);
  const Tensor old = p.old_log_probabilities.to(device), documents = p.documents.to(device);
  policy_gradient_forward_backward({.logits = logits,
                                    .labels = labels,
                                    .advantages = advantages,
                                    .old_log_probabilities = old,
                                    .label_documents = documents,
                                    .num_documents = 3,
                                    .sequence_level = gspo,
                                    .loss_sum = loss_sum,
                                    .metric_sums = nullptr,
                                    .grad_logits = grad,
                                    .grad_weight = 0.7,
                                    .row_coefficients = row_coefficients,
                                    .epsilon_low = 0.2,
                                    .epsilon_high = 0.28,
                                    .logits_scale_factor = scale,
                                    .softcap = softcap});
}

// The distillation's settings, as the separate op's and as the cross-entropy pass's term.
constexpr DistillationLossType kDistillationType = DistillationLossType::reverse_kl;
constexpr double kTemperature = 1.5, kDistillationWeight = 0.65;

void run_distillation(const HeadProblem& p, const Tensor& logits, Tensor& loss_sum, Tensor& grad,
                      const Options& options, Device device) {
  const Tensor labels = p.label_tensor.to(device), teacher = p.reference_logits.to(device);
  distillation_forward_backward({.logits = logits,
                                 .target_logits = teacher,
                                 .labels = labels,
                                 .loss_sum = loss_sum,
                                 .grad_logits = &grad,
                                 .loss_type = kDistillationType,
                                 .temperature = kTemperature,
                                 .weight = kDistillationWeight,
                                 .logits_scale_factor = options.logits_scale_factor,
                                 .softcap = options.softcap});
}

void run_dpo(const HeadProblem& p, const Tensor& logits, Tensor& loss_sum, Tensor* grad, Tensor* row_coefficients,
             double scale, Device device) {
  const Tensor labels = p.label_tensor.to(device), reference = p.reference_log_probabilities.to(device);
  dpo_forward_backward({.logits = logits,
                        .reference_log_probabilities = reference,
                        .labels = labels,
                        .pairs = p.pairs,
                        .loss_sum = loss_sum,
                        .grad_logits = grad,
                        .row_coefficients = row_coefficients,
                        .beta = 0.8,
                        .weight = 0.45,
                        .logits_scale_factor = scale});
}

// The head's fused path on `device`: the coefficients of the configured losses added into row weights, then one
// cross-entropy pass writing the gradient over the logits (in place). Returns the gradient on the host.
std::vector<double> fused_path(const HeadProblem& p, const Tensor& host_logits, Row row, const Options& options,
                               LossSums& sums, Device device) {
  // A copy (on the CPU too): the gradient is written over it.
  Tensor logits = device.is_cpu() ? converted(host_logits, host_logits.dtype()) : host_logits.to(device);
  const DType weight_dtype = device.is_cpu() && host_logits.dtype() == DType::float64 ? DType::float64
                                                                                       : DType::float32;
  Tensor row_weights = filled(Shape{p.tokens}, weight_dtype, 0.0).to(device);
  const Tensor teacher = p.reference_logits.to(device);
  const CrossEntropyDistillation distillation{.target_logits = teacher,
                                              .loss_sum = sums.distillation,
                                              .loss_type = kDistillationType,
                                              .temperature = kTemperature,
                                              .weight = kDistillationWeight};
  if (has_dpo(row)) run_dpo(p, logits, sums.dpo, nullptr, &row_weights, options.logits_scale_factor, device);
  if (has_policy(row))
    run_policy(p, logits, row == Row::gspo, sums.policy, nullptr, &row_weights, options.softcap,
               options.logits_scale_factor, device);
  const Tensor labels = p.label_tensor.to(device);
  cross_entropy_forward_backward({.logits = logits,
                                  .labels = labels,
                                  .label_loss_sum = sums.label,
                                  .z_loss_sum = options.z_loss ? &sums.z : nullptr,
                                  .grad_logits = &logits,
                                  .label_weight = options.label_weight,
                                  .row_gradient_weights = &row_weights,
                                  .distillation = has_distillation(row) ? &distillation : nullptr,
                                  .z_loss_weight = options.z_loss ? 0.11 : 0.0,
                                  .logits_scale_factor = options.logits_scale_factor,
                                  .softcap = options.softcap});
  if (device.is_cuda()) synchronize_device(device);
  return values_of(logits.to(Device::cpu()));
}

// The unfused composition on the CPU in fp64 (the head's path before the fusion): each loss writes its own gradient,
// added up.
std::vector<double> separate_path(const HeadProblem& p, const Tensor& host_logits, Row row, const Options& options,
                                  LossSums& sums) {
  const Tensor logits = converted(host_logits, DType::float64);
  const Shape shape{p.tokens, p.vocab};
  Tensor total = Tensor::empty(shape, DType::float64), part = Tensor::empty(shape, DType::float64);
  const Tensor labels = p.label_tensor;
  cross_entropy_forward_backward({.logits = logits,
                                  .labels = labels,
                                  .label_loss_sum = sums.label,
                                  .z_loss_sum = options.z_loss ? &sums.z : nullptr,
                                  .grad_logits = &total,
                                  .label_weight = options.label_weight,
                                  .z_loss_weight = options.z_loss ? 0.11 : 0.0,
                                  .logits_scale_factor = options.logits_scale_factor,
                                  .softcap = options.softcap});
  if (has_distillation(row)) {
    run_distillation(p, logits, sums.distillation, part, options, Device::cpu());
    axpy({.input = part, .output = total, .alpha = 1.0});
  }
  if (has_dpo(row)) {
    run_dpo(p, logits, sums.dpo, &part, nullptr, options.logits_scale_factor, Device::cpu());
    axpy({.input = part, .output = total, .alpha = 1.0});
  }
  if (has_policy(row)) {
    run_policy(p, logits, row == Row::gspo, sums.policy, &part, nullptr, options.softcap,
               options.logits_scale_factor, Device::cpu());
    axpy({.input = part, .output = total, .alpha = 1.0});
  }
  return values_of(total);
}

double value(const Tensor& sum) {
  if (sum.device().is_cuda()) synchronize_device(sum.device());
  return sum.to(Device::cpu()).item_as_double(std::vector<int64_t>{0});
}

// dpo does not support a softcap (the head refuses it): its cases run without.
bool applicable(Row row, const Options& options) { return !(options.softcap && has_dpo(row)); }

TEST(FusedHeadLossesReference, CoefficientsIntoCrossEntropyEqualSeparateGradients) {
  const HeadProblem problem = head_problem(12, 11, 231);
  for (Row row : {Row::grpo, Row::gspo, Row::dpo, Row::grpo_and_dpo, Row::distillation, Row::all})
    for (const Options& options : all_options()) {
      if (!applicable(row, options)) continue;
      SCOPED_TRACE(fmt::format("{} {}", row_name(row), describe(options)));
      const Tensor logits = random_tensor(Shape{problem.tokens, problem.vocab}, DType::float64, 233, -4, 4);
      LossSums fused_sums = zero_sums(DType::float64, Device::cpu());
      LossSums separate_sums = zero_sums(DType::float64, Device::cpu());
      const std::vector<double> fused = fused_path(problem, logits, row, options, fused_sums, Device::cpu());
      const std::vector<double> separate = separate_path(problem, logits, row, options, separate_sums);
      expect_near(fused, separate, 1e-14, 1e-12, "gradient");
      EXPECT_EQ(value(fused_sums.label), value(separate_sums.label));
      EXPECT_EQ(value(fused_sums.z), value(separate_sums.z));
      EXPECT_EQ(value(fused_sums.policy), value(separate_sums.policy));
      EXPECT_EQ(value(fused_sums.dpo), value(separate_sums.dpo));
      EXPECT_EQ(value(fused_sums.distillation), value(separate_sums.distillation));
      // Something was checked: the other losses' gradient (the separate path's beyond the label losses') is not zero.
      Tensor label_only = Tensor::empty(Shape{problem.tokens, problem.vocab}, DType::float64);
      run_cross_entropy(logits, problem.labels, &label_only, nullptr, options);
      const std::vector<double> label_values = values_of(label_only);
      double norm = 0;
      for (size_t index = 0; index < separate.size(); ++index)
        norm += (separate[index] - label_values[index]) * (separate[index] - label_values[index]);
      EXPECT_GT(norm, 0.0);
    }
}

TEST(FusedHeadLossesReference, LowPrecisionFusedWithinRoundingOfSeparate) {
  // 16-bit logits: the fused gradient is rounded once, the separate ones once each and then added in fp64 here.
  const HeadProblem problem = head_problem(12, 11, 241);
  for (DType dtype : kLowPrecisionDTypes)
    for (Row row : {Row::grpo, Row::all}) {
      const Options options{.z_loss = true, .label_weight = 0.37, .logits_scale_factor = 0.6};
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dtype), row_name(row)));
      const Tensor logits = random_tensor(Shape{problem.tokens, problem.vocab}, dtype, 243, -4, 4);
      LossSums fused_sums = zero_sums(DType::float32, Device::cpu());
      LossSums separate_sums = zero_sums(DType::float64, Device::cpu());
      const std::vector<double> fused = fused_path(problem, logits, row, options, fused_sums, Device::cpu());
      const std::vector<double> separate = separate_path(problem, logits, row, options, separate_sums);
      const double tolerance = dtype_tolerance(dtype);
      expect_near(fused, separate, tolerance, tolerance, "gradient");
      EXPECT_NEAR(value(fused_sums.policy), value(separate_sums.policy),
                  1e-5 * (1 + std::abs(value(separate_sums.policy))));
    }
}

TEST(FusedHeadLossesReference, CoefficientErrors) {
  const HeadProblem problem = head_problem(6, 5, 251);
  const Tensor logits = random_tensor(Shape{6, 5}, DType::float32, 253);
  Tensor loss_sum = filled(Shape{1}, DType::float32, 0);
  Tensor wrong_shape = filled(Shape{5}, DType::float32, 0), wrong_dtype = filled(Shape{6}, DType::bfloat16, 0);
  expect_error([&] { run_policy(problem, logits, false, loss_sum, nullptr, &wrong_shape, {}, 1.0, Device::cpu()); },
               "[policy_gradient_forward_backward] row_coefficients has shape (5), expected (6)");
  expect_error([&] { run_dpo(problem, logits, loss_sum, nullptr, &wrong_dtype, 1.0, Device::cpu()); },
               "[dpo_forward_backward] row_coefficients has dtype bfloat16; supported: float32, float64");
}

// ---------------------------------------------------------------------------------------------------------------------
// CUDA: the cross-entropy op with row weights through the consistency harness (the fused kernel's TMA path on one or
// several blocks of a cluster, and its direct path), and the whole fused composition on the device against the CPU.

TEST(FusedHeadLossesConsistency, CudaCrossEntropyRowWeightsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  struct Case {
    int64_t tokens, vocab;
    DType dtype;
    bool z_loss, in_place;
    double scale;
    std::optional<double> softcap;
  };
  const DType bf16 = DType::bfloat16, fp32 = DType::float32;
  const std::vector<Case> cases{
      {9, 1000, bf16, false, false, 1.0, std::nullopt},   {9, 1000, fp32, true, true, 0.5, 30.0},
      {5, 50257, bf16, true, true, 1.0, std::nullopt},    {3, 128256, bf16, true, true, 0.5, 30.0},
      {2, 200003, fp32, false, false, 1.0, 10.0},         {2, 500000, bf16, true, true, 1.0, std::nullopt},
      {1100, 15001, fp32, true, true, 1.0, std::nullopt}, {64, 49152, bf16, false, true, 1.0, std::nullopt},
      {6, 7, DType::float64, true, false, 1.0, std::nullopt}};
  uint64_t seed = 91000;
  bool ran = false;
  for (const Case& c : cases) {
    std::vector<double> labels, weights;
    for (int64_t token = 0; token < c.tokens; ++token) {
      labels.push_back(token % 7 == 1 ? -100.0 : double((token * 7919 + 13) % c.vocab));
      weights.push_back(token % 4 == 3 ? 0.0 : 0.05 * double(token % 9) - 0.2);  // a masked row may have a weight
    }
    const DType sum_dtype = c.dtype == DType::float64 ? DType::float64 : DType::float32;
    ConsistencyProblem<CrossEntropyForwardBackward> problem{
        .name = fmt::format("{} ({}, {}) z_loss={} in_place={}", dtype_name(c.dtype), c.tokens, c.vocab, c.z_loss,
                            c.in_place),
        .dtype = c.dtype, .tolerance = std::nullopt, .exact = false, .tensors = {}, .call = {}};
    if (c.dtype == DType::float32 && c.vocab > 100000) problem.tolerance = 5e-5;
    const Tensor logits = random_tensor(Shape{c.tokens, c.vocab}, c.dtype, ++seed, -8, 8);
    problem.tensors["logits"] = c.in_place ? accumulated_output(logits) : input(logits);
    problem.tensors["labels"] = input(make_tensor(labels, Shape{c.tokens}, DType::int64));
    problem.tensors["row_gradient_weights"] = input(make_tensor(weights, Shape{c.tokens}, DType::float32));
    problem.tensors["label_loss_sum"] = accumulated_output(filled(Shape{1}, sum_dtype, 0.25));
    if (c.z_loss) problem.tensors["z_loss_sum"] = accumulated_output(filled(Shape{1}, sum_dtype, 0.5));
    if (!c.in_place) problem.tensors["grad_logits"] = output(Tensor::empty(Shape{c.tokens, c.vocab}, c.dtype));
    problem.call = [c](TensorMap& t, const auto& run) {
      run({.logits = t.at("logits"), .labels = t.at("labels"), .label_loss_sum = t.at("label_loss_sum"),
           .z_loss_sum = c.z_loss ? &t.at("z_loss_sum") : nullptr,
           .grad_logits = c.in_place ? &t.at("logits") : &t.at("grad_logits"), .label_weight = 0.03,
           .row_gradient_weights = &t.at("row_gradient_weights"), .z_loss_weight = c.z_loss ? 1e-3 : 0.0,
           .logits_scale_factor = c.scale, .softcap = c.softcap});
    };
    for (const VariantOutcome& outcome : check_variants(problem, DeviceType::cuda)) ran = ran || !outcome.unsupported;
  }
  EXPECT_TRUE(ran) << "no CUDA variant ran a problem with row weights";
}

TEST(FusedHeadLossesConsistency, CudaFusedCompositionMatchesTheCpuReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const Device cuda = Device::cuda(0);
  for (const auto& [tokens, vocab] : std::vector<std::pair<int64_t, int64_t>>{{12, 1000}, {40, 49152}})
    for (DType dtype : {DType::bfloat16, DType::float32})
      for (Row row : {Row::grpo, Row::gspo, Row::dpo, Row::grpo_and_dpo, Row::distillation, Row::all})
        for (const Options& options :
             {Options{.z_loss = true, .label_weight = 0.37}, Options{.label_weight = 0.0, .logits_scale_factor = 0.6},
              Options{.z_loss = true, .label_weight = 0.37, .softcap = 15.0}}) {
          if (!applicable(row, options)) continue;
          SCOPED_TRACE(fmt::format("({}, {}) {} {} {}", tokens, vocab, dtype_name(dtype), row_name(row),
                                   describe(options)));
          const HeadProblem problem = head_problem(tokens, vocab, 261);
          const Tensor logits = random_tensor(Shape{tokens, vocab}, dtype, 263, -6, 6);
          LossSums cpu_sums = zero_sums(DType::float64, Device::cpu());
          LossSums cuda_sums = zero_sums(DType::float32, cuda);
          const std::vector<double> expected = fused_path(problem, logits, row, options, cpu_sums, Device::cpu());
          const std::vector<double> actual = fused_path(problem, logits, row, options, cuda_sums, cuda);
          double error = 0, norm = 0;
          for (size_t index = 0; index < expected.size(); ++index) {
            error += (actual[index] - expected[index]) * (actual[index] - expected[index]);
            norm += expected[index] * expected[index];
          }
          EXPECT_GT(norm, 0.0);
          // fp32 rows of 49152 logits: the CPU reference's sums run one after the other in fp32, whose rounding
          // grows with the length (distillation_consistency_test: 3e-5 at 32003 logits; 1.04e-5 measured here on the
          // H200), so the tolerance is that of a long sum, as there.
          const double tolerance = dtype == DType::float32 && vocab > 10000 ? 1e-4 : consistency_tolerance(dtype);
          EXPECT_LE(std::sqrt(error / norm), tolerance) << "gradient";
          for (const auto& [name, cpu, device] :
               {std::tuple{"label", &cpu_sums.label, &cuda_sums.label}, std::tuple{"z", &cpu_sums.z, &cuda_sums.z},
                std::tuple{"policy", &cpu_sums.policy, &cuda_sums.policy},
                std::tuple{"dpo", &cpu_sums.dpo, &cuda_sums.dpo},
                std::tuple{"distillation", &cpu_sums.distillation, &cuda_sums.distillation}})
            EXPECT_NEAR(value(*device), value(*cpu), 2e-4 * (1 + std::abs(value(*cpu)))) << name;
        }
}

}  // namespace
}  // namespace fast_llm::kernels
