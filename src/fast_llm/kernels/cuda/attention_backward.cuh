// The steps every CUDA attention backward variant shares (attention_backward.cu): the tile kernels' limits, delta =
// rowsum(dO * O) and logsumexp * log2(e) into (heads, tokens) fp32 scratches, the zeroed (tokens, heads, head_size)
// fp32 dQ sums, and the final grad_query = softmax_scale * sums in the input dtype (through the inverse rotary
// rotation when the op has rotary tables; dK is then the main kernel's to unrotate, or rotary_apply's). A variant
// supplies only its main kernel (dK, dV written, dQ added to the sums), launched through `attention_backward_steps`
// on the op's stream: "flash" (attention_backward.cu, mma.sync), "wgmma" (attention_backward_wgmma.cu, Hopper).
#pragma once

#include "fast_llm/kernels/cuda/attention_tile.cuh"

namespace fast_llm::kernels::cuda::attention {

struct TokenHeadTensor {
  const void* data;
  int64_t token_stride, head_stride;
};

// Rotary tables whose inverse rotation the backward folds into its dQ and dK stores (kernels/attention.h): (tokens,
// head_size / 2) fp32 rows `stride` floats apart, 16-byte aligned; cos == nullptr: none.
struct RotaryTables {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t stride = 0;
};

// What a main kernel reads and writes.
struct BackwardParams {
  TokenHeadTensor query, key, value, grad_output;  // T
  void* grad_key;  // (tokens, head_groups, head_size) T
  int64_t grad_key_token_stride, grad_key_head_stride;
  void* grad_value;  // (tokens, head_groups, head_size) T
  int64_t grad_value_token_stride, grad_value_head_stride;
  // (heads, tokens) contiguous: logsumexp * log2(e), +inf where the logsumexp is not finite (a query without keys:
  // probability 0), so that P = exp2(S scale log2(e) - this) is one fused multiply-add and one exp2 per score.
  const float* logsumexp_log2;
  const float* delta;  // (heads, tokens) contiguous
  float* grad_query_sum;  // (tokens, heads, head_size) contiguous, zeroed
  const int32_t* cu_seqlens;  // (documents + 1)
  int64_t cu_seqlens_stride;
  int64_t tokens;
  int heads, heads_per_group;
  float softmax_scale;
  float scale_log2;  // softmax_scale * log2(e)
  bool causal;       // also true with a window
  int window;        // 0: none
  // dK through the inverse rotation, for a main kernel that folds it in (attention_backward_steps'
  // `main_unrotates_key`); the others ignore it.
  RotaryTables rotary;
};

// The query blocks (of kBlockM queries) that may see some key of a CTA's keys [first_key, last_key] (positions in a
// document of `length` tokens), for each head of the group: blocks [begin, begin + count).
struct QueryBlocks {
  int begin, count;
};
template <int kBlockM>
__device__ __forceinline__ QueryBlocks query_blocks_seeing(const BackwardParams& p, int first_key, int last_key,
                                                           int length) {
  const int query_blocks = (length + kBlockM - 1) / kBlockM;
  const int block_begin = p.causal ? first_key / kBlockM : 0;
  const int block_end = p.window > 0 ? min(query_blocks, (last_key + p.window - 1) / kBlockM + 1) : query_blocks;
  return {block_begin, max(0, block_end - block_begin)};
}

// Queues a variant's main kernel for `params` (bf16 or fp16 `dtype`, head_size 64 or 128) on `stream`; called only
// with documents > 0 and max_seqlen > 0.
using BackwardMainLauncher = void (*)(const BackwardParams& params, DType dtype, int64_t head_size,
                                      int64_t max_seqlen, int64_t groups, int64_t documents, cudaStream_t stream);

// Why the tile kernels cannot run `args` (devices, dtypes bf16 / fp16, head_size 64 / 128, layouts: channels
// contiguous, token and head strides multiples of 8, 16-byte aligned data), or nothing.
std::optional<std::string> backward_tiles_reason(const AttentionBackwardArgs& args);

// The whole backward of arguments that meet the op's contract: delta, dQ sums, `launch_main`, the cast of dQ. With
// rotary tables the cast unrotates dQ, and the main kernel dK if `main_unrotates_key` (else rotary_apply does after
// it); tables the kernels cannot read (another rotary_dims, an unaligned layout) go to rotary_apply for both.
void attention_backward_steps(const AttentionBackwardArgs& args, BackwardMainLauncher launch_main,
                              bool main_unrotates_key);

}  // namespace fast_llm::kernels::cuda::attention
