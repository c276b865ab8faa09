// Tests of the CPU reference dpo_forward_backward (kernels/cpu/dpo.cpp): the loss against TRL's sigmoid formula
// written here (plain loops, fp64, from the reference's logits) on several pairs with overlapping and masked rows, the
// op reading the reference's log-probabilities that label_log_probabilities computes from those logits; the gradient
// against central finite differences in fp64; a model equal to its reference gives log(2) per pair and a gradient
// that follows only the policy; the reference's values on masked rows and rows of no span are not read; accumulating;
// in place == out of place; errors.
#include "fast_llm/kernels/dpo.h"

#include <gtest/gtest.h>

#include <cmath>

#include "fast_llm/kernels/label_log_probabilities.h"
#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

double log_probability(const std::vector<double>& logits, int64_t row, int64_t vocab, int64_t label, double scale) {
  double sum = 0;
  for (int64_t column = 0; column < vocab; ++column) sum += std::exp(logits[size_t(row * vocab + column)] * scale);
  return logits[size_t(row * vocab + label)] * scale - std::log(sum);
}

// Sum over pairs of -log sigmoid(beta * ((chosen - rejected) - (reference chosen - reference rejected))).
double naive_loss(const std::vector<double>& logits, const std::vector<double>& reference,
                  const std::vector<int64_t>& labels, int64_t vocab, const std::vector<PreferencePair>& pairs,
                  double beta, double scale) {
  auto span = [&](const std::vector<double>& values, double values_scale, int64_t begin, int64_t end) {
    double sum = 0;
    for (int64_t row = begin; row < end; ++row)
      if (labels[size_t(row)] >= 0) sum += log_probability(values, row, vocab, labels[size_t(row)], values_scale);
    return sum;
  };
  double total = 0;
  for (const PreferencePair& pair : pairs) {
    const double policy = span(logits, scale, pair.chosen_begin, pair.chosen_end) -
                          span(logits, scale, pair.rejected_begin, pair.rejected_end);
    const double ref = span(reference, 1.0, pair.chosen_begin, pair.chosen_end) -
                       span(reference, 1.0, pair.rejected_begin, pair.rejected_end);
    total += -std::log(1.0 / (1.0 + std::exp(-beta * (policy - ref))));
  }
  return total;
}

// (tokens) fp64: log_softmax(reference_logits)[label] per row, 0 where the label is masked.
Tensor reference_log_probabilities(const Tensor& reference_logits, const std::vector<int64_t>& labels) {
  Tensor output = filled(Shape{reference_logits.size(0)}, DType::float64, 0.0);
  label_log_probabilities({.logits = reference_logits, .labels = labels_tensor(labels), .output = output});
  return output;
}

// The op on the reference log-probabilities `reference` (tokens); returns the loss sum.
double run_on_log_probabilities(const Tensor& logits, const Tensor& reference, const std::vector<int64_t>& labels,
                                const std::vector<PreferencePair>& pairs, Tensor* grad, double beta,
                                double weight = 1.0, double scale = 1.0, bool accumulate = false) {
  Tensor loss_sum = filled(Shape{1}, DType::float64, 0.0);
  const Tensor labels_values = labels_tensor(labels);
  dpo_forward_backward({.logits = logits,
                        .reference_log_probabilities = reference,
                        .labels = labels_values,
                        .pairs = pairs,
                        .loss_sum = loss_sum,
                        .grad_logits = grad,
                        .beta = beta,
                        .weight = weight,
                        .logits_scale_factor = scale,
                        .accumulate_gradient = accumulate});
  return values_of(loss_sum)[0];
}

// The op with the reference given by its logits (tokens, vocab).
double run(const Tensor& logits, const Tensor& reference_logits, const std::vector<int64_t>& labels,
           const std::vector<PreferencePair>& pairs, Tensor* grad, double beta, double weight = 1.0,
           double scale = 1.0, bool accumulate = false) {
  return run_on_log_probabilities(logits, reference_log_probabilities(reference_logits, labels), labels, pairs, grad,
                                  beta, weight, scale, accumulate);
}

const std::vector<int64_t> kLabels{-100, 3, 1, 4, -100, 0, 2, 5, 1, 3, 0, 2};
// Two pairs; the second's spans hold a masked row, and the first's chosen and rejected spans share row 4 (masked).
const std::vector<PreferencePair> kPairs{{.chosen_begin = 1, .chosen_end = 4, .rejected_begin = 3, .rejected_end = 6},
                                         {.chosen_begin = 7, .chosen_end = 9, .rejected_begin = 9, .rejected_end = 12}};

