// Ops: attention_forward / attention_backward. Scaled dot-product attention over packed variable-length documents:
// a query attends only to keys of its own document (cu_seqlens), causally if `causal`, and only to the last
// `window_size` positions (0 <= i - j < window_size, so never a later key, causal or not: Fast-LLM's flash-attn window
// (window_size - 1, 0)) when a window is set. Grouped-query attention: head h uses key/value group
// h / (heads / head_groups); K and V are never repeated in memory.
//   scores = softmax_scale * q . k,  p = softmax(scores over allowed keys),  out = p @ v
// Forward saves logsumexp of the scaled scores per (head, token) in fp32 (the CPU reference also takes fp64, for exact
// fp64 tests); backward recomputes p from it.
// Gradients of q, k, v are written (=). A query row with no allowed key (cannot happen causally) outputs zeros.
// A query range inside a longer key range (a piece of a sequence against the keys of the pieces before it and its
// own, or of the whole sequence: micro_batch_splits, sequence_data_parallel): key and value hold key_tokens >=
// query_offset + query_tokens rows, query row i sits at key row query_offset + i, and cu_seqlens, the causal mask and
// the window are in key rows (so by position in the sequence). Every key row gets its gradient (0 where no query of
// the range sees it). query_offset 0 with as many keys as queries is the plain case.
// Backward with rotary tables: q and k were rotated by rotary_apply with these tables before the forward (key row j
// by row j of the tables, query row i by row query_offset + i), and grad_query / grad_key are returned for the
// tensors before the rotation (rotary_apply's inverse of the gradients).
// A variant may fold that rotation into its own stores, saving a pass over the gradient (the CUDA tile variants
// into their dQ cast, "wgmma" into its dK store too); what it does not fold goes through
// unrotate_attention_gradients at the end.
#pragma once

#include <optional>

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

struct AttentionForwardArgs {
  const Tensor& query;       // (query_tokens, heads, head_size)
  const Tensor& key;         // (key_tokens, head_groups, head_size)
  const Tensor& value;       // (key_tokens, head_groups, head_size)
  const Tensor& cu_seqlens;  // (documents + 1) int32 on the same device: document d is key rows [cu[d], cu[d+1])
  int64_t max_seqlen = 0;    // longest document (lets GPU kernels size their grids without reading cu_seqlens)
  Tensor& output;            // (query_tokens, heads, head_size)
  Tensor& logsumexp;         // (heads, query_tokens) fp32 (fp64 too on the CPU reference)
  double softmax_scale = 1.0;
  bool causal = true;
  std::optional<int64_t> window_size = std::nullopt;
  int64_t query_offset = 0;  // key row of query row 0
  Stream stream = {};
};

struct AttentionBackwardArgs {
  const Tensor& grad_output;  // (query_tokens, heads, head_size)
  const Tensor& query;
  const Tensor& key;
  const Tensor& value;
  const Tensor& output;
  const Tensor& logsumexp;  // (heads, query_tokens) fp32
  const Tensor& cu_seqlens;
  int64_t max_seqlen = 0;
  Tensor& grad_query;  // (query_tokens, heads, head_size) =
  Tensor& grad_key;    // (key_tokens, head_groups, head_size) =
  Tensor& grad_value;  // (key_tokens, head_groups, head_size) =
  double softmax_scale = 1.0;
  bool causal = true;
  std::optional<int64_t> window_size = std::nullopt;
  int64_t query_offset = 0;  // key row of query row 0
  // (key_tokens, rotary_dims / 2) fp32, as rotary_apply takes them; both or neither.
  const Tensor* rotary_cos = nullptr;
  const Tensor* rotary_sin = nullptr;
  Stream stream = {};
};

struct AttentionForward {
  static constexpr std::string_view name = "attention_forward";
  using Args = AttentionForwardArgs;
};
struct AttentionBackward {
  static constexpr std::string_view name = "attention_backward";
  using Args = AttentionBackwardArgs;
};

// The contract above, checked once by each entry function before dispatch: throws `[attention_forward] ...`. With
// rotary tables: both, (key_tokens, rotary_dims / 2) float32 with 0 < rotary_dims <= head_size, or neither.
void check_attention_forward(const AttentionForwardArgs& args);
void check_attention_backward(const AttentionBackwardArgs& args);

// rotary_apply's inverse on grad_query (table rows from query_offset) and / or grad_key when `args` has rotary tables
// (nothing otherwise), for the variants that do not fold it into their stores.
void unrotate_attention_gradients(const AttentionBackwardArgs& args, bool query, bool key);

inline void attention_forward(const AttentionForwardArgs& args) {
  check_attention_forward(args);
  dispatch<AttentionForward>(args, args.query.device());
}
inline void attention_backward(const AttentionBackwardArgs& args) {
  check_attention_backward(args);
  dispatch<AttentionBackward>(args, args.query.device());
}

}  // namespace fast_llm::kernels
