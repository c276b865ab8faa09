// Normalization layers (`normalization:`, `query_norm:`, ...), as Fast-LLM's NormalizationConfig family, selected by
// `type:` (default `layer_norm`): `layer_norm` (weight and bias), `rms_norm` (weight), `fixed_rms_norm` (no weight),
// `gated_rms_norm` (weight and an activation gate, for SSMs) and `none` (identity). Each type says what the
// Normalization module runs for it (`spec()`), so a new type that one of the norm kernels computes is a new config class
// in its own file.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "fast_llm/config/config.h"
#include "fast_llm/layers/common/activation.h"
#include "fast_llm/layers/common/parameter_config.h"

namespace fast_llm::layers {

// Which kernel computes the norm; `auto` lets the kernel registry pick the best one supported on the device.
enum class NormalizationImplementation { auto_, torch, fused, fast, triton };

// What the Normalization module (layers/common/normalization.h) runs for a config: the kernel and its settings, and the
// settings of the learned weight and bias (null: not learned).
struct NormalizationSpec {
  enum class Kernel { none, layer_norm, rms_norm };  // none: the identity
  Kernel kernel = Kernel::none;
  double epsilon = 1e-5;
  bool zero_centered = false;
  const ParameterConfig* weight = nullptr;
  const ParameterConfig* bias = nullptr;
};

struct NormalizationConfig : config::Config {
  static constexpr std::string_view kDefaultType = "layer_norm";
  std::optional<double> lr_scale;
  void visit(config::Visitor& v) override;
  // What the Normalization module runs for this config (pointing into it); NotSupportedError for a type it cannot run.
  virtual NormalizationSpec spec() const = 0;
};

struct NoNormalizationConfig : NormalizationConfig {
  NormalizationSpec spec() const override { return {}; }
};

// Fields shared by layer norm and RMS norm.
struct LayerNormalizationBaseConfig : NormalizationConfig {
  ParameterConfig weight;
  double epsilon = 1e-5;
  bool zero_centered = false;
  NormalizationImplementation implementation = NormalizationImplementation::auto_;
  void visit(config::Visitor& v) override;

 protected:
  // `kernel` with this config's epsilon, zero_centered and weight.
  NormalizationSpec weighted_spec(NormalizationSpec::Kernel kernel) const;
};

struct LayerNormalizationConfig : LayerNormalizationBaseConfig {
  ParameterConfig bias;
  void visit(config::Visitor& v) override;
  NormalizationSpec spec() const override;
};

struct RmsNormalizationConfig : LayerNormalizationBaseConfig {
  NormalizationSpec spec() const override;
};

// RMS norm with no learned weight (Gemma-style value norms).
struct FixedRmsNormalizationConfig : NormalizationConfig {
  std::string type = "fixed_rms_norm";
  double epsilon = 1e-5;
  void visit(config::Visitor& v) override;
  NormalizationSpec spec() const override;
};

// RMS norm multiplied by an activation of a gate input (SSM mixers).
struct GatedRmsNormalizationConfig : RmsNormalizationConfig {
  std::string type = "gated_rms_norm";
  ActivationType activation = ActivationType::silu;
  void visit(config::Visitor& v) override;
  // Refused: the gate is a second input, which only SSM mixers have.
  NormalizationSpec spec() const override;
};

// Deep equality (same type, same values), so optional normalization fields can carry `not_supported_yet` markers.
bool operator==(const config::Dynamic<NormalizationConfig>& a, const config::Dynamic<NormalizationConfig>& b);

}  // namespace fast_llm::layers

template <>
struct fast_llm::config::EnumNames<fast_llm::layers::NormalizationImplementation> {
  using E = fast_llm::layers::NormalizationImplementation;
  static constexpr std::array<std::pair<E, std::string_view>, 5> values{
      {{E::auto_, "auto"}, {E::torch, "torch"}, {E::fused, "fused"}, {E::fast, "fast"}, {E::triton, "triton"}}};
};
