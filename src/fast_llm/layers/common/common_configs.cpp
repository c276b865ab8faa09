// Field lists of the shared layer configs: initialization, parameters, linear layers, normalization.
#include <fmt/format.h>

#include <algorithm>

#include "fast_llm/layers/common/initialization_config.h"
#include "fast_llm/layers/common/linear_config.h"
#include "fast_llm/layers/common/normalization_config.h"
#include "fast_llm/layers/common/parameter_config.h"
#include "fast_llm/layers/common/unsupported_type.h"

namespace fast_llm::layers {

using config::Hint;
using config::Visitor;
namespace check = config::check;

// ---------------------------------------------------------------------------------------------------------------
// Initialization

FLM_REGISTER_CONFIG(InitializationConfig, DefaultInitializationConfig, "default");
FLM_REGISTER_CONFIG(InitializationConfig, FillInitializationConfig, "fill");
FLM_REGISTER_CONFIG(InitializationConfig, NormalInitializationConfig, "normal");
FLM_REGISTER_CONFIG(InitializationConfig, UniformInitializationConfig, "uniform");
FLM_REGISTER_CONFIG(InitializationConfig, MambaDtBiasInitializationConfig, "mamba_dt_bias");
FLM_REGISTER_CONFIG(InitializationConfig, MambaAInitializationConfig, "mamba_a");

void FillInitializationConfig::visit(Visitor& v) {
  v(value, "value", "Constant every element is set to.", Hint::optional, check::ge(0.0));
}

void NormalInitializationConfig::visit(Visitor& v) {
  v(standard_deviation, "std", "Standard deviation of the normal distribution.", Hint::optional, check::ge(0.0));
  v(mean, "mean", "Mean of the normal distribution.", Hint::optional);
  v(min, "min", "Lower clamp applied after sampling, if set.", Hint::optional);
  v(max, "max", "Upper clamp applied after sampling, if set.", Hint::optional);
}

void NormalInitializationConfig::check() const {
  if (min && max && *min > *max) fail("max", fmt::format("must be at least min ({}), got {}", *min, *max));
}

void UniformInitializationConfig::visit(Visitor& v) {
  v(scale, "scale", "Half-width of the interval: values are drawn from [mean - scale, mean + scale]. Required.",
    Hint::core, check::ge(0.0));
  v(mean, "mean", "Centre of the interval.", Hint::optional);
}

void UniformInitializationConfig::check() const {
  if (!scale) fail("scale", "is required for a uniform initialization");
}

void MambaDtBiasInitializationConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "Mamba initializations");
  v(min_step_size, "min_step_size", "Smallest discretization step sampled.", Hint::core, check::gt(0.0));
  v(max_step_size, "max_step_size", "Largest discretization step sampled.", Hint::core, check::gt(0.0));
  v(floor, "floor", "Lower bound on the sampled step before the inverse softplus.", Hint::core, check::gt(0.0));
}

void MambaDtBiasInitializationConfig::check() const {
  if (max_step_size < min_step_size)
    fail("max_step_size", fmt::format("must be at least min_step_size ({}), got {}", min_step_size, max_step_size));
}

void MambaAInitializationConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "Mamba initializations");
  v(state_size, "state_size", "SSM state size, repeated here for the initializer. Required.", Hint::core,
    check::gt(0));
  v(d_inner, "d_inner", "SSM inner dimension, repeated here for the initializer. Required.", Hint::core, check::gt(0));
}

void MambaAInitializationConfig::check() const {
  if (!state_size) fail("state_size", "is required for a mamba_a initialization");
  if (!d_inner) fail("d_inner", "is required for a mamba_a initialization");
}

// ---------------------------------------------------------------------------------------------------------------
// Parameters

void ParameterConfig::visit(Visitor& v) {
  v(initialization, "initialization", "How to initialize the parameter; `default` keeps the layer's choice.",
    Hint::feature);
  v(lr_scale, "lr_scale", "Learning-rate multiplier for this parameter, on top of the scales of the enclosing layers.",
    Hint::feature, check::ge(0.0));
  v(weight_decay, "weight_decay",
    "Overrides the optimizer's weight decay for this parameter: true or false to turn it on or off, or a value.",
    Hint::feature, [](const WeightDecayOverride& decay) -> std::optional<std::string> {
      if (decay.value && *decay.value < 0) return fmt::format("must be at least 0, got {}", *decay.value);
      return std::nullopt;
    });
}

void OptionalParameterConfig::visit(Visitor& v) {
  ParameterConfig::visit(v);
  static constexpr std::string_view description = "Whether the layer has this parameter; unset keeps the layer's default.";
  if (unsupported_when_enabled.empty())
    v(enabled, "enabled", description, Hint::architecture);
  else
    v(enabled, "enabled", description, Hint::architecture,
      config::not_supported_yet(std::optional<bool>(false), unsupported_when_enabled));
}

