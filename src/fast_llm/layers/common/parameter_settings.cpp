#include "fast_llm/layers/common/parameter_settings.h"

#include <fmt/format.h>

#include "fast_llm/core/error.h"

namespace fast_llm::layers {

ParameterSettings parameter_settings(const ParameterConfig& config, const Initialization& default_initialization,
                                     double lr_scale, bool default_weight_decay) {
  ParameterSettings settings{.initialization = default_initialization,
                             .lr_scale = combine_lr_scales(lr_scale, config.lr_scale),
                             .weight_decay = default_weight_decay};
  const auto& initialization = config.initialization;
  if (initialization.has_value()) {
    if (const auto* fill = initialization.as<FillInitializationConfig>()) {
      settings.initialization = Initialization::fill(fill->value);
    } else if (const auto* normal = initialization.as<NormalInitializationConfig>()) {
      settings.initialization = Initialization::normal(normal->standard_deviation, normal->mean);
      if (normal->min) settings.initialization.min = *normal->min;
      if (normal->max) settings.initialization.max = *normal->max;
    } else if (const auto* uniform = initialization.as<UniformInitializationConfig>()) {
      FLM_ASSERT(uniform->scale.has_value(), "uniform initialization without scale passed validation");
      settings.initialization = Initialization::uniform(uniform->mean - *uniform->scale, uniform->mean + *uniform->scale);
    } else if (!initialization.is<DefaultInitializationConfig>()) {
      throw NotSupportedError("layers", fmt::format("{}: initialization type '{}' is only for Mamba mixers",
                                                    config.field_path("initialization"), initialization.type()));
    }
  }
  if (config.weight_decay) {
    if (config.weight_decay->value)
      throw NotSupportedError("layers", fmt::format("{}: a per-parameter weight decay value ({}) is not supported; "
                                                    "use true or false",
                                                    config.field_path("weight_decay"), *config.weight_decay->value));
    settings.weight_decay = config.weight_decay->enabled;
  }
  return settings;
}

}  // namespace fast_llm::layers
