// Field lists and frequencies of the rotary configs.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "fast_llm/core/error.h"
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

std::vector<double> DefaultRotaryConfig::base_inverse_frequencies(int64_t head_size) const {
  FLM_CHECK(head_size % 2 == 0, "layers", "{}: rotary embeddings need an even head_size, got {}", path(), head_size);
  std::vector<double> result(size_t(head_size / 2));
  for (size_t i = 0; i < result.size(); ++i) result[i] = std::pow(theta, -double(2 * i) / double(head_size));
  return result;
}

RotaryFrequencies DefaultRotaryConfig::frequencies(int64_t head_size) const {
  return {.inverse_frequencies = base_inverse_frequencies(head_size), .attention_factor = 1.0};
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

RotaryFrequencies Llama3RotaryConfig::frequencies(int64_t head_size) const {
  std::vector<double> result = base_inverse_frequencies(head_size);
  const double context = double(original_context_length);
  const double low_frequency_wavelength = context / low_frequency_factor;
  const double high_frequency_wavelength = context / high_frequency_factor;
  for (double& inverse_frequency : result) {
    const double wavelength = 2.0 * std::numbers::pi / inverse_frequency;
    if (wavelength > low_frequency_wavelength) {
      inverse_frequency /= scale_factor;
    } else if (wavelength >= high_frequency_wavelength) {
      const double smooth =
          (context / wavelength - low_frequency_factor) / (high_frequency_factor - low_frequency_factor);
      inverse_frequency = (1.0 - smooth) * inverse_frequency / scale_factor + smooth * inverse_frequency;
    }
  }
  return {.inverse_frequencies = std::move(result), .attention_factor = 1.0};
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

RotaryFrequencies YarnRotaryConfig::frequencies(int64_t head_size) const {
  FLM_ASSERT(attention_factor.has_value(), "yarn attention_factor is resolved at validation");
  std::vector<double> result = base_inverse_frequencies(head_size);
  const double dims = double(head_size);
  // Dimension whose wavelength makes `rotations` turns over the original context.
  auto correction_dimension = [&](double rotations) {
    return dims * std::log(double(original_context_length) / (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(theta));
  };
  const double low = std::max(std::floor(correction_dimension(beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dimension(beta_slow)), dims - 1.0);
  if (low == high) high += 0.001;
  for (size_t i = 0; i < result.size(); ++i) {
    // ramp 0: keep the frequency (extrapolation), 1: divide it by scale_factor (interpolation).
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    result[i] = (1.0 - ramp) * result[i] + ramp * result[i] / scale_factor;
  }
  return {.inverse_frequencies = std::move(result), .attention_factor = *attention_factor};
}

void Rotary2dConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "2d rotary embeddings for images");
  DefaultRotaryConfig::visit(v);
}

RotaryFrequencies Rotary2dConfig::frequencies(int64_t head_size) const {
  throw NotSupportedError("layers", fmt::format("{}: this rotary type is not supported", field_path("type")));
}

void ProportionalRotaryConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "partial rotary embeddings");
  DefaultRotaryConfig::visit(v);
  v(partial_rotary_factor, "partial_rotary_factor", "Fraction of each head's channels that are rotated.",
    Hint::architecture, check::in_range(0.0, 1.0));
}

RotaryFrequencies ProportionalRotaryConfig::frequencies(int64_t head_size) const {
  throw NotSupportedError("layers", fmt::format("{}: this rotary type is not supported", field_path("type")));
}

}  // namespace fast_llm::layers
