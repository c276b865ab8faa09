// Field lists of the SSM mixer configs (accepted, not built yet).
#include <fmt/format.h>

#include "fast_llm/layers/common/unsupported_type.h"
#include "fast_llm/layers/ssm/config.h"

namespace fast_llm::layers {

using config::Hint;
using config::Visitor;
namespace check = config::check;

FLM_REGISTER_CONFIG(MixerConfig, MambaConfig, "mamba");
FLM_REGISTER_CONFIG_ALIAS(MixerConfig, "mamba_2", "mamba");
FLM_REGISTER_CONFIG(MixerConfig, GatedDeltaNetConfig, "gdn");
FLM_REGISTER_CONFIG(MixerConfig, KimiDeltaAttentionConfig, "kda");

void MambaConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "Mamba mixers");
  MixerConfig::visit(v);
  v(z_layer, "z_layer", "Settings of the z (gate) projection.", Hint::architecture);
  v(x_layer, "x_layer", "Settings of the x projection.", Hint::architecture);
  v(b_layer, "b_layer", "Settings of the B projection.", Hint::architecture);
  v(c_layer, "c_layer", "Settings of the C projection.", Hint::architecture);
  v(convolution_layer, "convolution_layer", "Settings of the causal convolution.", Hint::architecture);
  v(d_weight, "d_weight", "Settings of the D skip weight.", Hint::architecture);
  v(output_layer, "output_layer", "Settings of the output projection.", Hint::architecture);
  v(dt_layer, "dt_layer", "Settings of the time-step projection.", Hint::architecture);
  v(a_log_weight, "a_log_weight", "Settings of the log decay weight.", Hint::architecture);
  v(dt_input_layer, "dt_input_layer", "Settings of the time-step input projection.", Hint::architecture);
  v(state_size, "state_size", "SSM state size.", Hint::architecture, check::gt(0));
  v(d_inner, "d_inner", "Inner dimension.", Hint::core);
  v(d_xb, "d_xb", "Dimension of the x and B projections.", Hint::architecture);
  v(dt_rank, "dt_rank", "Rank of the time-step projection.", Hint::architecture);
  v(add_linear_biases, "add_linear_biases", "Give the projections a bias, unless a layer says otherwise.",
    Hint::architecture);
  v(repeat_kv_before_conv, "repeat_kv_before_conv", "Repeat x and B before the convolution rather than after.",
    Hint::architecture);
  v(cross_document_attention, "cross_document_attention", "Let the state carry across document boundaries.",
    Hint::feature);
}

void GatedDeltaNetConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "Gated DeltaNet mixers");
  MixerConfig::visit(v);
  v(normalization, "normalization", "Gated RMS norm of the output.", Hint::architecture);
  v(qkv_projection_layer, "qkv_projection_layer", "Projection to queries, keys, values and gates.", Hint::architecture);
  v(ba_projection_layer, "ba_projection_layer", "Projection to the decay and beta terms.", Hint::architecture);
  v(convolution_layer, "convolution_layer", "Causal convolution over the query, key and value streams.",
    Hint::architecture);
  v(output_layer, "output_layer", "Output projection.", Hint::architecture);
  v(dt_bias_weight, "dt_bias_weight", "Settings of the time-step bias.", Hint::architecture);
  v(a_log_weight, "a_log_weight", "Settings of the log decay rates.", Hint::architecture);
  v(value_heads, "value_heads", "Number of value heads.", Hint::architecture, check::gt(0));
  v(key_heads, "key_heads", "Number of key heads; must divide value_heads.", Hint::architecture, check::gt(0));
  v(key_head_dim, "key_head_dim", "Channels per key head.", Hint::architecture, check::gt(0));
  v(value_head_dim, "value_head_dim", "Channels per value head.", Hint::architecture, check::gt(0));
}

void GatedDeltaNetConfig::check() const {
  if (value_heads % key_heads != 0)
    fail("key_heads", fmt::format("must divide value_heads ({}), got {}", value_heads, key_heads));
}

void KimiDeltaAttentionConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "Kimi Delta Attention mixers");
  MixerConfig::visit(v);
  v(normalization, "normalization", "Gated RMS norm of the output.", Hint::architecture);
  v(q_projection_layer, "q_projection_layer", "Query projection.", Hint::architecture);
  v(k_projection_layer, "k_projection_layer", "Key projection.", Hint::architecture);
  v(v_projection_layer, "v_projection_layer", "Value projection.", Hint::architecture);
  v(f_a_projection_layer, "f_a_projection_layer", "First projection of the decay gate.", Hint::architecture);
  v(f_b_projection_layer, "f_b_projection_layer", "Second projection of the decay gate.", Hint::architecture);
  v(g_a_projection_layer, "g_a_projection_layer", "First projection of the output gate.", Hint::architecture);
  v(g_b_projection_layer, "g_b_projection_layer", "Second projection of the output gate.", Hint::architecture);
  v(beta_projection_layer, "beta_projection_layer", "Projection to the beta gate.", Hint::architecture);
  v(output_projection_layer, "output_projection_layer", "Output projection.", Hint::architecture);
  v(convolution_layer, "convolution_layer", "Causal convolution on each of the query, key and value streams.",
    Hint::architecture);
  v(dt_bias_weight, "dt_bias_weight", "Settings of the decay-gate bias.", Hint::architecture);
  v(a_log_weight, "a_log_weight", "Settings of the log decay rates.", Hint::architecture);
  v(heads, "heads", "Number of heads.", Hint::architecture, check::gt(0));
  v(head_dim, "head_dim", "Channels per head.", Hint::architecture, check::gt(0));
}

}  // namespace fast_llm::layers
