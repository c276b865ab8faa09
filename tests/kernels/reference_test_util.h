// Helpers for the tests of the CPU reference kernels: tensors from values, random tensors, reading results back,
// central finite differences in fp64, tolerances by dtype, and error checks.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/core/half.h"
#include "fast_llm/core/random.h"
#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels::testing {

// The CPU reference variant of Op, called directly (whatever else dispatch could pick).
template <class Op>
const KernelVariant<typename Op::Args>& reference_variant() {
  return OpRegistry<Op>::instance().find("reference", Device::cpu());
}

template <class Op>
void run_reference(const typename Op::Args& args) {
  const auto& variant = reference_variant<Op>();
  if (variant.supports) {
    std::optional<std::string> reason = variant.supports(args);
    ASSERT_FALSE(reason.has_value()) << Op::name << ":cpu:reference does not support the arguments: " << *reason;
  }
  variant.run(args);
}

// Why the reference variant of Op does not support `args` (nullopt if it does).
template <class Op>
std::optional<std::string> reference_unsupported_reason(const typename Op::Args& args) {
  const auto& variant = reference_variant<Op>();
  return variant.supports ? variant.supports(args) : std::nullopt;
}

inline void write_double(void* element, DType dtype, double value) {
  switch (dtype) {
    case DType::float32: *static_cast<float*>(element) = float(value); return;
    case DType::float64: *static_cast<double*>(element) = value; return;
    case DType::bfloat16: *static_cast<bfloat16*>(element) = to_bfloat16(float(value)); return;
    case DType::float16: *static_cast<float16*>(element) = to_float16(float(value)); return;
    case DType::int32: *static_cast<int32_t*>(element) = int32_t(value); return;
    case DType::int64: *static_cast<int64_t*>(element) = int64_t(value); return;
    default: FAIL() << "write_double: unsupported dtype " << dtype_name(dtype);
  }
}

// A contiguous CPU tensor holding `values` (row-major), rounded to `dtype` (for 16-bit types through fp32).
inline Tensor make_tensor(std::span<const double> values, const Shape& shape, DType dtype) {
  EXPECT_EQ(int64_t(values.size()), shape.numel()) << "make_tensor: value count does not match " << shape.str();
  Tensor tensor = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<char*>(tensor.data());
  for (size_t index = 0; index < values.size(); ++index)
    write_double(bytes + index * tensor.element_size(), dtype, values[index]);
  return tensor;
}

inline Tensor make_tensor(std::initializer_list<double> values, const Shape& shape, DType dtype) {
  return make_tensor(std::span<const double>(values.begin(), values.size()), shape, dtype);
}

// A (tokens) int64 tensor of labels (-100: masked), as the loss ops take them.
inline Tensor labels_tensor(const std::vector<int64_t>& labels) {
  const std::vector<double> values(labels.begin(), labels.end());
  return make_tensor(values, Shape{int64_t(labels.size())}, DType::int64);
}

inline Tensor filled(const Shape& shape, DType dtype, double value) {
  return make_tensor(std::vector<double>(size_t(shape.numel()), value), shape, dtype);
}

// `count` values uniform in [low, high), a pure function of `seed`.
inline std::vector<double> uniform_values(int64_t count, uint64_t seed, double low = -1.0, double high = 1.0) {
  std::vector<double> values(static_cast<size_t>(count));
  for (int64_t index = 0; index < count; ++index)
    values[size_t(index)] = low + (high - low) * (double(random_uniform(seed, uint64_t(index))) - 0x1p-24);
  return values;
}

inline Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double low = -1.0, double high = 1.0) {
  return make_tensor(uniform_values(shape.numel(), seed, low, high), shape, dtype);
}

// cos / sin tables (tokens, width) of random angles in [-pi, pi], both times `scale` (as yarn's attention factor scales
// them: a variant that mixes up the two tables, or the sign of the inverse, then fails), for rotary_apply and the
// attention backward's rotary tables.
inline std::pair<Tensor, Tensor> random_rotary_tables(int64_t tokens, int64_t width, DType dtype, uint64_t seed,
                                                      double scale = 1.0) {
  std::vector<double> angles = uniform_values(tokens * width, seed, -std::numbers::pi, std::numbers::pi),
                      cos(angles.size()), sin(angles.size());
  for (size_t index = 0; index < angles.size(); ++index) {
    cos[index] = scale * std::cos(angles[index]);
    sin[index] = scale * std::sin(angles[index]);
  }
  return {make_tensor(cos, Shape{tokens, width}, dtype), make_tensor(sin, Shape{tokens, width}, dtype)};
}

