// Linear layers (Fast-LLM's LinearConfig / AffineLinearConfig / CausalConv1dConfig): the weight's settings, the
// optional bias, a layer learning-rate scale and whether PEFT (LoRA) wraps the layer.
//
// Bias default: `bias.enabled` unset means "the owner's `add_linear_biases`"; owners resolve it in derive() for the
// layers they build, so after validation `bias.enabled` holds the value the layer uses.
#pragma once

#include <optional>

#include "fast_llm/config/config.h"
#include "fast_llm/layers/common/activation.h"
#include "fast_llm/layers/common/parameter_config.h"

namespace fast_llm::layers {

// A weight-only linear layer (e.g. the MoE router).
struct LinearConfig : config::Config {
  ParameterConfig weight;
  std::optional<double> lr_scale;
  // Unset: the owner's default (query and value projections are wrapped by LoRA, other layers are not).
  std::optional<bool> apply_peft;
  void visit(config::Visitor& v) override;
};

// A linear layer with an optional bias.
struct AffineLinearConfig : LinearConfig {
  OptionalParameterConfig bias;
  void visit(config::Visitor& v) override;
  // Sets `bias.enabled` to `enabled` unless given.
  void resolve_bias(bool enabled);
};

// A depth-wise causal 1d convolution (SSM mixers only).
struct CausalConv1dConfig : config::Config {
  ParameterConfig weight;
  std::optional<double> lr_scale;
  OptionalParameterConfig bias;
  int kernel_size = 4;
  std::optional<ActivationType> activation;  // unset: the mixer's default
  void visit(config::Visitor& v) override;
};

}  // namespace fast_llm::layers