// ---------------------------------------------------------------------------------------------------------------
// Linear layers

void LinearConfig::visit(Visitor& v) {
  v(weight, "weight", "Settings of the weight.", Hint::architecture);
  v(lr_scale, "lr_scale", "Learning-rate multiplier for the layer, combined with its parameters' own scales.",
    Hint::feature, check::ge(0.0));
  v(apply_peft, "apply_peft",
    "Whether PEFT (LoRA) wraps this layer; unset keeps the layer's default. Without PEFT the layer may be frozen.",
    Hint::feature);
}

void AffineLinearConfig::visit(Visitor& v) {
  LinearConfig::visit(v);
  v(bias, "bias", "Settings of the bias; `enabled` unset follows the owner's `add_linear_biases`.",
    Hint::architecture);
}

void AffineLinearConfig::resolve_bias(bool enabled) {
  if (!bias.enabled) bias.enabled = enabled;
}

void CausalConv1dConfig::visit(Visitor& v) {
  v(weight, "weight", "Settings of the convolution kernel.", Hint::architecture);
  v(lr_scale, "lr_scale", "Learning-rate multiplier for the layer.", Hint::feature, check::ge(0.0));
  v(bias, "bias", "Settings of the bias.", Hint::architecture);
  v(kernel_size, "kernel_size", "Width of the convolution kernel.", Hint::architecture, check::gt(0));
  v(activation, "activation", "Activation after the convolution; unset keeps the mixer's default.",
    Hint::architecture);
}

// ---------------------------------------------------------------------------------------------------------------
// Normalization

FLM_REGISTER_CONFIG(NormalizationConfig, NoNormalizationConfig, "none");
FLM_REGISTER_CONFIG(NormalizationConfig, LayerNormalizationConfig, "layer_norm");
FLM_REGISTER_CONFIG(NormalizationConfig, RmsNormalizationConfig, "rms_norm");
FLM_REGISTER_CONFIG(NormalizationConfig, FixedRmsNormalizationConfig, "fixed_rms_norm");
FLM_REGISTER_CONFIG(NormalizationConfig, GatedRmsNormalizationConfig, "gated_rms_norm");

void NormalizationConfig::visit(Visitor& v) {
  v(lr_scale, "lr_scale", "Learning-rate multiplier for the layer.", Hint::feature, check::ge(0.0));
}

void LayerNormalizationBaseConfig::visit(Visitor& v) {
  NormalizationConfig::visit(v);
  v(weight, "weight", "Settings of the scale weight.", Hint::architecture);
  v(epsilon, "epsilon", "Added to the variance before the square root.", Hint::architecture, check::gt(0.0));
  v(zero_centered, "zero_centered",
    "Store the weight as w - 1 (applied as 1 + w), which keeps precision when the weight stays close to one.",
    Hint::architecture);
  v(implementation, "implementation", "Kernel choice; `auto` picks the best one available on the device.",
    Hint::performance);
}

void LayerNormalizationConfig::visit(Visitor& v) {
  LayerNormalizationBaseConfig::visit(v);
  v(bias, "bias", "Settings of the bias.", Hint::architecture);
}

void FixedRmsNormalizationConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "RMS norm without weight");
  NormalizationConfig::visit(v);
  v(epsilon, "epsilon", "Added to the mean square before the square root.", Hint::architecture, check::gt(0.0));
}

void GatedRmsNormalizationConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "gated RMS norm");
  RmsNormalizationConfig::visit(v);
  v(activation, "activation", "Activation applied to the gate input.", Hint::core);
}

bool operator==(const config::Dynamic<NormalizationConfig>& a, const config::Dynamic<NormalizationConfig>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a.has_value()) return true;
  return a.type() == b.type() && a->to_yaml_string() == b->to_yaml_string();
}

}  // namespace fast_llm::layers

namespace fast_llm::config {

void Codec<layers::WeightDecayOverride>::read(layers::WeightDecayOverride& value, const YAML::Node& node,
                                              const std::string& path) {
  const std::string& text = detail::require_scalar(node, path, "true, false or a number");
  static constexpr std::array<std::string_view, 12> flags{"true", "True", "TRUE", "yes", "Yes", "on",
                                                         "false", "False", "FALSE", "no", "No", "off"};
  if (std::find(flags.begin(), flags.end(), text) != flags.end()) {
    value = {.enabled = detail::parse_bool(node, path), .value = std::nullopt};
    return;
  }
  value = {.enabled = true, .value = detail::parse_double(node, path)};
}

YAML::Node Codec<layers::WeightDecayOverride>::write(const layers::WeightDecayOverride& value, const WriteOptions&) {
  if (value.value) return detail::write_double(*value.value);
  return YAML::Node(value.enabled);
}

}  // namespace fast_llm::config
