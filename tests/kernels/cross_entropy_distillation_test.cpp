// Tests of cross_entropy_forward_backward's distillation term (kernels/cross_entropy.h), the head's distillation loss
// computed in the label loss's pass. CPU reference: in fp64 the term equals the separate composition it replaces (the
// cross-entropy op, then distillation_forward_backward's gradient added), loss sums and gradient within 1e-12, for
// each loss type with softcap, scale, temperature, z-loss, row weights, masked rows, label weight 0, in place and
// forward only, and 16-bit logits within their rounding; the combined gradient against central finite differences of
// label loss + z-loss + weight * distillation written from the definitions; the contract's errors. CUDA (named *Cuda*,
// skipped without a GPU): the fused variant against the CPU reference through the consistency harness, fp32 and bf16
// logits with fp32 teacher logits, vocabularies 1000, 49152, 50257 (rows not 16-byte aligned), 128256 on a cluster
// of blocks (the TMA path) and 200003 / 500000 (the direct path), each loss type; and two runs bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "fast_llm/kernels/cross_entropy.h"
#include "fast_llm/kernels/distillation.h"
#include "fast_llm/kernels/pointwise.h"
#include "kernels/consistency.h"
#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr DistillationLossType kLossTypes[] = {DistillationLossType::cross_entropy, DistillationLossType::forward_kl,
                                               DistillationLossType::reverse_kl};
constexpr double kZLossWeight = 0.11, kTemperature = 1.7, kWeight = 0.65;

struct Options {
  DistillationLossType loss_type = DistillationLossType::cross_entropy;
  bool z_loss = false;
  double label_weight = 0.37;
  double logits_scale_factor = 1.0;
  std::optional<double> softcap = std::nullopt;
};

std::vector<Options> all_options() {
  std::vector<Options> options;
  for (DistillationLossType loss_type : kLossTypes)
    for (bool z_loss : {false, true})
      for (double label_weight : {0.0, 0.37})
        for (double scale : {1.0, 0.6})
          for (std::optional<double> softcap : {std::optional<double>(), std::optional<double>(2.5)})
            options.push_back({.loss_type = loss_type, .z_loss = z_loss, .label_weight = label_weight,
                               .logits_scale_factor = scale, .softcap = softcap});
  return options;
}

std::string describe(const Options& o) {
  return fmt::format("type={} z_loss={} label_weight={} scale={} softcap={}", int(o.loss_type), o.z_loss,
                     o.label_weight, o.logits_scale_factor, o.softcap.value_or(0));
}

// Rows of a problem: every third masked.
std::vector<int64_t> problem_labels(int64_t tokens, int64_t vocab) {
  std::vector<int64_t> labels;
  for (int64_t token = 0; token < tokens; ++token) labels.push_back(token % 3 == 1 ? -100 : (token * 5 + 2) % vocab);
  return labels;
}

Tensor labels_tensor(const std::vector<int64_t>& labels) {
  return make_tensor(std::vector<double>(labels.begin(), labels.end()), Shape{int64_t(labels.size())}, DType::int64);
}

struct Sums {
  double label = 0, z = 0, distillation = 0;
};

// The op with the distillation term; `grad` may be `logits` (in place) or nullptr (forward only).
Sums run_fused(const Tensor& logits, const Tensor& teacher, const std::vector<int64_t>& labels, Tensor* grad,
               const Options& options, const Tensor* row_weights = nullptr) {
  Tensor label_sum = filled(Shape{1}, DType::float64, 0.0), z_sum = filled(Shape{1}, DType::float64, 0.0);
  Tensor distillation_sum = filled(Shape{1}, DType::float64, 0.0);
  const Tensor label_values = labels_tensor(labels);
  const CrossEntropyDistillation distillation{.target_logits = teacher,
                                              .loss_sum = distillation_sum,
                                              .loss_type = options.loss_type,
                                              .temperature = kTemperature,
                                              .weight = kWeight};
  cross_entropy_forward_backward({.logits = logits,
                                  .labels = label_values,
                                  .label_loss_sum = label_sum,
                                  .z_loss_sum = options.z_loss ? &z_sum : nullptr,
                                  .grad_logits = grad,
                                  .label_weight = options.label_weight,
                                  .row_gradient_weights = row_weights,
                                  .distillation = &distillation,
                                  .z_loss_weight = options.z_loss ? kZLossWeight : 0.0,
                                  .logits_scale_factor = options.logits_scale_factor,
                                  .softcap = options.softcap});
  const std::vector<int64_t> first{0};
  return {label_sum.item_as_double(first), z_sum.item_as_double(first), distillation_sum.item_as_double(first)};
}

