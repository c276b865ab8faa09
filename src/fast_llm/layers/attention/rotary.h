// Rotary position embeddings: per-channel-pair frequencies (computed in fp64) and the cos / sin tables the
// kernels/rotary.h op applies to queries and keys.
//
// Frequencies for head_size d, pair i < d/2 (theta = config.theta):
//   none:    no rotary
//   default: inv_freq_i = theta^(-2i/d)
//   llama3:  Hugging Face's llama3 scaling: wavelength 2 pi / inv_freq above original_context_length /
//            low_frequency_factor is divided by scale_factor, below original_context_length / high_frequency_factor
//            kept, and blended in between with s = (original_context_length / wavelength - low) / (high - low):
//            (1 - s) inv_freq / scale_factor + s inv_freq
//   yarn:    Hugging Face's YaRN: correction range [floor(c(beta_fast)), ceil(c(beta_slow))] clipped to [0, d - 1]
//            with c(b) = d ln(original_context_length / (2 pi b)) / (2 ln theta); ramp r_i = clamp((i - low) /
//            (high - low), 0, 1) (high += 0.001 when equal); inv_freq_i = (1 - r_i) theta^(-2i/d) + r_i theta^(-2i/d)
//            / scale_factor; cos and sin are multiplied by attention_factor.
// Tables: angle(t, i) = t * inv_freq_i in fp64, t = index of the token in the packed micro-batch (attention never
// crosses documents and rotary is relative, so this equals per-document positions); cos / sin are stored in fp32,
// (tokens, d/2), and cached on the device: the table for the longest micro-batch seen serves shorter ones as a view.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "fast_llm/layers/attention/rotary_config.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::layers {

struct RotaryFrequencies {
  std::vector<double> inverse_frequencies;  // (head_size / 2); empty: no rotary
  double attention_factor = 1.0;            // multiplies cos and sin (yarn)
  bool operator==(const RotaryFrequencies&) const = default;
};

// The frequencies of `config` for heads of `head_size` channels. default_2d and proportional are refused.
RotaryFrequencies rotary_frequencies(const RotaryConfig& config, int64_t head_size);

class Rotary {
 public:
  Rotary(const RotaryConfig& config, int64_t head_size);
  explicit Rotary(RotaryFrequencies frequencies) : frequencies_(std::move(frequencies)) {}

  bool enabled() const { return !frequencies_.inverse_frequencies.empty(); }
  const RotaryFrequencies& frequencies() const { return frequencies_; }

  struct Tables {
    Tensor cos;  // (tokens, head_size / 2) fp32
    Tensor sin;
  };
  // The tables for the first `tokens` positions on `device` (views of the cached table).
  Tables tables(int64_t tokens, Device device, Stream stream);

 private:
  RotaryFrequencies frequencies_;
  std::mutex mutex_;
  Device device_;
  Tables cached_;  // for cached_.cos.size(0) tokens
};

}  // namespace fast_llm::layers
