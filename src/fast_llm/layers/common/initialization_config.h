// Parameter initialization (the `initialization:` of a parameter), as Fast-LLM's InitializationConfig. The default
// type, `default`, keeps the layer's own choice: N(0, hidden_size^-0.5) for weights, zeros for biases, ones for
// normalization weights (zeros when zero-centred).
#pragma once

#include <optional>

#include "fast_llm/config/config.h"

namespace fast_llm::layers {

struct InitializationConfig : config::Config {
  static constexpr std::string_view kDefaultType = "default";
  void visit(config::Visitor& v) override {}
};

// Keeps the initialization the layer chooses for this parameter.
struct DefaultInitializationConfig : InitializationConfig {};

// Every element set to `value`.
struct FillInitializationConfig : InitializationConfig {
  double value = 1.0;
  void visit(config::Visitor& v) override;
};

// normal(mean, std), clamped to [min, max] where given.
struct NormalInitializationConfig : InitializationConfig {
  double standard_deviation = 1.0;  // YAML `std`
  double mean = 0.0;
  std::optional<double> min;
  std::optional<double> max;
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

// uniform(mean - scale, mean + scale).
struct UniformInitializationConfig : InitializationConfig {
  std::optional<double> scale;  // required: Fast-LLM gives it no default
  double mean = 0.0;
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

// Mamba's time-step bias initialization (Mamba mixers only).
struct MambaDtBiasInitializationConfig : InitializationConfig {
  std::string type = "mamba_dt_bias";
  double min_step_size = 0.001;
  double max_step_size = 0.1;
  double floor = 1e-4;
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

// Mamba's A (decay) initialization (Mamba mixers only).
struct MambaAInitializationConfig : InitializationConfig {
  std::string type = "mamba_a";
  std::optional<int> state_size;  // required
  std::optional<int> d_inner;     // required
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

}  // namespace fast_llm::layers
