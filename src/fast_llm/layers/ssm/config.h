// State-space and linear-attention mixers (`mixer: {type: mamba | gdn | kda}`), as Fast-LLM's SSM configs. They are
// accepted so hybrid configs load and validate, but have no behaviour yet: each reports its `type` as not supported.
#pragma once

#include <string>

#include "fast_llm/config/config.h"
#include "fast_llm/layers/block/mixer_config.h"
#include "fast_llm/layers/common/linear_config.h"
#include "fast_llm/layers/common/normalization_config.h"
#include "fast_llm/layers/common/parameter_config.h"

namespace fast_llm::layers {

// Mamba (Mamba-2 style, with separate x/B/C/z/dt projections). `mamba_2` is read as an old name of `mamba`.
struct MambaConfig : MixerConfig {
  std::string type = "mamba";
  AffineLinearConfig z_layer;
  AffineLinearConfig x_layer;
  AffineLinearConfig b_layer;
  AffineLinearConfig c_layer;
  CausalConv1dConfig convolution_layer;
  ParameterConfig d_weight;
  AffineLinearConfig output_layer;
  AffineLinearConfig dt_layer;
  ParameterConfig a_log_weight;
  AffineLinearConfig dt_input_layer;
  int state_size = 16;
  int d_inner = 2048;
  int d_xb = 1024;
  int dt_rank = 64;
  bool add_linear_biases = true;
  bool repeat_kv_before_conv = true;
  bool cross_document_attention = true;
  void visit(config::Visitor& v) override;
};

// Gated DeltaNet (Qwen3-Next style linear attention).
struct GatedDeltaNetConfig : MixerConfig {
  std::string type = "gdn";
  GatedRmsNormalizationConfig normalization;
  AffineLinearConfig qkv_projection_layer;
  AffineLinearConfig ba_projection_layer;
  CausalConv1dConfig convolution_layer;
  AffineLinearConfig output_layer;
  ParameterConfig dt_bias_weight;
  ParameterConfig a_log_weight;
  int value_heads = 16;
  int key_heads = 8;
  int key_head_dim = 64;
  int value_head_dim = 64;
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

// Kimi Delta Attention.
struct KimiDeltaAttentionConfig : MixerConfig {
  std::string type = "kda";
  GatedRmsNormalizationConfig normalization;
  AffineLinearConfig q_projection_layer;
  AffineLinearConfig k_projection_layer;
  AffineLinearConfig v_projection_layer;
  AffineLinearConfig f_a_projection_layer;
  AffineLinearConfig f_b_projection_layer;
  AffineLinearConfig g_a_projection_layer;
  AffineLinearConfig g_b_projection_layer;
  AffineLinearConfig beta_projection_layer;
  AffineLinearConfig output_projection_layer;
  CausalConv1dConfig convolution_layer;
  ParameterConfig dt_bias_weight;
  ParameterConfig a_log_weight;
  int heads = 16;
  int head_dim = 64;
  void visit(config::Visitor& v) override;
};

}  // namespace fast_llm::layers