// What the term replaces: the cross-entropy op and distillation_forward_backward, each writing its own gradient (in
// fp64 here), added. Returns the summed gradient (empty without `with_gradient`).
std::vector<double> run_separate(const Tensor& logits, const Tensor& teacher, const std::vector<int64_t>& labels,
                                 bool with_gradient, const Options& options, Sums& sums,
                                 const Tensor* row_weights = nullptr) {
  const Tensor logits64 = converted(logits, DType::float64);
  const Shape shape = logits.shape();
  Tensor total = Tensor::empty(shape, DType::float64), part = Tensor::empty(shape, DType::float64);
  Tensor label_sum = filled(Shape{1}, DType::float64, 0.0), z_sum = filled(Shape{1}, DType::float64, 0.0);
  Tensor distillation_sum = filled(Shape{1}, DType::float64, 0.0);
  const Tensor label_values = labels_tensor(labels);
  cross_entropy_forward_backward({.logits = logits64,
                                  .labels = label_values,
                                  .label_loss_sum = label_sum,
                                  .z_loss_sum = options.z_loss ? &z_sum : nullptr,
                                  .grad_logits = with_gradient ? &total : nullptr,
                                  .label_weight = options.label_weight,
                                  .row_gradient_weights = row_weights,
                                  .z_loss_weight = options.z_loss ? kZLossWeight : 0.0,
                                  .logits_scale_factor = options.logits_scale_factor,
                                  .softcap = options.softcap});
  distillation_forward_backward({.logits = logits64,
                                 .target_logits = teacher,
                                 .labels = label_values,
                                 .loss_sum = distillation_sum,
                                 .grad_logits = with_gradient ? &part : nullptr,
                                 .loss_type = options.loss_type,
                                 .temperature = kTemperature,
                                 .weight = kWeight,
                                 .logits_scale_factor = options.logits_scale_factor,
                                 .softcap = options.softcap});
  const std::vector<int64_t> first{0};
  sums = {label_sum.item_as_double(first), z_sum.item_as_double(first), distillation_sum.item_as_double(first)};
  if (!with_gradient) return {};
  axpy({.input = part, .output = total, .alpha = 1.0});
  return values_of(total);
}

void expect_sums_near(const Sums& actual, const Sums& expected, double tolerance) {
  EXPECT_NEAR(actual.label, expected.label, tolerance * (1 + std::abs(expected.label))) << "label";
  EXPECT_NEAR(actual.z, expected.z, tolerance * (1 + std::abs(expected.z))) << "z";
  EXPECT_NEAR(actual.distillation, expected.distillation, tolerance * (1 + std::abs(expected.distillation)))
      << "distillation";
}

TEST(CrossEntropyDistillationReference, TermEqualsTheSeparateOpsInFp64) {
  const int64_t tokens = 7, vocab = 11;
  const std::vector<int64_t> labels = problem_labels(tokens, vocab);
  const Tensor teacher = random_tensor(Shape{tokens, vocab}, DType::float32, 301, -4, 4);
  const Tensor row_weights = make_tensor({0.3, -0.5, 2.0, 0.0, 0.7, -0.2, 1.1}, Shape{tokens}, DType::float64);
  for (const Options& options : all_options())
    for (bool weighted : {false, true}) {
      SCOPED_TRACE(fmt::format("{} row_weights={}", describe(options), weighted));
      const Tensor logits = random_tensor(Shape{tokens, vocab}, DType::float64, 303, -4, 4);
      const Tensor* weights = weighted ? &row_weights : nullptr;
      Sums separate_sums;
      const std::vector<double> separate = run_separate(logits, teacher, labels, true, options, separate_sums, weights);
      // In place, as the head runs it.
      Tensor fused = converted(logits, DType::float64);
      const Sums fused_sums = run_fused(fused, teacher, labels, &fused, options, weights);
      expect_near(fused, separate, 1e-12, 1e-12, "gradient");
      expect_sums_near(fused_sums, separate_sums, 1e-12);
      // The masked rows' gradient is zero; the distillation's gradient is not (something was checked).
      const std::vector<double> values = values_of(fused);
      for (int64_t column = 0; column < vocab; ++column) EXPECT_EQ(values[size_t(vocab + column)], 0.0);
      EXPECT_GT(separate_sums.distillation, 0.0);
      // Forward only: the same sums.
      const Sums forward_sums = run_fused(logits, teacher, labels, nullptr, options);
      expect_sums_near(forward_sums, separate_sums, 1e-12);
    }
}

