// Feed-forward half of a decoder block (`mlp:`), selected by `type:` (default `mlp`): the dense MLP, the mixture of
// experts `moe`, and `hybrid_moe` (a dense MLP plus routed experts, outputs summed).
//
// Dense layout (as Fast-LLM): layer_1 is [gate; up] fused, [2 * intermediate_size, hidden] when gated (gate first),
// [intermediate_size, hidden] otherwise; layer_2 is stored transposed, [intermediate_size, hidden].
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "fast_llm/config/config.h"
#include "fast_llm/layers/block_config.h"
#include "fast_llm/layers/common/activation.h"
#include "fast_llm/layers/common/linear_config.h"
#include "fast_llm/layers/common/normalization_config.h"

namespace fast_llm::layers {

// Which MLP activations backward recomputes instead of keeping (less memory, more compute), as Fast-LLM's: `activation`
// the activation output (tokens, intermediate); `activation_and_input` that and the experts' permuted input (MoE only:
// a dense MLP behaves as `activation`); `full` the first projection too (tokens, 2 * intermediate when gated).
enum class MlpRecomputeLevel { none, activation, activation_and_input, full };
// How tokens are assigned to experts: top-k of the router softmax with a load-balancing loss, or Sinkhorn.
enum class RoutingType { aux_loss, sinkhorn };
enum class MoeImplementation { auto_, dropless, looped };

struct MlpBaseConfig : BlockConfig {
  static constexpr std::string_view kDefaultType = "mlp";
  std::optional<config::Dynamic<NormalizationConfig>> pre_norm;
  std::optional<config::Dynamic<NormalizationConfig>> post_norm;
  void visit(config::Visitor& v) override;
};

struct MlpConfig : MlpBaseConfig {
  AffineLinearConfig layer_1;
  AffineLinearConfig layer_2;
  int intermediate_size = 4096;
  bool add_linear_biases = true;
  bool gated = false;
  // Unset: silu when gated, gelu otherwise; resolved in derive(), so always set after validation.
  std::optional<ActivationType> activation;
  MlpRecomputeLevel recompute_level = MlpRecomputeLevel::none;
  void visit(config::Visitor& v) override;

 protected:
  void derive() override;
};

struct MoeMlpConfig : MlpConfig {
  LinearConfig router;
  std::optional<config::Dynamic<NormalizationConfig>> router_normalization;
  OptionalParameterConfig router_scale;
  double router_input_scale = 1.0;
  OptionalParameterConfig router_per_expert_scale;
  int experts = 2;
  int shared_experts = 0;
  int experts_per_token = 1;
  RoutingType routing = RoutingType::aux_loss;
  double auxiliary_loss_coefficient = 0.01;
  double z_loss_coefficient = 0.0;
  double jitter_eps = 0.0;
  MoeImplementation implementation = MoeImplementation::auto_;
  bool dropless_dynamic_shape = false;
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

struct HybridMoeMlpConfig : MlpBaseConfig {
  MlpConfig dense;
  MoeMlpConfig routed;
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

}  // namespace fast_llm::layers

template <>
struct fast_llm::config::EnumNames<fast_llm::layers::MlpRecomputeLevel> {
  using E = fast_llm::layers::MlpRecomputeLevel;
  static constexpr std::array<std::pair<E, std::string_view>, 4> values{{{E::none, "none"},
                                                                          {E::activation, "activation"},
                                                                          {E::activation_and_input, "activation_and_input"},
                                                                          {E::full, "full"}}};
};

template <>
struct fast_llm::config::EnumNames<fast_llm::layers::RoutingType> {
  using E = fast_llm::layers::RoutingType;
  static constexpr std::array<std::pair<E, std::string_view>, 2> values{
      {{E::aux_loss, "aux_loss"}, {E::sinkhorn, "sinkhorn"}}};
};

template <>
struct fast_llm::config::EnumNames<fast_llm::layers::MoeImplementation> {
  using E = fast_llm::layers::MoeImplementation;
  static constexpr std::array<std::pair<E, std::string_view>, 3> values{
      {{E::auto_, "auto"}, {E::dropless, "dropless"}, {E::looped, "looped"}}};
};
