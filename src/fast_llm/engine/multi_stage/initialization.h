// Parameter initialisation on the host, element by element from counter-based random streams (core/random.h).
//
// Element i of parameter `name` is a pure function of (seed, name, i): the stream key is derive_seed(seed,
// fnv1a(name)), and
//   normal:  clamp(mean + std * random_normal(key, i), min, max)   (min/max: truncation; unbounded by default)
//   uniform: min + (max - min) * random_uniform(key, i)            (in (min, max])
//   fill:    value
// computed in double and rounded once to the output type, so the same model comes out whatever the stage layout,
// the data-parallel sharding or the device.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "fast_llm/core/error.h"
#include "fast_llm/core/random.h"
#include "fast_llm/layers/parameter.h"

namespace fast_llm::engine {

// 64-bit FNV-1a hash of a parameter name.
constexpr uint64_t name_hash(std::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : name) {
    hash ^= uint64_t(uint8_t(c));
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// The random stream key of parameter `name` under the run's seed.
inline uint64_t parameter_seed(uint64_t seed, std::string_view name) { return derive_seed(seed, name_hash(name)); }

// Writes elements [begin, begin + count) of a parameter initialised by `initialization` under stream key `key`.
template <class T>
void fill_initialization(const layers::Initialization& initialization, uint64_t key, int64_t begin, int64_t count,
                         T* output) {
  using Kind = layers::Initialization::Kind;
  switch (initialization.kind) {
    case Kind::fill: {
      const T value = T(initialization.value);
      std::fill(output, output + count, value);
      return;
    }
    case Kind::normal: {
      const double mean = initialization.mean, std = initialization.std;
      const double low = initialization.min, high = initialization.max;
#pragma omp parallel for
      for (int64_t i = 0; i < count; ++i) {
        double value = mean + std * double(random_normal(key, uint64_t(begin + i)));
        output[i] = T(std::clamp(value, low, high));
      }
      return;
    }
    case Kind::uniform: {
      const double low = initialization.min, width = initialization.max - initialization.min;
#pragma omp parallel for
      for (int64_t i = 0; i < count; ++i) output[i] = T(low + width * double(random_uniform(key, uint64_t(begin + i))));
      return;
    }
  }
  throw InternalError("multi_stage", "unknown initialization kind");
}

}  // namespace fast_llm::engine