TEST(CrossEntropyDistillationReference, LowPrecisionTermWithinRoundingOfTheSeparateOps) {
  const int64_t tokens = 6, vocab = 13;
  const std::vector<int64_t> labels = problem_labels(tokens, vocab);
  const Tensor teacher = random_tensor(Shape{tokens, vocab}, DType::float32, 311, -4, 4);
  for (DType dtype : kLowPrecisionDTypes)
    for (DistillationLossType loss_type : kLossTypes) {
      const Options options{.loss_type = loss_type, .z_loss = true, .logits_scale_factor = 0.6, .softcap = 3.0};
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dtype), describe(options)));
      const Tensor logits = random_tensor(Shape{tokens, vocab}, dtype, 313, -4, 4);
      Sums separate_sums;
      const std::vector<double> separate = run_separate(logits, teacher, labels, true, options, separate_sums);
      Tensor fused = converted(logits, dtype);
      const Sums fused_sums = run_fused(fused, teacher, labels, &fused, options);
      const double tolerance = dtype_tolerance(dtype);
      expect_near(fused, separate, tolerance, tolerance, "gradient");
      expect_sums_near(fused_sums, separate_sums, 1e-5);
    }
}

// label_weight sum_r (lse_r - z_r[label]) + z_loss_weight sum_r lse_r^2 + weight sum_r distillation_r over unmasked
// rows, in fp64 straight from the definitions (p = softmax(teacher * s / temperature), q = softmax(z)).
double naive_objective(const std::vector<double>& logits, const std::vector<double>& teacher,
                       const std::vector<int64_t>& labels, int64_t vocab, const Options& options) {
  double total = 0;
  for (size_t row = 0; row < labels.size(); ++row) {
    if (labels[row] < 0) continue;
    std::vector<double> z(static_cast<size_t>(vocab)), t(static_cast<size_t>(vocab));
    double z_sum = 0, t_sum = 0;
    for (int64_t column = 0; column < vocab; ++column) {
      const size_t index = row * size_t(vocab) + size_t(column);
      double value = logits[index] * options.logits_scale_factor;
      if (options.softcap) value = *options.softcap * std::tanh(value / *options.softcap);
      z[size_t(column)] = value;
      t[size_t(column)] = teacher[index] * options.logits_scale_factor / kTemperature;
      z_sum += std::exp(value);
      t_sum += std::exp(t[size_t(column)]);
    }
    const double lse = std::log(z_sum), teacher_lse = std::log(t_sum);
    double distillation = 0;
    for (size_t k = 0; k < size_t(vocab); ++k) {
      const double log_q = z[k] - lse, log_p = t[k] - teacher_lse;
      switch (options.loss_type) {
        case DistillationLossType::cross_entropy: distillation -= std::exp(log_p) * log_q; break;
        case DistillationLossType::forward_kl: distillation += std::exp(log_p) * (log_p - log_q); break;
        case DistillationLossType::reverse_kl: distillation += std::exp(log_q) * (log_q - log_p); break;
      }
    }
    total += options.label_weight * (lse - z[size_t(labels[row])]) + kWeight * distillation;
    if (options.z_loss) total += kZLossWeight * lse * lse;
  }
  return total;
}

