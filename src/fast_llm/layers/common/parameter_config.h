// Per-parameter settings (Fast-LLM's ParameterConfig / OptionalParameterConfig): initialization, learning-rate scale and
// weight decay; the optional variant adds `enabled` for parameters a layer may or may not have (biases, position
// embeddings, the block output scale).
#pragma once

#include <optional>
#include <string_view>

#include "fast_llm/config/config.h"
#include "fast_llm/layers/common/initialization_config.h"

namespace fast_llm::layers {

// A parameter's `weight_decay`: `true`/`false` turns the optimizer's weight decay on or off for it, a number gives it
// its own decay value.
struct WeightDecayOverride {
  bool enabled = true;
  std::optional<double> value;  // set when given as a number
  bool operator==(const WeightDecayOverride&) const = default;
};

struct ParameterConfig : config::Config {
  config::Dynamic<InitializationConfig> initialization;
  std::optional<double> lr_scale;
  std::optional<WeightDecayOverride> weight_decay;
  void visit(config::Visitor& v) override;
};

struct OptionalParameterConfig : ParameterConfig {
  // Unset means the owning layer's default; owners resolve it in their derive(), so it is set after validation.
  std::optional<bool> enabled;
  // When non-empty, `enabled: true` has no behaviour yet and is reported with this reason. Set by the owner's
  // constructor (e.g. the decoder block's learned output scale).
  std::string_view unsupported_when_enabled;
  void visit(config::Visitor& v) override;
};

}  // namespace fast_llm::layers

namespace fast_llm::config {

template <>
struct Codec<layers::WeightDecayOverride> {
  static constexpr bool holds_configs = false;
  static void read(layers::WeightDecayOverride& value, const YAML::Node& node, const std::string& path);
  static YAML::Node write(const layers::WeightDecayOverride& value, const WriteOptions& options);
};

}  // namespace fast_llm::config
