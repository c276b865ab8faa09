// Element conversions of `cast` (kernels/copy.h) on the CPU, written out rather than left to the compiler's defaults
// (which are undefined for a float out of an integer's range) so the CUDA variants can match them bit for bit. Shared
// with ops that write a rounded copy of their result, which must equal what a cast of that result would give
// (adam_step's compute-dtype weights).
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "fast_llm/core/half.h"
#include "fast_llm/kernels/cpu/dtype_dispatch.h"

namespace fast_llm::kernels::cpu {

// float64 -> float32 rounded to odd: truncated toward zero, with the lowest bit set when anything was cut off. Rounding
// that (24 significant bits) to bfloat16 or float16 (at most 11) to nearest even then gives the correctly rounded
// result of the float64, which rounding through float32 to nearest would not on near-ties.
inline float round_to_odd_float(double value) {
  float rounded = float(value);
  if (!std::isfinite(value) || double(rounded) == value) return rounded;
  if (std::abs(double(rounded)) > std::abs(value)) rounded = std::nextafter(rounded, 0.0f);
  return bits_to_float(float_to_bits(rounded) | 1u);
}

// Truncation toward zero, saturated to I's range; NaN gives 0 (what the GPU's conversion instructions do).
template <class I>
I saturate_to_integer(double value) {
  if (std::isnan(value)) return I(0);
  const double truncated = std::trunc(value);
  // Both bounds are exact in float64 except int64's and uint64's maximum, which round up to 2^63 / 2^64: a value at
  // or above them saturates, and every value below is exactly convertible.
  if (truncated <= double(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (truncated >= double(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return I(truncated);
}

template <class To>
To cast_from_double(double value) {
  if constexpr (std::is_same_v<To, double>)
    return value;
  else if constexpr (std::is_same_v<To, float>)
    return float(value);
  else if constexpr (std::is_same_v<To, bfloat16>)
    return to_bfloat16(round_to_odd_float(value));
  else if constexpr (std::is_same_v<To, float16>)
    return to_float16(round_to_odd_float(value));
  else
    return saturate_to_integer<To>(value);
}

// From a value exactly representable in float32 (float32, bfloat16 and float16 sources): one rounding.
template <class To>
To cast_from_float(float value) {
  if constexpr (std::is_same_v<To, bfloat16>)
    return to_bfloat16(value);
  else if constexpr (std::is_same_v<To, float16>)
    return to_float16(value);
  else
    return cast_from_double<To>(double(value));
}

// One element of type From as `cast` writes it into type To.
template <class To, class From>
To cast_element(From value) {
  if constexpr (std::is_integral_v<From> && std::is_integral_v<To>)
    return static_cast<To>(value);  // modulo 2^bits
  else if constexpr (std::is_integral_v<From> || std::is_same_v<From, double>)
    return cast_from_double<To>(double(value));
  else
    return cast_from_float<To>(load_value(value));
}

}  // namespace fast_llm::kernels::cpu
