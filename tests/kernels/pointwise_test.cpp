// Tests of the CPU reference axpy and dropout (kernels/cpu/pointwise.cpp): axpy by hand over every dtype pair, its
// rounding and fp64 math, dropout's mask against core/random.h, scale 1 / (1 - p), identity at p = 0, the same mask
// from the same seed, the expectation preserved, the backward (dropout of the gradient with the same seed) against
// finite differences, 16-bit against fp64, and errors.
#include "fast_llm/kernels/pointwise.h"

#include <gtest/gtest.h>

#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

constexpr DType kFloatDTypes[] = {DType::float64, DType::float32, DType::bfloat16, DType::float16};

void axpy_reference(const Tensor& input, const Tensor& output, double alpha) {
  Tensor output_handle = output;
  run_reference<Axpy>({.input = input, .output = output_handle, .alpha = alpha});
}

void dropout_reference(const Tensor& tensor, double probability, uint64_t seed) {
  Tensor handle = tensor;
  run_reference<Dropout>({.tensor = handle, .probability = probability, .seed = seed});
}

// ---------------------------------------------------------------------------------------------------------------------
// axpy

TEST(AxpyReference, HandCheckedEveryDTypePair) {
  for (DType input_dtype : kFloatDTypes) {
    for (DType output_dtype : kFloatDTypes) {
      SCOPED_TRACE(fmt::format("input {}, output {}", dtype_name(input_dtype), dtype_name(output_dtype)));
      Tensor input = make_tensor({0.5, -1, 4, 0}, Shape{2, 2}, input_dtype);
      Tensor output = make_tensor({1, 2, 3, -6}, Shape{2, 2}, output_dtype);
      axpy_reference(input, output, 2);
      expect_near(output, {2, 0, 11, -6}, 0, 0, "output += 2 input");
    }
  }
}

TEST(AxpyReference, RoundsOnStoreAndUsesFloat64WhenEitherSideIs) {
  // bf16 output: 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6; ties go to the even mantissa, 1 + 2^-6.
  Tensor bf16_output = make_tensor({1}, Shape{1}, DType::bfloat16);
  axpy_reference(make_tensor({3 * 0x1p-8}, Shape{1}, DType::float32), bf16_output, 1);
  expect_near(bf16_output, {1 + 0x1p-6}, 0, 0, "bf16 tie to even");

  // fp32 output, fp64 input 2^-24 + 2^-40: in fp32 math the input rounds to 2^-24 and 1 + 2^-24 ties down to 1; in
  // fp64 math 1 + 2^-24 + 2^-40 is above the tie and rounds up to 1 + 2^-23.
  Tensor fp32_output = make_tensor({1}, Shape{1}, DType::float32);
  axpy_reference(make_tensor({0x1p-24 + 0x1p-40}, Shape{1}, DType::float64), fp32_output, 1);
  expect_near(fp32_output, {1 + 0x1p-23}, 0, 0, "fp64 math");

  // alpha is not rounded to fp32 for fp64 tensors.
  Tensor fp64_output = make_tensor({0}, Shape{1}, DType::float64);
  axpy_reference(make_tensor({1}, Shape{1}, DType::float64), fp64_output, 0.1);
  EXPECT_EQ(values_of(fp64_output)[0], 0.1);
}

TEST(AxpyReference, LowPrecisionMatchesFloat64) {
  for (DType dtype : kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor input = random_tensor(Shape{3, 50}, dtype, 401);
    Tensor output = random_tensor(Shape{3, 50}, dtype, 402);
    Tensor output64 = converted(output, DType::float64);
    axpy_reference(input, output, -0.75);
    axpy_reference(converted(input, DType::float64), output64, -0.75);
    const double tolerance = dtype_tolerance(dtype);
    expect_near(output, values_of(output64), tolerance, tolerance, "output");
  }
}

TEST(AxpyReference, Errors) {
  Tensor input = Tensor::empty(Shape{3}, DType::float32), output = Tensor::empty(Shape{4}, DType::float32);
  expect_error([&] { axpy({.input = input, .output = output}); }, "[axpy] input has shape (3), expected (4)");
  Tensor matrix = Tensor::empty(Shape{4, 4}, DType::float32), square = Tensor::empty(Shape{4, 4}, DType::float32);
  Tensor transposed = matrix.transpose(0, 1);
  auto reason = reference_unsupported_reason<Axpy>({.input = transposed, .output = square});
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("input is not contiguous"), std::string::npos) << *reason;
  Tensor int_output = Tensor::empty(Shape{4, 4}, DType::int32);
  expect_error([&] { axpy({.input = square, .output = int_output}); },
               "[axpy] output has dtype int32; supported: float32, float64, bfloat16, float16");
}

// ---------------------------------------------------------------------------------------------------------------------
// dropout

