// Field list of the attention config.
#include <fmt/format.h>

#include "fast_llm/layers/attention/config.h"

namespace fast_llm::layers {

using config::Hint;
using config::Visitor;
namespace check = config::check;

FLM_REGISTER_CONFIG(MixerConfig, AttentionConfig, "attention");

void AttentionConfig::visit(Visitor& v) {
  MixerConfig::visit(v);
  v(query_layer, "query_layer", "Settings of the query projection.", Hint::architecture);
  v(key_layer, "key_layer", "Settings of the key projection; the value projection is built with the same settings.",
    Hint::architecture);
  v(value_layer, "value_layer",
    "Settings of the value projection. As in Fast-LLM, keys and values form one projection that uses key_layer's "
    "settings, so these are not applied.",
    Hint::architecture);
  v(dense_layer, "dense_layer", "Settings of the output projection.", Hint::architecture);
  v(rotary, "rotary", "Rotary position embeddings; `none` by default.", Hint::architecture);
  v(heads, "heads", "Number of query heads.", Hint::architecture, check::gt(0));
  v(head_groups, "head_groups",
    "Number of key/value heads: 1 for multi-query attention, `heads` for multi-head attention, grouped-query "
    "attention in between. Must divide heads.",
    Hint::architecture, check::gt(0));
  v(head_size, "head_size", "Channels per head, for queries, keys and values.", Hint::architecture, check::gt(0));
  v(add_linear_biases, "add_linear_biases", "Give the projections a bias, unless a layer's bias.enabled says otherwise.",
    Hint::architecture);
  v(causal, "causal", "Each token attends only to itself and earlier tokens. Turn off for bidirectional attention.",
    Hint::architecture);
  v(dropout, "dropout", "Dropout probability on the attention probabilities.", Hint::feature,
    check::in_range(0.0, 1.0));
  v(use_flash_attention, "use_flash_attention", "Allow the flash-attention path when the data type permits it.",
    Hint::optional);
  v(window_size, "window_size",
    "Sliding window: each token attends to at most this many tokens, itself included. Not part of the architecture, "
    "so it must be given again when loading a pretrained model.",
    Hint::feature, check::gt(0));
  v(softmax_scale_power, "softmax_scale_power",
    "Attention logits are scaled by head_size ** -softmax_scale_power: 0.5 normally, 1 for muP when head_size grows.",
    Hint::architecture, check::ge(0.0));
  v(implementation, "implementation", "Attention kernel; `auto` picks the best one available on the device.",
    Hint::feature);
  v(query_norm, "query_norm", "Per-head normalization of the queries, before rotary. Unset: none.",
    Hint::architecture);
  v(key_norm, "key_norm", "Per-head normalization of the keys, before rotary. Unset: none.", Hint::architecture);
  v(value_norm, "value_norm", "Per-head normalization of the values. Unset: none.", Hint::architecture,
    config::not_supported_yet(std::optional<config::Dynamic<NormalizationConfig>>(), "value normalization"));
  v(shared_key_value, "shared_key_value", "Use the key projection as the values too.", Hint::architecture,
    config::not_supported_yet(false, "shared key and value projection"));
}

void AttentionConfig::derive() {
  query_layer.resolve_bias(add_linear_biases);
  key_layer.resolve_bias(add_linear_biases);
  dense_layer.resolve_bias(add_linear_biases);
}

void AttentionConfig::check() const {
  if (heads % head_groups != 0) fail("head_groups", fmt::format("must divide heads ({}), got {}", heads, head_groups));
  if (!causal && window_size) fail("window_size", "a sliding window needs causal attention");
  if (implementation == AttentionImplementation::flash && head_size > kFlashMaxHeadSize)
    fail("head_size", fmt::format("must be at most {} with implementation flash, got {}", kFlashMaxHeadSize, head_size));
  if (implementation == AttentionImplementation::sdpa_nested && window_size)
    fail("window_size", "implementation sdpa_nested has no sliding window; use sdpa or sdpa_dense");
}

}  // namespace fast_llm::layers
