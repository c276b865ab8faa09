// Op: attention_decode. One decoding step of attention against a key/value cache: each sequence b of the batch brings
// one new query (heads), key and value (head_groups); the new key and value are stored in the cache at position
// lengths[b] (the number of tokens cached before this step), and the query attends to the cached keys 0..lengths[b]
// (the new one included), or to the last `window_size` of them when a window is set (0 <= lengths[b] - j < window).
//   scores_j = softmax_scale * q . k_j,  p = softmax(scores over allowed j),  out = sum_j p_j v_j
// Grouped-query attention: head h reads key/value group h / (heads / head_groups). The cache of one layer is
// (batch, capacity, head_groups, head_size); lengths[b] < capacity is the caller's to guarantee (the GPU variants
// trust it, the CPU reference checks it). Prefill (many queries per sequence) goes through attention_forward; this op
// is what makes each further token cost O(cached length) rather than a forward over the whole sequence.
// Forward only: generation has no backward.
#pragma once

#include <optional>

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

struct AttentionDecodeArgs {
  const Tensor& query;  // (batch, heads, head_size)
  const Tensor& key;    // (batch, head_groups, head_size): the new token's key, stored into key_cache
  const Tensor& value;  // (batch, head_groups, head_size): the new token's value, stored into value_cache
  Tensor& key_cache;    // (batch, capacity, head_groups, head_size), contiguous; row lengths[b] of sequence b written
  Tensor& value_cache;  // (batch, capacity, head_groups, head_size), contiguous
  const Tensor& lengths;  // (batch) int32 on the same device: tokens cached per sequence before this step
  Tensor& output;         // (batch, heads, head_size)
  double softmax_scale = 1.0;
  std::optional<int64_t> window_size = std::nullopt;
  Stream stream = {};
};

struct AttentionDecode {
  static constexpr std::string_view name = "attention_decode";
  using Args = AttentionDecodeArgs;
};

// The contract above, checked once by the entry function before dispatch: throws `[attention_decode] ...`.
void check_attention_decode(const AttentionDecodeArgs& args);

inline void attention_decode(const AttentionDecodeArgs& args) {
  check_attention_decode(args);
  dispatch<AttentionDecode>(args, args.query.device());
}

}  // namespace fast_llm::kernels
