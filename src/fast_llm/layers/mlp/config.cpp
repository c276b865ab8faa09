// Field lists of the MLP configs.
#include <fmt/format.h>

#include "fast_llm/layers/mlp/config.h"

namespace fast_llm::layers {

using config::Hint;
using config::Visitor;
namespace check = config::check;

FLM_REGISTER_CONFIG(MlpBaseConfig, MlpConfig, "mlp");
FLM_REGISTER_CONFIG(MlpBaseConfig, MoeMlpConfig, "moe");
FLM_REGISTER_CONFIG(MlpBaseConfig, HybridMoeMlpConfig, "hybrid_moe");

void MlpBaseConfig::visit(Visitor& v) {
  BlockConfig::visit(v);
  v(pre_norm, "pre_norm", "Normalization of the MLP input, inside the MLP. Unset: none.", Hint::architecture,
    config::not_supported_yet(std::optional<config::Dynamic<NormalizationConfig>>(), "normalization inside the MLP"));
  v(post_norm, "post_norm", "Normalization of the MLP output, inside the MLP. Unset: none.", Hint::architecture,
    config::not_supported_yet(std::optional<config::Dynamic<NormalizationConfig>>(), "normalization inside the MLP"));
}

void MlpConfig::visit(Visitor& v) {
  MlpBaseConfig::visit(v);
  v(layer_1, "layer_1", "Settings of the first projection (gate and up, fused, when gated).", Hint::architecture);
  v(layer_2, "layer_2", "Settings of the second (down) projection.", Hint::architecture);
  v(intermediate_size, "intermediate_size", "Width of the MLP's hidden layer.", Hint::architecture, check::gt(0));
  v(add_linear_biases, "add_linear_biases", "Give both projections a bias, unless a layer's bias.enabled says otherwise.",
    Hint::architecture);
  v(gated, "gated", "Gated MLP: act(gate) * up instead of act(x).", Hint::architecture);
  v(activation, "activation", "Activation of the hidden layer; unset gives silu when gated and gelu otherwise.",
    Hint::architecture);
  v(recompute_level, "recompute_level",
    "What backward recomputes instead of keeping from forward, trading compute for memory: `activation` (and "
    "`activation_and_input`, the same for a dense MLP) the activation output, `full` also the first projection.",
    Hint::performance);
}

void MlpConfig::derive() {
  if (!activation) activation = gated ? ActivationType::silu : ActivationType::gelu;
  layer_1.resolve_bias(add_linear_biases);
  layer_2.resolve_bias(add_linear_biases);
}

void MoeMlpConfig::visit(Visitor& v) {
  MlpConfig::visit(v);
  v(router, "router", "Settings of the router projection (no bias).", Hint::architecture);
  v(router_normalization, "router_normalization",
    "Normalization of the router input, separate from pre_norm (which feeds the experts). Unset: none.",
    Hint::architecture,
    config::not_supported_yet(std::optional<config::Dynamic<NormalizationConfig>>(), "router input normalization"));
  v(router_scale, "router_scale",
    "Learned per-channel scale of the router input, after router_normalization (not supported: enabled is refused).",
    Hint::architecture);
  v(router_input_scale, "router_input_scale",
    "Constant factor on the router input after router_normalization and router_scale (hidden_size ** -0.5 for Gemma).",
    Hint::architecture);
  v(router_per_expert_scale, "router_per_expert_scale",
    "Learned per-expert factor on the routing scores after top-k selection (not supported: enabled is refused).",
    Hint::architecture);
  v(experts, "experts", "Number of experts, shared ones included.", Hint::architecture, check::gt(1));
  v(shared_experts, "shared_experts", "Experts every token uses, in addition to its routed ones.", Hint::architecture,
    check::ge(0));
  v(experts_per_token, "experts_per_token", "Routed experts each token uses.", Hint::architecture, check::gt(0));
  v(routing, "routing", "How tokens are assigned to experts.", Hint::architecture);
  v(auxiliary_loss_coefficient, "auxiliary_loss_coefficient", "Weight of the load-balancing loss (aux_loss routing).",
    Hint::feature, check::ge(0.0));
  v(z_loss_coefficient, "z_loss_coefficient", "Weight of the router z-loss, which keeps router logits small.",
    Hint::feature, check::ge(0.0));
  v(jitter_eps, "jitter_eps", "Training noise on router logits: multiplied by uniform(1 - eps, 1 + eps).",
    Hint::feature, check::ge(0.0));
  v(implementation, "implementation",
    "Expert computation, accepted for Fast-LLM compatibility: auto, dropless and looped all run the one dropless path "
    "(tokens permuted into expert order, one gemm per expert with tokens).",
    Hint::expert);
  v(dropless_dynamic_shape, "dropless_dynamic_shape",
    "Accepted for Fast-LLM compatibility: the buffers are always sized to the actual routing (tokens x slots rows), "
    "with one small device-to-host copy of the expert offsets per layer and micro-batch.",
    Hint::expert);
}

void MoeMlpConfig::check() const {
  if (shared_experts > experts)
    fail("shared_experts", fmt::format("must be at most experts ({}), got {}", experts, shared_experts));
  if (shared_experts + experts_per_token > experts)
    fail("experts_per_token", fmt::format("shared_experts + experts_per_token ({}) must be at most experts ({})",
                                          shared_experts + experts_per_token, experts));
}

void HybridMoeMlpConfig::visit(Visitor& v) {
  MlpBaseConfig::visit(v);
  v(dense, "dense", "The always-active dense MLP.", Hint::architecture);
  v(routed, "routed", "The routed experts.", Hint::architecture);
}

void HybridMoeMlpConfig::check() const {
  if (routed.shared_experts != 0)
    fail("routed.shared_experts",
         fmt::format("must be 0 (the dense MLP plays that part), got {}", routed.shared_experts));
  if (dense.gated != routed.gated) fail("routed.gated", "must be the same as dense.gated");
  if (dense.activation != routed.activation) fail("routed.activation", "must be the same as dense.activation");
}

}  // namespace fast_llm::layers
