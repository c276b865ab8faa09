// Rotary position embeddings of attention (`rotary:`), as Fast-LLM's RotaryConfig family, selected by `type:`:
// `none` (the default: no rotary), `default` (theta), `llama3` and `yarn` (context-extension frequency scalings), and
// `default_2d` / `proportional` (vision and Gemma-4 variants, accepted but not built yet). Each type computes its own
// per-channel-pair frequencies (in fp64; layers/attention/rotary.h turns them into cos / sin tables), so a new rotary
// type is a new config class in its own file.
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
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/config/config.h"

namespace fast_llm::layers {

struct RotaryFrequencies {
  std::vector<double> inverse_frequencies;  // (head_size / 2); empty: no rotary
  double attention_factor = 1.0;            // multiplies cos and sin (yarn)
  bool operator==(const RotaryFrequencies&) const = default;
};

struct RotaryConfig : config::Config {
  static constexpr std::string_view kDefaultType = "none";
  void visit(config::Visitor& v) override {}
  // The frequencies for heads of `head_size` channels. Errors: an odd head_size (with rotary), a type accepted without
  // behaviour (NotSupportedError naming its `type`).
  virtual RotaryFrequencies frequencies(int64_t head_size) const = 0;
};

struct NoRotaryConfig : RotaryConfig {
  RotaryFrequencies frequencies(int64_t head_size) const override { return {}; }
};

struct DefaultRotaryConfig : RotaryConfig {
  double theta = 10000.0;
  void visit(config::Visitor& v) override;
  RotaryFrequencies frequencies(int64_t head_size) const override;

 protected:
  // theta^(-2i/d), i < d/2: the default frequencies, which the scalings start from.
  std::vector<double> base_inverse_frequencies(int64_t head_size) const;
};

// Llama-3 frequency scaling: long wavelengths divided by scale_factor, short ones kept, a smooth blend in between.
struct Llama3RotaryConfig : DefaultRotaryConfig {
  double scale_factor = 8.0;
  double low_frequency_factor = 1.0;
  double high_frequency_factor = 4.0;
  int original_context_length = 8192;
  void visit(config::Visitor& v) override;
  RotaryFrequencies frequencies(int64_t head_size) const override;

 protected:
  void check() const override;
};

// YaRN frequency scaling.
struct YarnRotaryConfig : DefaultRotaryConfig {
  double scale_factor = 8.0;
  // Unset: 0.1 * ln(scale_factor) + 1, resolved in derive().
  std::optional<double> attention_factor;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int original_context_length = 8192;
  void visit(config::Visitor& v) override;
  RotaryFrequencies frequencies(int64_t head_size) const override;

 protected:
  void derive() override;
};

// 2d rotary for image patches (vision encoders).
struct Rotary2dConfig : DefaultRotaryConfig {
  std::string type = "default_2d";
  void visit(config::Visitor& v) override;
  RotaryFrequencies frequencies(int64_t head_size) const override;
};

// Rotary on a leading fraction of each head's channels only (Gemma-4 global attention).
struct ProportionalRotaryConfig : DefaultRotaryConfig {
  std::string type = "proportional";
  double partial_rotary_factor = 1.0;
  void visit(config::Visitor& v) override;
  RotaryFrequencies frequencies(int64_t head_size) const override;
};

}  // namespace fast_llm::layers
