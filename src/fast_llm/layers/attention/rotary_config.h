// Rotary position embeddings of attention (`rotary:`), as Fast-LLM's RotaryConfig family, selected by `type:`:
// `none` (the default: no rotary), `default` (theta), `llama3` and `yarn` (context-extension frequency scalings), and
// `default_2d` / `proportional` (vision and Gemma-4 variants, accepted but not built yet).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "fast_llm/config/config.h"

namespace fast_llm::layers {

struct RotaryConfig : config::Config {
  static constexpr std::string_view kDefaultType = "none";
  void visit(config::Visitor& v) override {}
};

struct NoRotaryConfig : RotaryConfig {};

struct DefaultRotaryConfig : RotaryConfig {
  double theta = 10000.0;
  void visit(config::Visitor& v) override;
};

// Llama-3 frequency scaling: long wavelengths divided by scale_factor, short ones kept, a smooth blend in between.
struct Llama3RotaryConfig : DefaultRotaryConfig {
  double scale_factor = 8.0;
  double low_frequency_factor = 1.0;
  double high_frequency_factor = 4.0;
  int original_context_length = 8192;
  void visit(config::Visitor& v) override;

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

 protected:
  void derive() override;
};

// 2d rotary for image patches (vision encoders).
struct Rotary2dConfig : DefaultRotaryConfig {
  std::string type = "default_2d";
  void visit(config::Visitor& v) override;
};

// Rotary on a leading fraction of each head's channels only (Gemma-4 global attention).
struct ProportionalRotaryConfig : DefaultRotaryConfig {
  std::string type = "proportional";
  double partial_rotary_factor = 1.0;
  void visit(config::Visitor& v) override;
};

}  // namespace fast_llm::layers
