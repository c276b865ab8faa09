// Tests of the CPU reference embedding_forward / embedding_backward (kernels/cpu/embedding.cpp): hand-computed
// gathers (scale, accumulate, int32 and int64 indices, strided views), the scatter-add with repeated indices, the
// backward against central finite differences in fp64, 16-bit weights against fp64, and errors.
#include "fast_llm/kernels/embedding.h"

#include <gtest/gtest.h>

#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

void forward(const Tensor& indices, const Tensor& weight, const Tensor& output, double scale, bool accumulate) {
  Tensor output_handle = output;
  run_reference<EmbeddingForward>(
      {.indices = indices, .weight = weight, .output = output_handle, .scale = scale, .accumulate = accumulate});
}

void backward(const Tensor& indices, const Tensor& grad_output, const Tensor& grad_weight, double scale) {
  Tensor grad_weight_handle = grad_weight;
  run_reference<EmbeddingBackward>(
      {.indices = indices, .grad_output = grad_output, .grad_weight = grad_weight_handle, .scale = scale});
}

TEST(EmbeddingReference, ForwardHandChecked) {
  for (DType index_dtype : {DType::int64, DType::int32}) {
    for (DType dtype : {DType::float64, DType::float32, DType::bfloat16, DType::float16}) {
      SCOPED_TRACE(fmt::format("{} indices, {} weight", dtype_name(index_dtype), dtype_name(dtype)));
      Tensor weight = make_tensor({1, 2, 3, 4, 5, 6}, Shape{3, 2}, dtype);
      Tensor indices = make_tensor({2, 0, 2, 1}, Shape{4}, index_dtype);
      Tensor output = filled(Shape{4, 2}, dtype, NAN);
      forward(indices, weight, output, /*scale=*/0.5, /*accumulate=*/false);
      expect_near(output, {2.5, 3, 0.5, 1, 2.5, 3, 1.5, 2}, 0, 0, "gather");
      // accumulate: output += 2 * weight[index]
      forward(indices, weight, output, /*scale=*/2, /*accumulate=*/true);
      expect_near(output, {12.5, 15, 2.5, 5, 12.5, 15, 7.5, 10}, 0, 0, "accumulate");
    }
  }
}

TEST(EmbeddingReference, StridedViews) {
  // Indices every other element of a buffer, weight a transposed view, output rows of a wider buffer.
  Tensor index_pairs = make_tensor({1, -7, 0, -7, 1, -7}, Shape{3, 2}, DType::int64);
  Tensor every_other = index_pairs.select(1, 0);  // (3), stride 2: [1, 0, 1]
  ASSERT_FALSE(every_other.is_contiguous());
  Tensor weight_transposed = make_tensor({1, 3, 2, 4}, Shape{2, 2}, DType::float32);
  Tensor weight = weight_transposed.transpose(0, 1);  // [[1, 2], [3, 4]]
  Tensor wide_output = filled(Shape{3, 4}, DType::float32, -1);
  Tensor output = wide_output.slice(1, 1, 3);
  forward(every_other, weight, output, 1, false);
  expect_near(wide_output, {-1, 3, 4, -1, -1, 1, 2, -1, -1, 3, 4, -1}, 0, 0, "wide output");
}

TEST(EmbeddingReference, BackwardRepeatedIndicesHandChecked) {
  // grad_weight[index[t]] += 2 * grad_output[t] onto 0.5: row 2 gets tokens 0 and 2, row 1 nothing.
  for (DType grad_dtype : {DType::float32, DType::float64}) {
    for (DType dtype : {DType::float64, DType::float32, DType::bfloat16, DType::float16}) {
      SCOPED_TRACE(fmt::format("{} grad_output, {} grad_weight", dtype_name(dtype), dtype_name(grad_dtype)));
      Tensor indices = make_tensor({2, 0, 2}, Shape{3}, DType::int32);
      Tensor grad_output = make_tensor({1, 2, 3, 4, 5, 6}, Shape{3, 2}, dtype);
      Tensor grad_weight = filled(Shape{3, 2}, grad_dtype, 0.5);
      backward(indices, grad_output, grad_weight, /*scale=*/2);
      expect_near(grad_weight, {6.5, 8.5, 0.5, 0.5, 12.5, 16.5}, 0, 0, "grad_weight");
    }
  }
}

TEST(EmbeddingReference, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 5, hidden = 3;
  Tensor indices = make_tensor({3, 0, 3, 4, 3, 0}, Shape{6}, DType::int64);  // repeated, and row 1, 2 unused
  Tensor weight = random_tensor(Shape{rows, hidden}, DType::float64, 301);
  Tensor probe = random_tensor(Shape{6, hidden}, DType::float64, 302);
  Tensor position = random_tensor(Shape{6, hidden}, DType::float64, 303);
  Tensor output = Tensor::empty(Shape{6, hidden}, DType::float64);
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(fmt::format("accumulate {}", accumulate));
    const double scale = 1.7;
    // loss = <output, probe>, output = [position +] scale * weight[indices]
    auto loss = [&] {
      output.copy_bytes_from(position);
      forward(indices, weight, output, scale, accumulate);
      return dot(values_of(output), values_of(probe));
    };
    const std::vector<double> expected = finite_difference_gradient(weight, loss);
    Tensor grad_weight = filled(Shape{rows, hidden}, DType::float64, 0);
    backward(indices, probe, grad_weight, scale);
    expect_near(grad_weight, expected, 1e-9, 1e-8, "grad_weight");
  }
}

