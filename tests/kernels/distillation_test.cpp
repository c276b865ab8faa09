// Tests of the CPU reference distillation_forward_backward (kernels/cpu/distillation.cpp): the loss against the
// formulas written here (plain loops, fp64) for each loss type, with and without temperature, scale and softcap; the
// gradient against central finite differences of that formula in fp64; a model equal to its teacher gives KL 0 and
// the teacher's entropy for cross-entropy; masking; accumulating into a gradient; in place == out of place; errors.
#include "fast_llm/kernels/distillation.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

struct Options {
  DistillationLossType loss_type = DistillationLossType::cross_entropy;
  double temperature = 1.0;
  double logits_scale_factor = 1.0;
  std::optional<double> softcap = std::nullopt;
};

std::vector<double> softmax(const std::vector<double>& values) {
  double sum = 0;
  for (double value : values) sum += std::exp(value);
  std::vector<double> result;
  for (double value : values) result.push_back(std::exp(value) / sum);
  return result;
}

// Sum over unmasked tokens of the loss, straight from the definitions.
double naive_loss(const std::vector<double>& logits, const std::vector<double>& teacher,
                  const std::vector<int64_t>& labels, int64_t vocab, const Options& options) {
  double total = 0;
  for (size_t token = 0; token < labels.size(); ++token) {
    if (labels[token] < 0) continue;
    std::vector<double> z, t;
    for (int64_t column = 0; column < vocab; ++column) {
      double value = logits[token * size_t(vocab) + size_t(column)] * options.logits_scale_factor;
      if (options.softcap) value = *options.softcap * std::tanh(value / *options.softcap);
      z.push_back(value);
      t.push_back(teacher[token * size_t(vocab) + size_t(column)] * options.logits_scale_factor / options.temperature);
    }
    const std::vector<double> q = softmax(z), p = softmax(t);
    for (size_t k = 0; k < q.size(); ++k) {
      switch (options.loss_type) {
        case DistillationLossType::cross_entropy: total += -p[k] * std::log(q[k]); break;
        case DistillationLossType::forward_kl: total += p[k] * (std::log(p[k]) - std::log(q[k])); break;
        case DistillationLossType::reverse_kl: total += q[k] * (std::log(q[k]) - std::log(p[k])); break;
      }
    }
  }
  return total;
}

double run(const Tensor& logits, const Tensor& teacher, const std::vector<int64_t>& labels, Tensor* grad,
           const Options& options, double weight = 1.0, bool accumulate = false) {
  Tensor loss_sum = filled(Shape{1}, DType::float64, 0.0);
  const Tensor labels_values = labels_tensor(labels);
  distillation_forward_backward({.logits = logits,
                                 .target_logits = teacher,
                                 .labels = labels_values,
                                 .loss_sum = loss_sum,
                                 .grad_logits = grad,
                                 .loss_type = options.loss_type,
                                 .temperature = options.temperature,
                                 .weight = weight,
                                 .logits_scale_factor = options.logits_scale_factor,
                                 .softcap = options.softcap,
                                 .accumulate_gradient = accumulate});
  return values_of(loss_sum)[0];
}

std::vector<Options> all_options() {
  std::vector<Options> result;
  for (auto type : {DistillationLossType::cross_entropy, DistillationLossType::forward_kl,
                    DistillationLossType::reverse_kl}) {
    result.push_back({.loss_type = type});
    result.push_back({.loss_type = type, .temperature = 2.5, .logits_scale_factor = 0.7});
    result.push_back({.loss_type = type, .temperature = 0.5, .logits_scale_factor = 1.3, .softcap = 2.0});
  }
  return result;
}

TEST(DistillationReference, MatchesFormulaAndFiniteDifferences) {
  const int64_t tokens = 5, vocab = 7;
  const std::vector<int64_t> labels{3, -100, 0, 6, 2};
  for (const Options& options : all_options()) {
    SCOPED_TRACE(fmt::format("type {} temperature {} scale {} softcap {}", int(options.loss_type), options.temperature,
                             options.logits_scale_factor, options.softcap.value_or(0.0)));
    Tensor logits = random_tensor(Shape{tokens, vocab}, DType::float64, 11, -2.0, 2.0);
    const Tensor teacher = random_tensor(Shape{tokens, vocab}, DType::float64, 12, -2.0, 2.0);
    Tensor grad = filled(Shape{tokens, vocab}, DType::float64, 99.0);
    const double weight = 0.37;
    const double loss = run(logits, teacher, labels, &grad, options, weight);
    const std::vector<double> teacher_values = values_of(teacher);
    auto objective = [&] { return naive_loss(values_of(logits), teacher_values, labels, vocab, options); };
    EXPECT_NEAR(loss, objective(), 1e-12 * (1 + std::abs(loss)));
    std::vector<double> expected = finite_difference_gradient(logits, objective);
    for (double& value : expected) value *= weight;
    expect_near(grad, expected, 1e-9, 1e-7, "grad");
  }
}