TEST(CrossEntropyDistillationReference, CombinedGradientMatchesFiniteDifferences) {
  const int64_t tokens = 5, vocab = 7;
  const std::vector<int64_t> labels = problem_labels(tokens, vocab);
  const Tensor teacher = random_tensor(Shape{tokens, vocab}, DType::float64, 321, -3, 3);
  const std::vector<double> teacher_values = values_of(teacher);
  for (const Options& options : all_options()) {
    SCOPED_TRACE(describe(options));
    const Tensor logits = random_tensor(Shape{tokens, vocab}, DType::float64, 323, -3, 3);
    Tensor grad = filled(Shape{tokens, vocab}, DType::float64, kNaN);
    const Sums sums = run_fused(logits, teacher, labels, &grad, options);
    const auto objective = [&] { return naive_objective(values_of(logits), teacher_values, labels, vocab, options); };
    expect_near(grad, finite_difference_gradient(logits, objective), 1e-9, 1e-7, "grad");
    // The loss sums too, against the same definitions (the term's distillation sum is otherwise compared only with
    // distillation_forward_backward's, which shares its row math, reference_helpers.h distillation_row).
    const double weighted = options.label_weight * sums.label + (options.z_loss ? kZLossWeight * sums.z : 0.0) +
                            kWeight * sums.distillation;
    EXPECT_NEAR(weighted, objective(), 1e-12 * (1 + std::abs(weighted)));
  }
}

TEST(CrossEntropyDistillationReference, Errors) {
  const Tensor logits = random_tensor(Shape{2, 5}, DType::float32, 331);
  const Tensor labels = labels_tensor({1, -100});
  Tensor loss_sum = filled(Shape{1}, DType::float32, 0), grad = Tensor::empty(Shape{2, 5}, DType::float32);
  const auto call = [&](const Tensor& teacher, Tensor& distillation_sum, double temperature) {
    const CrossEntropyDistillation distillation{
        .target_logits = teacher, .loss_sum = distillation_sum, .temperature = temperature};
    cross_entropy_forward_backward({.logits = logits, .labels = labels, .label_loss_sum = loss_sum,
                                    .z_loss_sum = nullptr, .grad_logits = &grad, .distillation = &distillation});
  };
  const Tensor teacher = random_tensor(Shape{2, 5}, DType::float32, 333);
  Tensor distillation_sum = filled(Shape{1}, DType::float32, 0);
  expect_error([&] { call(random_tensor(Shape{2, 4}, DType::float32, 335), distillation_sum, 1.0); },
               "[cross_entropy_forward_backward] distillation.target_logits has shape (2, 4), expected (2, 5)");
  expect_error([&] { call(filled(Shape{2, 5}, DType::int64, 0), distillation_sum, 1.0); },
               "distillation.target_logits");
  Tensor wrong_sum = filled(Shape{1}, DType::bfloat16, 0);
  expect_error([&] { call(teacher, wrong_sum, 1.0); }, "distillation.loss_sum");
  expect_error([&] { call(teacher, distillation_sum, 0.0); },
               "distillation.temperature is 0, expected a positive number");
}

// ---------------------------------------------------------------------------------------------------------------------
// CUDA

struct CudaCase {
  int64_t tokens, vocab;
  DType dtype;
  DistillationLossType loss_type;
  bool z_loss, in_place, row_weights;
  double scale;
  std::optional<double> softcap;
  bool gradient = true;
};

