// Field lists of the rotary configs.
#include <fmt/format.h>

#include <cmath>

#include "fast_llm/layers/attention/rotary_config.h"
#include "fast_llm/layers/common/unsupported_type.h"

namespace fast_llm::layers {

using config::Hint;
using config::Visitor;
namespace check = config::check;

FLM_REGISTER_CONFIG(RotaryConfig, NoRotaryConfig, "none");
FLM_REGISTER_CONFIG(RotaryConfig, DefaultRotaryConfig, "default");
FLM_REGISTER_CONFIG(RotaryConfig, Llama3RotaryConfig, "llama3");
FLM_REGISTER_CONFIG(RotaryConfig, YarnRotaryConfig, "yarn");
FLM_REGISTER_CONFIG(RotaryConfig, Rotary2dConfig, "default_2d");
FLM_REGISTER_CONFIG(RotaryConfig, ProportionalRotaryConfig, "proportional");

void DefaultRotaryConfig::visit(Visitor& v) {
  v(theta, "theta", "Base of the geometric sequence of rotary wavelengths.", Hint::architecture, check::gt(0.0));
}

void Llama3RotaryConfig::visit(Visitor& v) {
  DefaultRotaryConfig::visit(v);
  v(scale_factor, "scale_factor", "Factor the longest wavelengths are stretched by.", Hint::architecture,
    check::gt(0.0));
  v(low_frequency_factor, "low_frequency_factor",
    "Wavelengths above original_context_length / low_frequency_factor are fully scaled.", Hint::architecture,
    check::gt(0.0));
  v(high_frequency_factor, "high_frequency_factor",
    "Wavelengths below original_context_length / high_frequency_factor are kept as they are.", Hint::architecture,
    check::gt(0.0));
  v(original_context_length, "original_context_length", "Context length the model was first trained with.",
    Hint::architecture, check::gt(0));
}

void Llama3RotaryConfig::check() const {
  if (high_frequency_factor <= low_frequency_factor)
    fail("high_frequency_factor", fmt::format("must be greater than low_frequency_factor ({}), got {}",
                                              low_frequency_factor, high_frequency_factor));
}

void YarnRotaryConfig::visit(Visitor& v) {
  DefaultRotaryConfig::visit(v);
  v(scale_factor, "scale_factor", "Context extension factor.", Hint::architecture, check::gt(0.0));
  v(attention_factor, "attention_factor", "Scale of the attention logits; unset gives 0.1 * ln(scale_factor) + 1.",
    Hint::architecture);
  v(beta_fast, "beta_fast", "Rotations per context above which a dimension is not interpolated.", Hint::architecture);
  v(beta_slow, "beta_slow", "Rotations per context below which a dimension is fully interpolated.",
    Hint::architecture);
  v(original_context_length, "original_context_length", "Context length the model was first trained with.",
    Hint::architecture, check::gt(0));
}

void YarnRotaryConfig::derive() {
  // A non-positive scale_factor is reported by its check; leave the factor unset rather than take its logarithm.
  if (!attention_factor && scale_factor > 0) attention_factor = 0.1 * std::log(scale_factor) + 1.0;
}

void Rotary2dConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "2d rotary embeddings for images");
  DefaultRotaryConfig::visit(v);
}

void ProportionalRotaryConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "partial rotary embeddings");
  DefaultRotaryConfig::visit(v);
  v(partial_rotary_factor, "partial_rotary_factor", "Fraction of each head's channels that are rotated.",
    Hint::architecture, check::in_range(0.0, 1.0));
}

}  // namespace fast_llm::layers