TEST(DpoReference, MatchesFormulaAndFiniteDifferences) {
  const int64_t tokens = int64_t(kLabels.size()), vocab = 6;
  for (const auto& [beta, scale] : std::vector<std::pair<double, double>>{{1.0, 1.0}, {0.1, 1.0}, {2.5, 0.6}}) {
    SCOPED_TRACE(fmt::format("beta {} scale {}", beta, scale));
    Tensor logits = random_tensor(Shape{tokens, vocab}, DType::float64, 51, -2.0, 2.0);
    const Tensor reference = random_tensor(Shape{tokens, vocab}, DType::float64, 52, -2.0, 2.0);
    const std::vector<double> reference_values = values_of(reference);
    Tensor grad = filled(Shape{tokens, vocab}, DType::float64, 7.0);
    const double weight = 0.5;
    const double loss = run(logits, reference, kLabels, kPairs, &grad, beta, weight, scale);
    auto objective = [&] {
      return naive_loss(values_of(logits), reference_values, kLabels, vocab, kPairs, beta, scale);
    };
    EXPECT_NEAR(loss, objective(), 1e-12);
    std::vector<double> expected = finite_difference_gradient(logits, objective);
    for (double& value : expected) value *= weight;
    expect_near(grad, expected, 1e-9, 1e-7, "grad");
  }
}

TEST(DpoReference, ModelEqualToReferenceGivesLogTwo) {
  const int64_t tokens = int64_t(kLabels.size()), vocab = 6;
  const Tensor logits = random_tensor(Shape{tokens, vocab}, DType::float64, 61, -2.0, 2.0);
  Tensor grad = filled(Shape{tokens, vocab}, DType::float64, 0.0);
  const double loss = run(logits, logits, kLabels, kPairs, &grad, 0.3);
  EXPECT_NEAR(loss, 2 * std::log(2.0), 1e-12);
  // At m = 0 the gradient is beta / 2 * (d chosen - d rejected): not zero, it pushes the pair apart.
  double norm = 0;
  for (double value : values_of(grad)) norm += value * value;
  EXPECT_GT(norm, 1e-6);
}

TEST(DpoReference, ReadsTheReferenceOnlyOnLabelledRowsOfSpans) {
  const int64_t tokens = int64_t(kLabels.size()), vocab = 6;
  const Tensor logits = random_tensor(Shape{tokens, vocab}, DType::float64, 81);
  std::vector<double> reference = values_of(reference_log_probabilities(
      random_tensor(Shape{tokens, vocab}, DType::float64, 82), kLabels));
  Tensor grad = filled(Shape{tokens, vocab}, DType::float64, 0.0);
  const double expected = run_on_log_probabilities(logits, make_tensor(reference, Shape{tokens}, DType::float64),
                                                   kLabels, kPairs, &grad, 0.7);
  // Row 0 is masked and in no span, row 4 masked in two spans, row 6 labelled in no span.
  for (const int64_t row : {0, 4, 6}) reference[size_t(row)] = NAN;
  Tensor poisoned_grad = filled(Shape{tokens, vocab}, DType::float64, 0.0);
  const double loss = run_on_log_probabilities(logits, make_tensor(reference, Shape{tokens}, DType::float64), kLabels,
                                               kPairs, &poisoned_grad, 0.7);
  EXPECT_EQ(loss, expected);
  expect_near(poisoned_grad, values_of(grad), 0, 0, "grad");
}

TEST(DpoReference, AccumulatesAndWorksInPlace) {
  const int64_t tokens = int64_t(kLabels.size()), vocab = 6;
  const Tensor logits = random_tensor(Shape{tokens, vocab}, DType::float64, 71);
  const Tensor reference = random_tensor(Shape{tokens, vocab}, DType::float64, 72);
  Tensor plain = filled(Shape{tokens, vocab}, DType::float64, 3.0);
  run(logits, reference, kLabels, kPairs, &plain, 1.0);
  Tensor accumulated = filled(Shape{tokens, vocab}, DType::float64, 1.0);
  run(logits, reference, kLabels, kPairs, &accumulated, 1.0, 1.0, 1.0, /*accumulate=*/true);
  std::vector<double> expected = values_of(plain);
  for (double& value : expected) value += 1.0;
  expect_near(accumulated, expected, 1e-15, 0, "accumulated");
  Tensor in_place = converted(logits, DType::float64);
  run(in_place, reference, kLabels, kPairs, &in_place, 1.0);
  expect_near(in_place, values_of(plain), 1e-15, 0, "in place");
}

TEST(DpoReference, Errors) {
  const Tensor logits = random_tensor(Shape{4, 3}, DType::float64, 1);
  const std::vector<int64_t> labels{0, 1, 2, 0};
  expect_error([&] { run(logits, logits, labels, {{.chosen_begin = 0, .chosen_end = 5}}, nullptr, 1.0); },
               "outside the 4 rows");
  const Tensor short_reference = filled(Shape{3}, DType::float64, 0.0);
  expect_error([&] { run_on_log_probabilities(logits, short_reference, labels, {}, nullptr, 1.0); },
               "reference_log_probabilities");
  const Tensor half_reference = filled(Shape{4}, DType::float16, 0.0);
  expect_error([&] { run_on_log_probabilities(logits, half_reference, labels, {}, nullptr, 1.0); },
               "reference_log_probabilities");
}

}  // namespace
}  // namespace fast_llm::kernels
