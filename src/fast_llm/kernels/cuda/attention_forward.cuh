// What every CUDA attention forward tile variant shares (attention_forward.cu): the kernel parameters, the limits of
// the tile kernels and the host side of a launch (empty problems, the dtype). A variant supplies only its kernel
// launch, through `attention_forward_steps`: "flash" (attention_forward.cu, mma.sync), "wgmma"
// (attention_forward_wgmma.cu, Hopper).
#pragma once

#include "fast_llm/kernels/cuda/attention_tile.cuh"

namespace fast_llm::kernels::cuda::attention {

// What a forward kernel reads and writes.
struct ForwardParams {
  const void* query;  // (tokens, heads, head_size) T
  int64_t query_token_stride, query_head_stride;
  const void* key;  // (tokens, head_groups, head_size) T
  int64_t key_token_stride, key_head_stride;
  const void* value;  // (tokens, head_groups, head_size) T
  int64_t value_token_stride, value_head_stride;
  void* output;  // (tokens, heads, head_size) T
  int64_t output_token_stride, output_head_stride;
  float* logsumexp;  // (heads, tokens)
  int64_t logsumexp_head_stride, logsumexp_token_stride;
  const int32_t* cu_seqlens;  // (documents + 1)
  int64_t cu_seqlens_stride;
  int heads_per_group;
  float softmax_scale;
  float scale_log2;  // softmax_scale * log2(e)
  bool causal;       // also true with a window
  int window;        // 0: none
};

// The key blocks (of kBlockN keys) some query of [first_query, last_query] (positions in a document of `length`
// tokens) may see: blocks [begin, end), at least one (a query sees its own key).
struct KeyBlocks {
  int begin, end;
};
template <int kBlockN>
__device__ __forceinline__ KeyBlocks key_blocks_seen(const ForwardParams& p, int first_query, int last_query,
                                                     int length) {
  return {p.window > 0 ? max(0, first_query - p.window + 1) / kBlockN : 0,
          p.causal ? last_query / kBlockN + 1 : (length + kBlockN - 1) / kBlockN};
}

// Queues a variant's kernel for `params` (bf16 or fp16 `dtype`, head_size 64 or 128) on `stream`; called only with
// tokens, documents and max_seqlen > 0.
using ForwardLauncher = void (*)(const ForwardParams& params, DType dtype, int64_t head_size, int64_t max_seqlen,
                                 int64_t heads, int64_t documents, cudaStream_t stream);

// Why the tile kernels cannot run `args` (devices, dtypes bf16 / fp16, head_size 64 / 128, layouts: channels
// contiguous, token and head strides multiples of 8, 16-byte aligned data), or nothing.
std::optional<std::string> forward_tiles_reason(const AttentionForwardArgs& args);

// The whole forward of arguments that meet the op's contract: parameters, `launch`.
void attention_forward_steps(const AttentionForwardArgs& args, ForwardLauncher launch);

}  // namespace fast_llm::kernels::cuda::attention