// Every element, row-major, as double (any strides).
inline std::vector<double> values_of(const Tensor& tensor) {
  std::vector<double> values;
  values.reserve(size_t(tensor.numel()));
  std::vector<int64_t> index(size_t(tensor.rank()), 0);
  for (int64_t linear = 0; linear < tensor.numel(); ++linear) {
    int64_t rest = linear;
    for (int dim = tensor.rank() - 1; dim >= 0; --dim) {
      index[size_t(dim)] = rest % tensor.size(dim);
      rest /= tensor.size(dim);
    }
    values.push_back(tensor.item_as_double(index));
  }
  return values;
}

// The same values as another dtype (exact when widening).
inline Tensor converted(const Tensor& tensor, DType dtype) {
  return make_tensor(values_of(tensor), tensor.shape(), dtype);
}

inline double dot(std::span<const double> a, std::span<const double> b) {
  EXPECT_EQ(a.size(), b.size());
  double sum = 0;
  for (size_t index = 0; index < a.size() && index < b.size(); ++index) sum += a[index] * b[index];
  return sum;
}

// Central finite differences of `loss` with respect to every element of the contiguous fp64 tensor `parameter`.
inline std::vector<double> finite_difference_gradient(const Tensor& parameter, const std::function<double()>& loss,
                                                      double step = 1e-6) {
  std::vector<double> gradient(size_t(parameter.numel()));
  double* data = parameter.data_as<double>();
  for (int64_t index = 0; index < parameter.numel(); ++index) {
    const double saved = data[index];
    data[index] = saved + step;
    const double plus = loss();
    data[index] = saved - step;
    const double minus = loss();
    data[index] = saved;
    gradient[size_t(index)] = (plus - minus) / (2 * step);
  }
  return gradient;
}

// |actual - expected| <= atol + rtol |expected| element by element; reports the first few failures.
inline void expect_near(std::span<const double> actual, std::span<const double> expected, double atol, double rtol,
                        std::string_view what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int failures = 0;
  for (size_t index = 0; index < actual.size(); ++index) {
    const double tolerance = atol + rtol * std::abs(expected[index]);
    if (!(std::abs(actual[index] - expected[index]) <= tolerance)) {
      ADD_FAILURE() << what << ": element " << index << " is " << actual[index] << ", expected " << expected[index]
                    << " (tolerance " << tolerance << ")";
      if (++failures == 5) return;
    }
  }
}

inline void expect_near(const Tensor& actual, std::span<const double> expected, double atol, double rtol,
                        std::string_view what) {
  expect_near(values_of(actual), expected, atol, rtol, what);
}

inline void expect_near(const Tensor& actual, std::initializer_list<double> expected, double atol, double rtol,
                        std::string_view what) {
  expect_near(values_of(actual), std::span<const double>(expected.begin(), expected.size()), atol, rtol, what);
}

// Tolerance (relative and absolute, on values of order one) of a 16-bit result against fp64: a few units of the
// dtype's rounding (fp32 math in between adds much less).
inline double dtype_tolerance(DType dtype) {
  switch (dtype) {
    case DType::bfloat16: return 0x1p-6;  // 8 significant bits: rounding 2^-9, plus inputs of intermediate roundings
    case DType::float16: return 0x1p-9;   // 11 significant bits
    case DType::float32: return 1e-5;
    default: return 1e-12;
  }
}

// `function` throws a fast_llm::Error whose message contains `expected`.
inline void expect_error(const std::function<void()>& function, std::string_view expected) {
  try {
    function();
  } catch (const Error& error) {
    EXPECT_NE(std::string_view(error.what()).find(expected), std::string_view::npos)
        << "message: " << error.what() << "\nexpected to contain: " << expected;
    return;
  }
  ADD_FAILURE() << "no error thrown; expected one containing: " << expected;
}

inline constexpr DType kLowPrecisionDTypes[] = {DType::bfloat16, DType::float16, DType::float32};

}  // namespace fast_llm::kernels::testing
