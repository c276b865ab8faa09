#include "fast_llm/layers/attention/rotary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "fast_llm/core/error.h"

namespace fast_llm::layers {

namespace {

// theta^(-2i/d), i < d/2.
std::vector<double> base_inverse_frequencies(double theta, int64_t head_size) {
  std::vector<double> result(size_t(head_size / 2));
  for (size_t i = 0; i < result.size(); ++i) result[i] = std::pow(theta, -double(2 * i) / double(head_size));
  return result;
}

std::vector<double> llama3_inverse_frequencies(const Llama3RotaryConfig& config, int64_t head_size) {
  std::vector<double> result = base_inverse_frequencies(config.theta, head_size);
  const double context = double(config.original_context_length);
  const double low_frequency_wavelength = context / config.low_frequency_factor;
  const double high_frequency_wavelength = context / config.high_frequency_factor;
  for (double& inverse_frequency : result) {
    const double wavelength = 2.0 * std::numbers::pi / inverse_frequency;
    if (wavelength > low_frequency_wavelength) {
      inverse_frequency /= config.scale_factor;
    } else if (wavelength >= high_frequency_wavelength) {
      const double smooth = (context / wavelength - config.low_frequency_factor) /
                            (config.high_frequency_factor - config.low_frequency_factor);
      inverse_frequency = (1.0 - smooth) * inverse_frequency / config.scale_factor + smooth * inverse_frequency;
    }
  }
  return result;
}

std::vector<double> yarn_inverse_frequencies(const YarnRotaryConfig& config, int64_t head_size) {
  std::vector<double> result = base_inverse_frequencies(config.theta, head_size);
  const double dims = double(head_size);
  // Dimension whose wavelength makes `rotations` turns over the original context.
  auto correction_dimension = [&](double rotations) {
    return dims * std::log(double(config.original_context_length) / (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(config.theta));
  };
  const double low = std::max(std::floor(correction_dimension(config.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dimension(config.beta_slow)), dims - 1.0);
  if (low == high) high += 0.001;
  for (size_t i = 0; i < result.size(); ++i) {
    // ramp 0: keep the frequency (extrapolation), 1: divide it by scale_factor (interpolation).
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    result[i] = (1.0 - ramp) * result[i] + ramp * result[i] / config.scale_factor;
  }
  return result;
}

}  // namespace

RotaryFrequencies rotary_frequencies(const RotaryConfig& config, int64_t head_size) {
  if (dynamic_cast<const Rotary2dConfig*>(&config) != nullptr ||
      dynamic_cast<const ProportionalRotaryConfig*>(&config) != nullptr)
    throw NotSupportedError("layers", fmt::format("{}: this rotary type is not supported", config.field_path("type")));
  if (dynamic_cast<const NoRotaryConfig*>(&config) != nullptr) return {};
  FLM_CHECK(head_size % 2 == 0, "layers", "{}: rotary embeddings need an even head_size, got {}", config.path(),
            head_size);
  if (const auto* llama3 = dynamic_cast<const Llama3RotaryConfig*>(&config))
    return {.inverse_frequencies = llama3_inverse_frequencies(*llama3, head_size), .attention_factor = 1.0};
  if (const auto* yarn = dynamic_cast<const YarnRotaryConfig*>(&config)) {
    FLM_ASSERT(yarn->attention_factor.has_value(), "yarn attention_factor is resolved at validation");
    return {.inverse_frequencies = yarn_inverse_frequencies(*yarn, head_size),
            .attention_factor = *yarn->attention_factor};
  }
  const auto* plain = dynamic_cast<const DefaultRotaryConfig*>(&config);
  FLM_ASSERT(plain != nullptr, "unknown rotary config at {}", config.path());
  return {.inverse_frequencies = base_inverse_frequencies(plain->theta, head_size), .attention_factor = 1.0};
}

Rotary::Rotary(const RotaryConfig& config, int64_t head_size) : frequencies_(rotary_frequencies(config, head_size)) {}

Rotary::Tables Rotary::tables(int64_t tokens, Device device, Stream stream) {
  FLM_ASSERT(enabled(), "rotary tables without rotary");
  std::lock_guard lock(mutex_);
  if (!cached_.cos.defined() || device_ != device || cached_.cos.size(0) < tokens) {
    const int64_t half = int64_t(frequencies_.inverse_frequencies.size());
    Tensor cos = Tensor::empty(Shape{tokens, half}, DType::float32);
    Tensor sin = Tensor::empty(Shape{tokens, half}, DType::float32);
    float* cos_data = cos.data_as<float>();
    float* sin_data = sin.data_as<float>();
    for (int64_t token = 0; token < tokens; ++token) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(token) * frequencies_.inverse_frequencies[size_t(i)];
        cos_data[token * half + i] = float(std::cos(angle) * frequencies_.attention_factor);
        sin_data[token * half + i] = float(std::sin(angle) * frequencies_.attention_factor);
      }
    }
    cached_ = {.cos = cos.to(device, stream), .sin = sin.to(device, stream)};
    device_ = device;
  }
  return {.cos = cached_.cos.slice(0, 0, tokens), .sin = cached_.sin.slice(0, 0, tokens)};
}

}  // namespace fast_llm::layers
