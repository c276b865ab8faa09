// Fast-LLM's AttentionConfig (`mixer: {type: attention}`, the default mixer): multi-head / grouped-query / multi-query
// attention, optional sliding window, rotary, per-head query/key norms.
//
// Layout (as Fast-LLM): the query projection is [heads * head_size, hidden]; keys and values are one projection
// [2 * head_groups * head_size, hidden] built from `key_layer`'s settings; the dense projection maps back to hidden.
#pragma once

#include <array>
#include <optional>
#include <string_view>
#include <utility>

#include "fast_llm/config/config.h"
#include "fast_llm/layers/attention/rotary_config.h"
#include "fast_llm/layers/block/mixer_config.h"
#include "fast_llm/layers/common/linear_config.h"
#include "fast_llm/layers/common/normalization_config.h"

namespace fast_llm::layers {

// Which attention kernel to use; `auto` lets the kernel registry choose. The other names are Fast-LLM's PyTorch
// paths (flash-attention, the SDPA variants, a plain fallback), mapped to our kernels by the registry.
enum class AttentionImplementation { auto_, flash, sdpa, sdpa_nested, sdpa_dense, backup };

struct AttentionConfig : MixerConfig {
  AffineLinearConfig query_layer;
  AffineLinearConfig key_layer;
  AffineLinearConfig value_layer;
  AffineLinearConfig dense_layer;
  config::Dynamic<RotaryConfig> rotary;
  int heads = 8;
  int head_groups = 1;
  int head_size = 128;
  bool add_linear_biases = true;
  bool causal = true;
  double dropout = 0.0;
  bool use_flash_attention = true;
  std::optional<int> window_size;
  double softmax_scale_power = 0.5;
  AttentionImplementation implementation = AttentionImplementation::auto_;
  std::optional<config::Dynamic<NormalizationConfig>> query_norm;
  std::optional<config::Dynamic<NormalizationConfig>> key_norm;
  std::optional<config::Dynamic<NormalizationConfig>> value_norm;
  bool shared_key_value = false;

  void visit(config::Visitor& v) override;
  // Largest head size flash-attention handles.
  static constexpr int kFlashMaxHeadSize = 256;

 protected:
  void derive() override;
  void check() const override;
};

}  // namespace fast_llm::layers

template <>
struct fast_llm::config::EnumNames<fast_llm::layers::AttentionImplementation> {
  using E = fast_llm::layers::AttentionImplementation;
  static constexpr std::array<std::pair<E, std::string_view>, 6> values{{{E::auto_, "auto"},
                                                                          {E::flash, "flash"},
                                                                          {E::sdpa, "sdpa"},
                                                                          {E::sdpa_nested, "sdpa_nested"},
                                                                          {E::sdpa_dense, "sdpa_dense"},
                                                                          {E::backup, "backup"}}};
};
