// Tests of the CPU reference rotary_apply (kernels/cpu/rotary.cpp): hand-computed rotations (full and partial),
// strided views against a formula written here, the inverse as the transpose (<R x, y> = <x, R^T y>) and as the
// inverse (R^T R x = x), the inverse as the gradient (finite differences), 16-bit and fp32 against fp64, and errors.
#include "fast_llm/kernels/rotary.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

void rotate(const Tensor& tensor, const Tensor& cos, const Tensor& sin, bool inverse) {
  Tensor handle = tensor;
  run_reference<RotaryApply>({.tensor = handle, .cos = cos, .sin = sin, .inverse = inverse});
}

TEST(RotaryReference, ForwardHandChecked) {
  // One token, one head, head_size 4, half 2: the pairs are (x0, x2) and (x1, x3).
  // Pair 0 by cos 0.6, sin 0.8: (1, 3) -> (1 * 0.6 - 3 * 0.8, 3 * 0.6 + 1 * 0.8) = (-1.8, 2.6).
  // Pair 1 by 90 degrees: (2, 4) -> (-4, 2).
  for (DType dtype : {DType::float64, DType::float32, DType::bfloat16, DType::float16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = make_tensor({1, 2, 3, 4}, Shape{1, 1, 4}, dtype);
    // fp64 tables for fp64 tensors (0.6 and 0.8 are not exact in fp32).
    const DType table_dtype = dtype == DType::float64 ? DType::float64 : DType::float32;
    Tensor cos = make_tensor({0.6, 0}, Shape{1, 2}, table_dtype);
    Tensor sin = make_tensor({0.8, 1}, Shape{1, 2}, table_dtype);
    rotate(x, cos, sin, /*inverse=*/false);
    expect_near(x, {-1.8, -4, 2.6, 2}, 0, dtype_tolerance(dtype), "forward");
    // The inverse rotates back: (-1.8, 2.6) -> (-1.8 * 0.6 + 2.6 * 0.8, 2.6 * 0.6 + 1.8 * 0.8) = (1, 3).
    rotate(x, cos, sin, /*inverse=*/true);
    expect_near(x, {1, 2, 3, 4}, 0, 2 * dtype_tolerance(dtype), "inverse");
  }
}

TEST(RotaryReference, PartialRotaryHandChecked) {
  // head_size 6, rotary_dims 4 (half 2): pairs (x0, x2), (x1, x3); x4, x5 pass through. Two tokens, two heads.
  // Rows: (token 0, head 0), (token 0, head 1), (token 1, head 0), (token 1, head 1).
  // clang-format off
  Tensor x = make_tensor({1, 2, 3, 4, 5, 6,
                          -1, 0, 1, 0, 7, 8,
                          1, 2, 3, 4, 5, 6,
                          0, 1, 0, -1, 9, 10},
                         Shape{2, 2, 6}, DType::float64);
  // clang-format on
  // Token 0: pair 0 by 90 degrees, pair 1 by 180 degrees. Token 1: identity, then cos 0.6 sin 0.8.
  Tensor cos = make_tensor({0, -1, 1, 0.6}, Shape{2, 2}, DType::float32);
  Tensor sin = make_tensor({1, 0, 0, 0.8}, Shape{2, 2}, DType::float32);
  rotate(x, cos, sin, false);
  // clang-format off
  const std::vector<double> expected = {-3, -2, 1, -4, 5, 6,
                                        -1, 0, -1, 0, 7, 8,
                                        1, 2 * 0.6 - 4 * 0.8, 3, 4 * 0.6 + 2 * 0.8, 5, 6,
                                        0, 0.6 + 0.8, 0, -0.6 + 0.8, 9, 10};
  // clang-format on
  expect_near(x, expected, 1e-7, 1e-7, "partial rotary");
}

TEST(RotaryReference, StridedViewMatchesFormula) {
  // Rotate the key heads of a fused (tokens, 3 heads, head_size) buffer in place; the rest stays untouched.
  const int64_t tokens = 5, heads = 2, head_size = 8, half = 3;
  Tensor fused = random_tensor(Shape{tokens, 3 * heads, head_size}, DType::float64, 101);
  const std::vector<double> before = values_of(fused);
  Tensor keys = fused.slice(1, heads, 2 * heads);
  ASSERT_FALSE(keys.is_contiguous());
  auto [cos, sin] = random_rotary_tables(tokens, half, DType::float64, 102);
  rotate(keys, cos, sin, false);

  std::vector<double> expected = before;
  const std::vector<double> cos_values = values_of(cos), sin_values = values_of(sin);
  for (int64_t token = 0; token < tokens; ++token) {
    for (int64_t head = heads; head < 2 * heads; ++head) {
      const int64_t base = (token * 3 * heads + head) * head_size;
      for (int64_t i = 0; i < half; ++i) {
        const double c = cos_values[size_t(token * half + i)], s = sin_values[size_t(token * half + i)];
        const double x1 = before[size_t(base + i)], x2 = before[size_t(base + half + i)];
        expected[size_t(base + i)] = x1 * c - x2 * s;
        expected[size_t(base + half + i)] = x2 * c + x1 * s;
      }
    }
  }
  expect_near(fused, expected, 1e-15, 1e-14, "fused buffer");
}

TEST(RotaryReference, InverseIsTransposeAndInverse) {
  const int64_t tokens = 6, heads = 3, head_size = 10;
  for (int64_t half : {5, 3}) {
    for (DType table_dtype : {DType::float64, DType::float32}) {
      SCOPED_TRACE(fmt::format("half {}, tables {}", half, dtype_name(table_dtype)));
      auto [cos, sin] = random_rotary_tables(tokens, half, table_dtype, 111);
      Tensor x = random_tensor(Shape{tokens, heads, head_size}, DType::float64, 112);
      Tensor y = random_tensor(Shape{tokens, heads, head_size}, DType::float64, 113);
      const std::vector<double> x_values = values_of(x), y_values = values_of(y);
      Tensor rotated_x = converted(x, DType::float64), rotated_back_y = converted(y, DType::float64);
      rotate(rotated_x, cos, sin, false);
      rotate(rotated_back_y, cos, sin, true);
      // <R x, y> = <x, R^T y>, exactly up to rounding whatever the tables (the inverse uses the same cos and sin).
      EXPECT_NEAR(dot(values_of(rotated_x), y_values), dot(x_values, values_of(rotated_back_y)), 1e-12);
      // The rotation is not the identity (the test would pass trivially otherwise).
      EXPECT_GT(std::abs(dot(values_of(rotated_x), y_values) - dot(x_values, y_values)), 1e-3);
      // R^T R x = x, up to cos^2 + sin^2 - 1 (the tables' rounding).
      rotate(rotated_x, cos, sin, true);
      const double tolerance = table_dtype == DType::float64 ? 1e-14 : 1e-6;
      expect_near(rotated_x, x_values, tolerance, tolerance, "forward then inverse");
    }
  }
}

TEST(RotaryReference, InverseIsGradientByFiniteDifferences) {
  // loss = <R x, probe>: its gradient with respect to x is R^T probe, the inverse rotation of the probe.
  const int64_t tokens = 3, heads = 2, head_size = 6, half = 2;
  auto [cos, sin] = random_rotary_tables(tokens, half, DType::float64, 121);
  Tensor x = random_tensor(Shape{tokens, heads, head_size}, DType::float64, 122);
  Tensor probe = random_tensor(Shape{tokens, heads, head_size}, DType::float64, 123);
  auto loss = [&] {
    Tensor rotated = converted(x, DType::float64);
    rotate(rotated, cos, sin, false);
    return dot(values_of(rotated), values_of(probe));
  };
  const std::vector<double> expected = finite_difference_gradient(x, loss);
  rotate(probe, cos, sin, true);
  expect_near(probe, expected, 1e-8, 1e-7, "grad");
}

TEST(RotaryReference, LowPrecisionMatchesFloat64) {
  const int64_t tokens = 7, heads = 4, head_size = 16;
  auto [cos, sin] = random_rotary_tables(tokens, head_size / 2, DType::float32, 131);
  for (DType dtype : kLowPrecisionDTypes) {
    for (bool inverse : {false, true}) {
      SCOPED_TRACE(fmt::format("{}, inverse {}", dtype_name(dtype), inverse));
      Tensor x = random_tensor(Shape{tokens, heads, head_size}, dtype, 132, -2, 2);
      Tensor x64 = converted(x, DType::float64);
      rotate(x, cos, sin, inverse);
      rotate(x64, cos, sin, inverse);
      const double tolerance = dtype_tolerance(dtype);
      expect_near(x, values_of(x64), 2 * tolerance, tolerance, "rotated");
    }
  }
}

TEST(RotaryReference, Errors) {
  Tensor x = Tensor::empty(Shape{4, 2, 8}, DType::float32);
  Tensor cos = Tensor::empty(Shape{4, 4}, DType::float32), sin = Tensor::empty(Shape{4, 4}, DType::float32);
  Tensor few_tokens = Tensor::empty(Shape{3, 4}, DType::float32);
  expect_error([&] { rotary_apply({.tensor = x, .cos = few_tokens, .sin = sin}); },
               "[rotary_apply] cos has shape (3, 4), expected (4, rotary_dims / 2)");
  Tensor wide = Tensor::empty(Shape{4, 5}, DType::float32);
  expect_error([&] { rotary_apply({.tensor = x, .cos = wide, .sin = wide}); },
               "[rotary_apply] cos has shape (4, 5): rotary_dims 10 exceeds head_size 8");
  Tensor narrow_sin = Tensor::empty(Shape{4, 2}, DType::float32);
  expect_error([&] { rotary_apply({.tensor = x, .cos = cos, .sin = narrow_sin}); },
               "[rotary_apply] sin has shape (4, 2), expected (4, 4)");
  Tensor flat = Tensor::empty(Shape{4, 16}, DType::float32);
  expect_error([&] { rotary_apply({.tensor = flat, .cos = cos, .sin = sin}); },
               "[rotary_apply] tensor has shape (4, 16), expected (tokens, heads, head_size)");

  Tensor bf16_cos = Tensor::empty(Shape{4, 4}, DType::bfloat16);
  expect_error([&] { rotary_apply({.tensor = x, .cos = bf16_cos, .sin = sin}); },
               "[rotary_apply] cos has dtype bfloat16; supported: float32, float64");
  Tensor int_x = Tensor::empty(Shape{4, 2, 8}, DType::int64);
  expect_error([&] { rotary_apply({.tensor = int_x, .cos = cos, .sin = sin}); },
               "[rotary_apply] tensor has dtype int64; supported: float32, float64, bfloat16, float16");
}

}  // namespace
}  // namespace fast_llm::kernels
