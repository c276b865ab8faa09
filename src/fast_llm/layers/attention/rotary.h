// Rotary position embeddings: the cos / sin tables the kernels/rotary.h op applies to queries and keys, from the
// frequencies of a rotary config (attention/rotary_config.h).
//
// Tables: angle(t, i) = t * inv_freq_i in fp64, t = index of the token in the packed micro-batch (attention never
// crosses documents and rotary is relative, so this equals per-document positions); cos / sin are stored in fp32
// (fp64 for fp64 compute, which would otherwise be fp32-accurate: 2e-8 to 1e-6 from an fp64 reference), (tokens, d/2),
// and cached on the device: the table for the longest micro-batch seen serves shorter ones as a view.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>

#include "fast_llm/layers/attention/rotary_config.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::layers {

class Rotary {
 public:
  Rotary(const RotaryConfig& config, int64_t head_size);
  explicit Rotary(RotaryFrequencies frequencies) : frequencies_(std::move(frequencies)) {}

  bool enabled() const { return !frequencies_.inverse_frequencies.empty(); }
  const RotaryFrequencies& frequencies() const { return frequencies_; }

  struct Tables {
    Tensor cos;  // (tokens, head_size / 2) fp32, or fp64 for fp64 compute
    Tensor sin;
  };
  // The tables for the first `tokens` positions on `device` for queries and keys of `compute_dtype` (views of the
  // cached table).
  Tables tables(int64_t tokens, Device device, Stream stream, DType compute_dtype);

 private:
  RotaryFrequencies frequencies_;
  std::mutex mutex_;
  Device device_;
  DType dtype_ = DType::float32;  // of the cached tables
  Tables cached_;  // for cached_.cos.size(0) tokens
};

}  // namespace fast_llm::layers
