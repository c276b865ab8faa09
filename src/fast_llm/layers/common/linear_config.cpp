// Field lists of the linear-layer configs.
#include "fast_llm/layers/common/linear_config.h"

namespace fast_llm::layers {

using config::Hint;
using config::Visitor;
namespace check = config::check;

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

}  // namespace fast_llm::layers
