// From a parameter's config (`initialization`, `lr_scale`, `weight_decay`) and the layer's defaults to what the layer
// declares (layers::Initialization, lr_scale, weight_decay).
//
// Fast-LLM's rules: every weight defaults to N(0, hidden_size^-0.5), biases to zeros, normalization weights to ones
// (zeros when zero-centred); norms and biases have no weight decay; learning-rate scales multiply down the config tree
// (model -> block -> layer -> parameter), an unset scale counting as 1.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

#include "fast_llm/layers/common/parameter_config.h"
#include "fast_llm/layers/parameter.h"

namespace fast_llm::layers {

struct ParameterSettings {
  Initialization initialization;
  double lr_scale = 1.0;
  bool weight_decay = true;
};

// `scale` times the local setting (unset counts as 1).
inline double combine_lr_scales(double scale, const std::optional<double>& local) { return scale * local.value_or(1.0); }

// The settings of a parameter: `default_initialization` unless the config names another one, `lr_scale` times the
// parameter's own scale, `default_weight_decay` unless the config turns it on or off. A weight-decay value (rather than
// true/false) and the Mamba-only initializations are refused with errors naming the config path.
ParameterSettings parameter_settings(const ParameterConfig& config, const Initialization& default_initialization,
                                     double lr_scale, bool default_weight_decay = true);

// Fast-LLM's defaults.
inline Initialization default_weight_initialization(int64_t hidden_size) {
  return Initialization::normal(1.0 / std::sqrt(double(hidden_size)));
}
inline Initialization default_bias_initialization() { return Initialization::fill(0.0); }

}  // namespace fast_llm::layers