std::vector<CudaCase> cuda_cases() {
  const DType bf16 = DType::bfloat16, fp32 = DType::float32;
  const auto ce = DistillationLossType::cross_entropy, forward = DistillationLossType::forward_kl,
             reverse = DistillationLossType::reverse_kl;
  const std::optional<double> none;
  return {
      // One block per row.
      {9, 1000, bf16, ce, false, false, false, 1.0, none},
      {9, 1000, fp32, reverse, true, true, true, 0.5, 30.0},
      // SmolLM2's vocabulary (a cluster of blocks), the GPT-2 one (rows not 16-byte aligned), Llama 3's.
      {64, 49152, bf16, ce, true, true, false, 1.0, none},
      {64, 49152, bf16, forward, false, true, true, 1.0, none},
      {64, 49152, bf16, reverse, true, true, false, 0.5, 30.0},
      {33, 49152, fp32, reverse, true, false, false, 1.0, none},
      {33, 49152, fp32, forward, false, true, false, 0.5, 30.0},
      {33, 49152, fp32, ce, true, true, true, 1.0, none},
      {17, 50257, bf16, reverse, true, true, true, 1.0, none},
      {17, 50257, bf16, ce, false, true, false, 1.0, 30.0},
      {17, 50257, bf16, forward, true, false, false, 0.5, none},
      {17, 50257, fp32, ce, false, true, true, 1.0, 30.0},
      {17, 50257, fp32, forward, true, false, false, 1.0, none},
      {5, 50257, fp32, reverse, false, true, false, 0.5, none},
      {3, 128256, bf16, forward, true, true, true, 0.5, 30.0},
      // Forward only (validation).
      {17, 50257, bf16, reverse, true, false, false, 1.0, none, false},
      // The direct path (rows longer than the cluster's stages).
      {2, 200003, fp32, reverse, false, false, false, 1.0, 10.0},
      {2, 200003, fp32, forward, true, true, false, 0.5, none},
      {3, 500000, bf16, ce, true, true, false, 1.0, none},
      {3, 500000, bf16, reverse, false, true, true, 1.0, none},
      {3, 500000, bf16, forward, true, false, false, 1.0, 30.0},
      // Many rows: the persistent clusters' row loop and the stages' alternation.
      {1100, 15001, fp32, forward, true, true, false, 1.0, none}};
}

TEST(CrossEntropyDistillationConsistency, CudaTermMatchesTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 92000;
  bool ran = false;
  for (const CudaCase& c : cuda_cases()) {
    std::vector<double> labels, weights;
    for (int64_t token = 0; token < c.tokens; ++token) {
      labels.push_back(token % 7 == 1 ? -100.0 : double((token * 7919 + 13) % c.vocab));
      weights.push_back(token % 4 == 3 ? 0.0 : 0.05 * double(token % 9) - 0.2);
    }
    ConsistencyProblem<CrossEntropyForwardBackward> problem{
        .name = fmt::format("{} ({}, {}) type={} z_loss={} in_place={} row_weights={} gradient={}",
                            dtype_name(c.dtype), c.tokens, c.vocab, int(c.loss_type), c.z_loss, c.in_place,
                            c.row_weights, c.gradient),
        .dtype = c.dtype, .tolerance = std::nullopt, .exact = false, .tensors = {}, .call = {}};
    // fp32 rows of tens of thousands of logits: the reference's label loss sums them one after the other in fp32,
    // whose rounding grows with the length (distillation_consistency_test.cpp), so the tolerance is that of a long sum.
    // (Its distillation row runs in fp64: in fp32 its reverse-KL loss was 3.0e-4 from the kernel's at 200003 logits on
    // the H200, while the kernel agrees with PyTorch's fp64 formula to 3.6e-8 at 500009, tools/loss_torch_check.py.)
    if (c.dtype == DType::float32 && c.vocab > 10000) problem.tolerance = 1e-4;
    const Tensor logits = random_tensor(Shape{c.tokens, c.vocab}, c.dtype, ++seed, -8, 8);
    const bool in_place = c.gradient && c.in_place;
    problem.tensors["logits"] = in_place ? accumulated_output(logits) : input(logits);
    problem.tensors["labels"] = input(make_tensor(labels, Shape{c.tokens}, DType::int64));
    problem.tensors["target_logits"] =
        input(random_tensor(Shape{c.tokens, c.vocab}, DType::float32, ++seed, -8, 8));
    if (c.row_weights)
      problem.tensors["row_gradient_weights"] = input(make_tensor(weights, Shape{c.tokens}, DType::float32));
    problem.tensors["label_loss_sum"] = accumulated_output(filled(Shape{1}, DType::float32, 0.25));
    if (c.z_loss) problem.tensors["z_loss_sum"] = accumulated_output(filled(Shape{1}, DType::float32, 0.5));
    problem.tensors["distillation_loss_sum"] = accumulated_output(filled(Shape{1}, DType::float32, 0.75));
    if (c.gradient && !c.in_place)
      problem.tensors["grad_logits"] = output(Tensor::empty(Shape{c.tokens, c.vocab}, c.dtype));
    problem.call = [c, in_place](TensorMap& t, const auto& run) {
      const CrossEntropyDistillation distillation{.target_logits = t.at("target_logits"),
                                                  .loss_sum = t.at("distillation_loss_sum"),
                                                  .loss_type = c.loss_type,
                                                  .temperature = kTemperature,
                                                  .weight = 0.04};
      Tensor* grad = !c.gradient ? nullptr : in_place ? &t.at("logits") : &t.at("grad_logits");
      run({.logits = t.at("logits"), .labels = t.at("labels"), .label_loss_sum = t.at("label_loss_sum"),
           .z_loss_sum = c.z_loss ? &t.at("z_loss_sum") : nullptr, .grad_logits = grad, .label_weight = 0.03,
           .row_gradient_weights = c.row_weights ? &t.at("row_gradient_weights") : nullptr,
           .distillation = &distillation, .z_loss_weight = c.z_loss ? 1e-3 : 0.0, .logits_scale_factor = c.scale,
           .softcap = c.softcap});
    };
    for (const VariantOutcome& outcome : check_variants(problem, DeviceType::cuda)) ran = ran || !outcome.unsupported;
  }
  EXPECT_TRUE(ran) << "no CUDA variant ran a problem with the distillation term";
}

