// Field lists of the parameter configs, and the YAML form of a weight-decay override.
#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "fast_llm/layers/common/parameter_config.h"

namespace fast_llm::layers {

using config::Hint;
using config::Visitor;
namespace check = config::check;

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
