// Field lists and specs of the normalization configs.
#include <fmt/format.h>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/common/normalization_config.h"
#include "fast_llm/layers/common/unsupported_type.h"

namespace fast_llm::layers {

using config::Hint;
using config::Visitor;
namespace check = config::check;

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

NormalizationSpec LayerNormalizationBaseConfig::weighted_spec(NormalizationSpec::Kernel kernel) const {
  return {.kernel = kernel, .epsilon = epsilon, .zero_centered = zero_centered, .weight = &weight, .bias = nullptr};
}

void LayerNormalizationConfig::visit(Visitor& v) {
  LayerNormalizationBaseConfig::visit(v);
  v(bias, "bias", "Settings of the bias.", Hint::architecture);
}

NormalizationSpec LayerNormalizationConfig::spec() const {
  NormalizationSpec result = weighted_spec(NormalizationSpec::Kernel::layer_norm);
  result.bias = &bias;
  return result;
}

NormalizationSpec RmsNormalizationConfig::spec() const { return weighted_spec(NormalizationSpec::Kernel::rms_norm); }

void FixedRmsNormalizationConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "RMS norm without weight");
  NormalizationConfig::visit(v);
  v(epsilon, "epsilon", "Added to the mean square before the square root.", Hint::architecture, check::gt(0.0));
}

NormalizationSpec FixedRmsNormalizationConfig::spec() const {
  return {.kernel = NormalizationSpec::Kernel::rms_norm, .epsilon = epsilon, .zero_centered = false, .weight = nullptr,
          .bias = nullptr};
}

void GatedRmsNormalizationConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "gated RMS norm");
  RmsNormalizationConfig::visit(v);
  v(activation, "activation", "Activation applied to the gate input.", Hint::core);
}

NormalizationSpec GatedRmsNormalizationConfig::spec() const {
  throw NotSupportedError("layers", fmt::format("{}: gated_rms_norm is only for SSM mixers", path()));
}

bool operator==(const config::Dynamic<NormalizationConfig>& a, const config::Dynamic<NormalizationConfig>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a.has_value()) return true;
  return a.type() == b.type() && a->to_yaml_string() == b->to_yaml_string();
}

}  // namespace fast_llm::layers
