// Counter-based random numbers (Philox-4x32-10, Salmon et al. 2011), identical on the CPU and the GPU.
//
// A stream is keyed by a 64-bit seed; element i of any random tensor is a pure function of (seed, i), so the same
// initialisation or dropout mask comes out whatever the device, thread layout or parallel layout. Derive seeds per
// purpose with `derive_seed` (e.g. seed, step, phase, rank) rather than advancing shared state.
#pragma once

#include <cmath>
#include <cstdint>

#include "fast_llm/core/macros.h"

namespace fast_llm {

struct Philox4 {
  uint32_t x, y, z, w;
};

// One Philox-4x32-10 block: four 32-bit random words for counter `counter` under key `seed`.
FLM_HOST_DEVICE FLM_INLINE Philox4 philox4x32(uint64_t seed, uint64_t counter) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t product0 = uint64_t(kMultiplier0) * c0;
    uint64_t product1 = uint64_t(kMultiplier1) * c2;
    uint32_t next0 = uint32_t(product1 >> 32) ^ c1 ^ k0;
    uint32_t next2 = uint32_t(product0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(product1);
    c3 = uint32_t(product0);
    c0 = next0;
    c2 = next2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

// Uniform in (0, 1], from the top 24 bits (exactly representable in float, never 0 so log() is safe).
FLM_HOST_DEVICE FLM_INLINE float uint_to_uniform(uint32_t bits) { return float((bits >> 8) + 1) * (1.0f / 16777216.0f); }

// Element `index` of the uniform (0, 1] stream `seed`.
FLM_HOST_DEVICE FLM_INLINE float random_uniform(uint64_t seed, uint64_t index) {
  Philox4 block = philox4x32(seed, index >> 2);
  uint32_t lane = uint32_t(index & 3);
  uint32_t bits = lane == 0 ? block.x : lane == 1 ? block.y : lane == 2 ? block.z : block.w;
  return uint_to_uniform(bits);
}

// Element `index` of the standard normal stream `seed` (Box-Muller on one Philox block per element, in double so
// the CPU and GPU round to the same float).
FLM_HOST_DEVICE FLM_INLINE float random_normal(uint64_t seed, uint64_t index) {
  Philox4 block = philox4x32(seed, index);
  double u1 = (double(block.x >> 8) + 1.0) * (1.0 / 16777216.0);
  double u2 = double(block.y >> 8) * (1.0 / 16777216.0);
  return float(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// Mixes several integers into a new seed (SplitMix64 finaliser over a running hash).
FLM_HOST_DEVICE FLM_INLINE uint64_t mix_seed(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

template <class... Parts>
FLM_HOST_DEVICE FLM_INLINE uint64_t derive_seed(uint64_t seed, Parts... parts) {
  uint64_t result = mix_seed(seed);
  ((result = mix_seed(result ^ uint64_t(parts))), ...);
  return result;
}

}  // namespace fast_llm