TEST(EmbeddingReference, LowPrecisionMatchesFloat64) {
  const int64_t rows = 11, hidden = 16, tokens = 20;
  std::vector<double> index_values;
  for (int64_t token = 0; token < tokens; ++token) index_values.push_back(double((token * 7) % rows));
  Tensor indices = make_tensor(index_values, Shape{tokens}, DType::int64);
  for (DType dtype : kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor weight = random_tensor(Shape{rows, hidden}, dtype, 311);
    Tensor grad_output = random_tensor(Shape{tokens, hidden}, dtype, 312);
    Tensor output = Tensor::empty(Shape{tokens, hidden}, dtype);
    Tensor output64 = Tensor::empty(Shape{tokens, hidden}, DType::float64);
    forward(indices, weight, output, 0.3, false);
    forward(indices, converted(weight, DType::float64), output64, 0.3, false);
    const double tolerance = dtype_tolerance(dtype);
    expect_near(output, values_of(output64), tolerance, tolerance, "output");
    Tensor grad_weight = filled(Shape{rows, hidden}, DType::float32, 0);
    Tensor grad_weight64 = filled(Shape{rows, hidden}, DType::float64, 0);
    backward(indices, grad_output, grad_weight, 0.3);
    backward(indices, converted(grad_output, DType::float64), grad_weight64, 0.3);
    expect_near(grad_weight, values_of(grad_weight64), 1e-6, 1e-6, "grad_weight");
  }
}

TEST(EmbeddingReference, Errors) {
  Tensor weight = Tensor::empty(Shape{5, 2}, DType::float32), output = filled(Shape{3, 2}, DType::float32, 7);
  Tensor out_of_range = make_tensor({1, 5, 0}, Shape{3}, DType::int64);
  expect_error([&] { embedding_forward({.indices = out_of_range, .weight = weight, .output = output}); },
               "[embedding_forward] index 5 at position 1 is outside [0, 5)");
  // Nothing was written before the check failed.
  expect_near(output, std::vector<double>(6, 7.0), 0, 0, "untouched output");
  Tensor negative = make_tensor({-1, 0, 0}, Shape{3}, DType::int32);
  Tensor grad_weight = filled(Shape{5, 2}, DType::float32, 0);
  expect_error([&] { embedding_backward({.indices = negative, .grad_output = output, .grad_weight = grad_weight}); },
               "[embedding_backward] index -1 at position 0 is outside [0, 5)");
  expect_near(grad_weight, std::vector<double>(10, 0.0), 0, 0, "untouched grad_weight");

  Tensor indices = make_tensor({1, 2, 0}, Shape{3}, DType::int64);
  Tensor wide_output = Tensor::empty(Shape{3, 3}, DType::float32);
  expect_error([&] { embedding_forward({.indices = indices, .weight = weight, .output = wide_output}); },
               "[embedding_forward] output has shape (3, 3), expected (3, 2)");
  Tensor short_grad = Tensor::empty(Shape{2, 2}, DType::float32);
  expect_error([&] { embedding_backward({.indices = indices, .grad_output = short_grad, .grad_weight = grad_weight}); },
               "[embedding_backward] grad_output has shape (2, 2), expected (3, 2)");
  Tensor matrix_indices = make_tensor({1, 2, 0, 1}, Shape{2, 2}, DType::int64);
  expect_error([&] { embedding_forward({.indices = matrix_indices, .weight = weight, .output = output}); },
               "[embedding_forward] indices has shape (2, 2), expected (tokens)");

  Tensor float_indices = make_tensor({1, 2, 0}, Shape{3}, DType::float32);
  expect_error([&] { embedding_forward({.indices = float_indices, .weight = weight, .output = output}); },
               "[embedding_forward] indices has dtype float32; supported: int32, int64");
  Tensor bf16_grad_weight = Tensor::empty(Shape{5, 2}, DType::bfloat16);
  expect_error(
      [&] { embedding_backward({.indices = indices, .grad_output = output, .grad_weight = bf16_grad_weight}); },
      "[embedding_backward] grad_weight has dtype bfloat16; supported: float32, float64");
  Tensor bf16_output = Tensor::empty(Shape{3, 2}, DType::bfloat16);
  expect_error([&] { embedding_forward({.indices = indices, .weight = weight, .output = bf16_output}); },
               "[embedding_forward] output has dtype bfloat16, weight has float32; they must match");
}

}  // namespace
}  // namespace fast_llm::kernels