TEST(DropoutReference, ProbabilityZeroIsIdentity) {
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor tensor = random_tensor(Shape{7, 9}, dtype, 411);
    const std::vector<double> before = values_of(tensor);
    dropout_reference(tensor, 0.0, 412);
    expect_near(tensor, before, 0, 0, "p = 0");
  }
}

TEST(DropoutReference, MaskFollowsPhiloxAndScaleIsInverseKeepProbability) {
  const int64_t count = 4096;
  const double probability = 0.25;
  const uint64_t seed = 0x5eed;
  Tensor tensor = filled(Shape{16, count / 16}, DType::float32, 1);
  dropout_reference(tensor, probability, seed);
  const std::vector<double> values = values_of(tensor);
  int64_t kept = 0;
  for (int64_t index = 0; index < count; ++index) {
    // The contract every device follows: keep element i when uniform(seed, i) >= p (compared in fp32).
    const bool keep = random_uniform(seed, uint64_t(index)) >= float(probability);
    ASSERT_EQ(values[size_t(index)], keep ? double(float(1 / (1 - probability))) : 0.0) << "element " << index;
    kept += keep;
  }
  // Some of each, so the comparison above saw both branches.
  EXPECT_GT(kept, count / 2);
  EXPECT_LT(kept, count);
}

TEST(DropoutReference, SameSeedSameMaskOtherSeedOtherMask) {
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor first = random_tensor(Shape{1000}, dtype, 421);
    Tensor second = converted(first, dtype), third = converted(first, dtype);
    dropout_reference(first, 0.5, 77);
    dropout_reference(second, 0.5, 77);
    dropout_reference(third, 0.5, 78);
    const std::vector<double> a = values_of(first), b = values_of(second), c = values_of(third);
    EXPECT_EQ(a, b);
    int64_t differences = 0;
    for (size_t index = 0; index < a.size(); ++index) differences += (a[index] == 0) != (c[index] == 0);
    EXPECT_GT(differences, 300);  // about half of 1000 for independent masks
  }
}

TEST(DropoutReference, ExpectationPreserved) {
  const int64_t count = 200000;
  for (double probability : {0.1, 0.3, 0.9}) {
    SCOPED_TRACE(fmt::format("p = {}", probability));
    Tensor tensor = filled(Shape{count}, DType::float32, 1);
    dropout_reference(tensor, probability, 431);
    double sum = 0;
    int64_t kept = 0;
    for (double value : values_of(tensor)) {
      sum += value;
      kept += value != 0;
    }
    // Standard deviations of the mean: sqrt(p / (1 - p) / count) <= 0.0067 for p = 0.9; of the kept fraction <= 0.0011.
    EXPECT_NEAR(sum / double(count), 1.0, 0.03);
    EXPECT_NEAR(double(kept) / double(count), 1 - probability, 0.005);
  }
}

TEST(DropoutReference, BackwardIsDropoutWithTheSameSeedByFiniteDifferences) {
  const double probability = 0.4;
  const uint64_t seed = 441;
  Tensor x = random_tensor(Shape{5, 8}, DType::float64, 442);
  Tensor probe = random_tensor(Shape{5, 8}, DType::float64, 443);
  auto loss = [&] {
    Tensor dropped = converted(x, DType::float64);
    dropout_reference(dropped, probability, seed);
    return dot(values_of(dropped), values_of(probe));
  };
  const std::vector<double> expected = finite_difference_gradient(x, loss);
  dropout_reference(probe, probability, seed);
  expect_near(probe, expected, 1e-9, 1e-8, "grad");
}

TEST(DropoutReference, LowPrecisionMatchesFloat64) {
  for (DType dtype : kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor tensor = random_tensor(Shape{300}, dtype, 451);
    Tensor tensor64 = converted(tensor, DType::float64);
    dropout_reference(tensor, 0.2, 452);
    dropout_reference(tensor64, 0.2, 452);
    const double tolerance = dtype_tolerance(dtype);
    expect_near(tensor, values_of(tensor64), 0, tolerance, "dropped");
  }
}

TEST(DropoutReference, Errors) {
  Tensor tensor = filled(Shape{8}, DType::float32, 1);
  expect_error([&] { dropout({.tensor = tensor, .probability = 1.0}); }, "[dropout] probability 1 is outside [0, 1)");
  expect_error([&] { dropout({.tensor = tensor, .probability = -0.1}); },
               "[dropout] probability -0.1 is outside [0, 1)");
  Tensor matrix = Tensor::empty(Shape{4, 4}, DType::float32);
  Tensor column = matrix.select(1, 0);
  auto reason = reference_unsupported_reason<Dropout>({.tensor = column, .probability = 0.5});
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("tensor is not contiguous"), std::string::npos) << *reason;
}

}  // namespace
}  // namespace fast_llm::kernels