TEST(CrossEntropyDistillationConsistency, CudaTermIsBitwiseReproducible) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const Device cuda = Device::cuda(0);
  for (const auto& [vocab, loss_type] : std::vector<std::pair<int64_t, DistillationLossType>>{
           {49152, DistillationLossType::reverse_kl}, {50257, DistillationLossType::forward_kl},
           {500000, DistillationLossType::reverse_kl}}) {
    SCOPED_TRACE(fmt::format("vocab {} type {}", vocab, int(loss_type)));
    const int64_t tokens = vocab > 100000 ? 4 : 96;
    std::vector<double> labels;
    for (int64_t token = 0; token < tokens; ++token)
      labels.push_back(token % 5 == 2 ? -100.0 : double((token * 131) % vocab));
    const Tensor label_values = make_tensor(labels, Shape{tokens}, DType::int64).to(cuda);
    const Tensor pristine = random_tensor(Shape{tokens, vocab}, DType::bfloat16, 341, -8, 8);
    const Tensor teacher = random_tensor(Shape{tokens, vocab}, DType::float32, 343, -8, 8).to(cuda);
    std::vector<std::vector<double>> results;
    for (int run = 0; run < 2; ++run) {
      Tensor logits = pristine.to(cuda);
      Tensor label_sum = filled(Shape{1}, DType::float32, 0.0).to(cuda);
      Tensor z_sum = filled(Shape{1}, DType::float32, 0.0).to(cuda);
      Tensor distillation_sum = filled(Shape{1}, DType::float32, 0.0).to(cuda);
      const CrossEntropyDistillation distillation{
          .target_logits = teacher, .loss_sum = distillation_sum, .loss_type = loss_type, .temperature = 2.0,
          .weight = 0.1};
      cross_entropy_forward_backward({.logits = logits, .labels = label_values, .label_loss_sum = label_sum,
                                      .z_loss_sum = &z_sum, .grad_logits = &logits, .label_weight = 0.2,
                                      .distillation = &distillation, .z_loss_weight = 1e-4});
      synchronize_device(cuda);
      std::vector<double> result = values_of(logits.to(Device::cpu()));
      for (const Tensor* sum : {&label_sum, &z_sum, &distillation_sum})
        result.push_back(sum->to(Device::cpu()).item_as_double(std::vector<int64_t>{0}));
      results.push_back(std::move(result));
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    size_t differences = 0;
    for (size_t index = 0; index < results[0].size(); ++index)
      if (std::memcmp(&results[0][index], &results[1][index], sizeof(double)) != 0) ++differences;
    EXPECT_EQ(differences, 0u);
  }
}

}  // namespace
}  // namespace fast_llm::kernels
