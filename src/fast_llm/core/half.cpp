#include "fast_llm/core/half.h"

namespace fast_llm {

float to_float(float16 value) {
  uint32_t sign = uint32_t(value.bits & 0x8000u) << 16;
  uint32_t exponent = (value.bits >> 10) & 0x1fu;
  uint32_t mantissa = value.bits & 0x3ffu;
  if (exponent == 0x1f) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));  // inf / nan
  if (exponent == 0) {
    if (mantissa == 0) return bits_to_float(sign);
    // Subnormal: value = mantissa * 2^-24.
    float magnitude = float(mantissa) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

float16 to_float16(float value) {
  uint32_t bits = float_to_bits(value);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return float16{uint16_t(sign | 0x7e00u)};  // NaN
  if (magnitude >= 0x477ff000u) return float16{uint16_t(sign | 0x7c00u)};  // overflows to inf (>= 65520)
  if (magnitude < 0x38800000u) {
    // Result is subnormal or zero: value / 2^-24, rounded to nearest even.
    if (magnitude < 0x33000000u) return float16{sign};  // < 2^-25 rounds to zero
    uint32_t exponent = magnitude >> 23;
    uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exponent;  // in [14, 24]
    uint32_t result = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return float16{uint16_t(sign | result)};
  }
  // Normal: rebias exponent, round mantissa from 23 to 10 bits (nearest even).
  uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return float16{uint16_t(sign | ((rounded - 0x38000000u) >> 13))};
}

}  // namespace fast_llm
