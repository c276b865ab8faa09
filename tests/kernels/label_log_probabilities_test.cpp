// Tests of the CPU reference label_log_probabilities (kernels/cpu/label_log_probabilities.cpp): each row's value
// against log(softmax) written here as log(exp(z_label) / sum exp(z)) in fp64, for every logits dtype, strided logits
// (rows of a wider tensor), masked rows 0, large logits that would overflow a naive sum; and the contract's errors.
#include "fast_llm/kernels/label_log_probabilities.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

// log(exp(z[label]) / sum_k exp(z[k])) with the sum shifted by `shift` (so that large logits stay finite).
double naive(const std::vector<double>& z, int64_t row, int64_t vocab, int64_t label, double shift) {
  double sum = 0;
  for (int64_t column = 0; column < vocab; ++column) sum += std::exp(z[size_t(row * vocab + column)] - shift);
  return std::log(std::exp(z[size_t(row * vocab + label)] - shift) / sum);
}

TEST(LabelLogProbabilities, MatchesTheSoftmaxDefinition) {
  const int64_t rows = 7, vocab = 37;
  const std::vector<int64_t> labels{3, -100, 0, 36, 12, -1, 20};
  for (DType dtype : {DType::float64, DType::float32, DType::bfloat16}) {
    const Tensor logits = random_tensor(Shape{rows, vocab}, dtype, 11, -4.0, 4.0);
    const std::vector<double> z = values_of(logits);
    for (DType output_dtype : {DType::float64, DType::float32}) {
      Tensor output = filled(Shape{rows}, output_dtype, 5.0);
      label_log_probabilities({.logits = logits, .labels = labels_tensor(labels), .output = output});
      std::vector<double> expected(size_t(rows), 0.0);
      for (int64_t row = 0; row < rows; ++row)
        if (labels[size_t(row)] >= 0) expected[size_t(row)] = naive(z, row, vocab, labels[size_t(row)], 0.0);
      expect_near(output, expected, 0.0, output_dtype == DType::float64 ? 1e-13 : 1e-6,
                  std::string(dtype_name(dtype)));
    }
  }
}

// Rows of a wider tensor (row stride 50), logits around 1000 (exp overflows without the maximum's shift).
TEST(LabelLogProbabilities, StridedRowsAndLargeLogits) {
  const int64_t rows = 5, vocab = 40;
  const Tensor wide = random_tensor(Shape{rows, 50}, DType::float64, 12, 995.0, 1005.0);
  const Tensor logits = wide.slice(1, 0, vocab);
  const std::vector<double> z = values_of(logits);
  const std::vector<int64_t> labels{0, 39, 7, 8, 21};
  Tensor output = filled(Shape{rows}, DType::float64, 0.0);
  label_log_probabilities({.logits = logits, .labels = labels_tensor(labels), .output = output});
  std::vector<double> expected;
  for (int64_t row = 0; row < rows; ++row) expected.push_back(naive(z, row, vocab, labels[size_t(row)], 1000.0));
  expect_near(output, expected, 0.0, 1e-12, "strided");
  for (double value : values_of(output)) EXPECT_TRUE(std::isfinite(value) && value < 0.0);
}

TEST(LabelLogProbabilities, RefusesBadOperands) {
  const Tensor logits = random_tensor(Shape{3, 5}, DType::float32, 13);
  Tensor output = filled(Shape{3}, DType::float32, 0.0);
  expect_error(
      [&] { label_log_probabilities({.logits = logits, .labels = labels_tensor({0, 5, 1}), .output = output}); },
      "outside the vocabulary");
  Tensor short_output = filled(Shape{2}, DType::float32, 0.0);
  expect_error(
      [&] { label_log_probabilities({.logits = logits, .labels = labels_tensor({0, 1, 2}), .output = short_output}); },
      "output");
  Tensor half_output = filled(Shape{3}, DType::bfloat16, 0.0);
  expect_error(
      [&] { label_log_probabilities({.logits = logits, .labels = labels_tensor({0, 1, 2}), .output = half_output}); },
      "output");
}

}  // namespace
}  // namespace fast_llm::kernels