TEST(DistillationReference, TeacherEqualToModelGivesZeroDivergence) {
  const int64_t tokens = 4, vocab = 9;
  const std::vector<int64_t> labels{1, 2, -100, 4};
  const Tensor logits = random_tensor(Shape{tokens, vocab}, DType::float64, 21, -3.0, 3.0);
  for (auto type : {DistillationLossType::forward_kl, DistillationLossType::reverse_kl}) {
    Tensor grad = filled(Shape{tokens, vocab}, DType::float64, 5.0);
    EXPECT_NEAR(run(logits, logits, labels, &grad, {.loss_type = type}), 0.0, 1e-12);
    for (double value : values_of(grad)) EXPECT_NEAR(value, 0.0, 1e-12);
  }
  // Cross-entropy against itself is the entropy, which is positive.
  EXPECT_GT(run(logits, logits, labels, nullptr, {}), 0.1);
}

TEST(DistillationReference, AccumulatesIntoAGradientAndWorksInPlace) {
  const int64_t tokens = 3, vocab = 5;
  const std::vector<int64_t> labels{0, -100, 4};
  const Tensor logits = random_tensor(Shape{tokens, vocab}, DType::float64, 31);
  const Tensor teacher = random_tensor(Shape{tokens, vocab}, DType::float64, 32);
  const Options options{.loss_type = DistillationLossType::reverse_kl, .temperature = 1.5};
  Tensor plain = filled(Shape{tokens, vocab}, DType::float64, 0.0);
  run(logits, teacher, labels, &plain, options);
  Tensor accumulated = filled(Shape{tokens, vocab}, DType::float64, 1.0);
  run(logits, teacher, labels, &accumulated, options, 1.0, /*accumulate=*/true);
  std::vector<double> expected = values_of(plain);
  for (double& value : expected) value += 1.0;  // masked rows keep their 1 too
  expect_near(accumulated, expected, 1e-15, 0, "accumulated");
  Tensor in_place = converted(logits, DType::float64);
  run(in_place, teacher, labels, &in_place, options);
  expect_near(in_place, values_of(plain), 1e-15, 0, "in place");
}

TEST(DistillationReference, Float32MatchesFloat64) {
  const int64_t tokens = 4, vocab = 6;
  const std::vector<int64_t> labels{0, 1, 2, 3};
  const Tensor exact = random_tensor(Shape{tokens, vocab}, DType::float64, 41);
  const Tensor teacher = random_tensor(Shape{tokens, vocab}, DType::float32, 42);
  Tensor grad64 = filled(Shape{tokens, vocab}, DType::float64, 0.0);
  Tensor grad32 = filled(Shape{tokens, vocab}, DType::float32, 0.0);
  const double loss64 = run(exact, teacher, labels, &grad64, {.loss_type = DistillationLossType::forward_kl});
  const double loss32 =
      run(converted(exact, DType::float32), teacher, labels, &grad32, {.loss_type = DistillationLossType::forward_kl});
  EXPECT_NEAR(loss32, loss64, 1e-5);
  expect_near(grad32, values_of(grad64), 1e-6, 1e-5, "grad");
}

TEST(DistillationReference, Errors) {
  const Tensor logits = random_tensor(Shape{2, 3}, DType::float64, 1);
  const Tensor teacher = random_tensor(Shape{2, 4}, DType::float64, 2);
  expect_error([&] { run(logits, teacher, {0, 1}, nullptr, {}); }, "target_logits");
  expect_error([&] { run(logits, logits, {0, 1}, nullptr, {.temperature = 0.0}); }, "temperature");
  Tensor same = converted(logits, DType::float64);
  expect_error([&] { run(same, logits, {0, 1}, &same, {}, 1.0, /*accumulate=*/true); }, "accumulate_gradient");
}

}  // namespace
}  // namespace fast_llm::kernels
