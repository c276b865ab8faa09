// 16-bit floating-point storage types for host code: bfloat16 and IEEE float16.
//
// Both are plain 16-bit patterns with the same layout as CUDA's __nv_bfloat16 / __half, so a tensor's storage can be
// read by either side. Arithmetic happens in float: convert, compute, round back (round to nearest even, as the
// GPU's conversion instructions do), which is how the CPU backend models bf16/fp16 compute.
#pragma once

#include <cstdint>
#include <cstring>

#include "fast_llm/core/macros.h"

namespace fast_llm {

struct bfloat16 {
  uint16_t bits = 0;
};

struct float16 {
  uint16_t bits = 0;
};

FLM_HOST_DEVICE FLM_INLINE float bits_to_float(uint32_t bits) {
  float value;
  memcpy(&value, &bits, sizeof(value));
  return value;
}

FLM_HOST_DEVICE FLM_INLINE uint32_t float_to_bits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof(bits));
  return bits;
}

FLM_HOST_DEVICE FLM_INLINE float to_float(bfloat16 value) { return bits_to_float(uint32_t(value.bits) << 16); }

FLM_HOST_DEVICE FLM_INLINE bfloat16 to_bfloat16(float value) {
  uint32_t bits = float_to_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return bfloat16{uint16_t((bits >> 16) | 0x0040u)};  // quiet NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return bfloat16{uint16_t((bits + rounding) >> 16)};
}

// IEEE binary16 conversions (subnormals, infinities and NaN included).
float to_float(float16 value);
float16 to_float16(float value);

// Rounds a float through a 16-bit type and back: what storing it in that type loses.
inline float round_to_bfloat16(float value) { return to_float(to_bfloat16(value)); }
inline float round_to_float16(float value) { return to_float(to_float16(value)); }

}  // namespace fast_llm
