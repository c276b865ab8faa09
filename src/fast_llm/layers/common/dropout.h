// Dropout seeds of layers: a pure function of the step's micro-batch seed (LayerContext::dropout_seed), the layer's
// name and which dropout of the layer it is, so a mask is the same on any device and layout and backward regenerates
// it from the same seed (kernels/pointwise.h dropout).
#pragma once

#include <cstdint>
#include <string_view>

#include "fast_llm/core/random.h"

namespace fast_llm::layers {

// 64-bit FNV-1a of a name: stable across runs and platforms.
inline uint64_t name_hash(std::string_view name) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (unsigned char character : name) {
    hash ^= character;
    hash *= 0x100000001B3ull;
  }
  return hash;
}

inline uint64_t dropout_seed(uint64_t context_seed, std::string_view layer_name, uint64_t purpose) {
  return derive_seed(context_seed, name_hash(layer_name), purpose);
}

}  // namespace fast_llm::layers
