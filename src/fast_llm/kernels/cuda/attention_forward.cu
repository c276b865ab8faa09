// Flash attention forward on CUDA (kernels/attention.h), variant "flash": the flash-attention-2 algorithm on
// tensor cores (mma.sync m16n8k16, bf16 / fp16 inputs, fp32 accumulation), head sizes 64 and 128.
//
// A CTA holds a block of queries in registers (Q fragments, fp32 output accumulators, softmax statistics) and walks
// the key / value blocks they may see, double-buffered in swizzled shared memory by cp.async; an online softmax in the
// log2 domain keeps the row max on the raw scores, so softmax_scale must be positive. Masks skip the blocks no query
// may see and mask per element only on boundary blocks (the kernel says more).
// Output (tokens, heads, head_size) in the input dtype; logsumexp (heads, tokens) fp32 = max * scale + log(sum).
// Every tensor's channels are contiguous; token and head strides are free (views into a fused QKV buffer) but must be
// multiples of 8 elements with 16-byte aligned data, for the 16-byte copies.
#include "fast_llm/kernels/cuda/attention_forward.cuh"

namespace fast_llm::kernels::cuda::attention {
namespace {

template <class T, int kHeadSize, int kBlockM, int kBlockN, int kWarps>
struct ForwardConfig {
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kChunks = kHeadSize / 8;      // 16-byte chunks per row
  static constexpr int kMTiles = kBlockM / (16 * kWarps);  // 16-row tiles per warp
  static constexpr int kKSteps = kHeadSize / 16;     // k-steps of Q K^T
  static constexpr int kSTiles = kBlockN / 8;        // n-tiles of S
  static constexpr int kOTiles = kHeadSize / 8;      // n-tiles of O
  static constexpr size_t kSharedBytes = size_t(kBlockM + 4 * kBlockN) * kHeadSize * sizeof(T);
  static_assert(kBlockM % (16 * kWarps) == 0 && kBlockN % 16 == 0 && kHeadSize % 64 == 0);
};

// Grid: (query blocks of max_seqlen, heads, documents); a block whose first query is past its document's end exits,
// and blockIdx.x runs over the query blocks in reverse, so the longest causal blocks start first. A CTA holds a
// (kBlockM, head_size) block of queries; each warp owns 16 * kMTiles of its rows, keeps their Q fragments in
// registers and their output accumulators (fp32) and softmax statistics in registers. The CTA walks the key / value
// blocks its queries may see, (kBlockN, head_size) tiles double-buffered in swizzled shared memory by cp.async: the
// next block loads while the current one is computed. Per block, S = Q K^T, an online softmax in the log2 domain
// (p = exp2(s * scale * log2 e - m * scale * log2 e): one FFMA and one MUFU.EX2 per score; the row max is kept on the
// raw scores, so softmax_scale must be positive), O = O * exp2(m_old - m_new) + P V with P converted to the input
// dtype in registers. Causal and windowed masks skip the key blocks no query of the CTA may see and mask
// per element only on blocks that straddle a boundary (the diagonal, the window's far edge, the document's end).
// Rows past the document's end read zeros (cp.async zero-fill) and are never stored.
template <class T, int kHeadSize, int kBlockM, int kBlockN, int kWarps, int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) attention_forward_kernel(const ForwardParams p) {
  using Config = ForwardConfig<T, kHeadSize, kBlockM, kBlockN, kWarps>;
  constexpr int kThreads = Config::kThreads, kChunks = Config::kChunks, kMTiles = Config::kMTiles;
  constexpr int kKSteps = Config::kKSteps, kSTiles = Config::kSTiles, kOTiles = Config::kOTiles;

  extern __shared__ __align__(128) unsigned char shared[];
  T* query_tile = reinterpret_cast<T*>(shared);               // (kBlockM, kHeadSize)
  T* key_tiles = query_tile + kBlockM * kHeadSize;            // 2 x (kBlockN, kHeadSize)
  T* value_tiles = key_tiles + 2 * kBlockN * kHeadSize;       // 2 x (kBlockN, kHeadSize)

  const int document = int(blockIdx.z), head = int(blockIdx.y);
  const int begin = p.cu_seqlens[document * p.cu_seqlens_stride];
  const int length = p.cu_seqlens[(document + 1) * p.cu_seqlens_stride] - begin;
  const int first_query = (int(gridDim.x) - 1 - int(blockIdx.x)) * kBlockM;
  if (first_query >= length) return;
  const int last_query = min(first_query + kBlockM, length) - 1;
  const int group = head / p.heads_per_group;
  const T* query = static_cast<const T*>(p.query) + int64_t(begin) * p.query_token_stride + head * p.query_head_stride;
  const T* key = static_cast<const T*>(p.key) + int64_t(begin) * p.key_token_stride + group * p.key_head_stride;
  const T* value =
      static_cast<const T*>(p.value) + int64_t(begin) * p.value_token_stride + group * p.value_head_stride;

  // The key blocks some query of [first_query, last_query] may see.
  const KeyBlocks seen = key_blocks_seen<kBlockN>(p, first_query, last_query, length);
  const int block_begin = seen.begin, block_end = seen.end;

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int quad_row = lane / 4, quad_lane = lane % 4;
  const int warp_row = warp * 16 * kMTiles;  // the warp's first row in the block

  load_tile<kBlockM, kHeadSize, kThreads>(query_tile, query, p.query_token_stride, first_query, length);
  load_tile<kBlockN, kHeadSize, kThreads>(key_tiles, key, p.key_token_stride, block_begin * kBlockN, length);
  load_tile<kBlockN, kHeadSize, kThreads>(value_tiles, value, p.value_token_stride, block_begin * kBlockN, length);
  copy_async_commit();
  copy_async_wait<0>();
  __syncthreads();

  // Q fragments (A operand), for the whole loop.
  uint32_t query_fragments[kMTiles][kKSteps][4];
#pragma unroll
  for (int t = 0; t < kMTiles; ++t)
#pragma unroll
    for (int k = 0; k < kKSteps; ++k)
      load_matrix_x4(query_fragments[t][k],
                     shared_address(query_tile + swizzled<kChunks>(warp_row + t * 16 + lane % 16, k * 2 + lane / 16)));

  // Per row (tile t, half r: rows quad_row and quad_row + 8): running max of the raw scores and this lane's part of
  // the running sum of exp (the quad's four parts are added at the end; every rescale applies to all four alike).
  float output[kMTiles][kOTiles][4];
  float row_max[kMTiles][2], row_sum[kMTiles][2];
#pragma unroll
  for (int t = 0; t < kMTiles; ++t) {
#pragma unroll
    for (int o = 0; o < kOTiles; ++o)
#pragma unroll
      for (int i = 0; i < 4; ++i) output[t][o][i] = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[t][r] = -INFINITY;
      row_sum[t][r] = 0.0f;
    }
  }

  for (int block = block_begin; block < block_end; ++block) {
    const int stage = (block - block_begin) & 1;
    __syncthreads();  // every warp is done with the stage the next copy overwrites
    if (block + 1 < block_end) {
      load_tile<kBlockN, kHeadSize, kThreads>(key_tiles + (stage ^ 1) * kBlockN * kHeadSize, key,
                                              p.key_token_stride, (block + 1) * kBlockN, length);
      load_tile<kBlockN, kHeadSize, kThreads>(value_tiles + (stage ^ 1) * kBlockN * kHeadSize, value,
                                              p.value_token_stride, (block + 1) * kBlockN, length);
    }
    copy_async_commit();  // possibly empty: the wait below always leaves exactly the newest group in flight
    copy_async_wait<1>();
    __syncthreads();
    const T* key_tile = key_tiles + stage * kBlockN * kHeadSize;
    const T* value_tile = value_tiles + stage * kBlockN * kHeadSize;

    // S = Q K^T: (16 kMTiles, kBlockN) per warp.
    float scores[kMTiles][kSTiles][4];
#pragma unroll
    for (int t = 0; t < kMTiles; ++t)
#pragma unroll
      for (int n = 0; n < kSTiles; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) scores[t][n][i] = 0.0f;
#pragma unroll
    for (int k = 0; k < kKSteps; ++k) {
#pragma unroll
      for (int n = 0; n < kSTiles / 2; ++n) {
        uint32_t b[4];  // n-tiles 2n (b[0], b[1]) and 2n + 1 (b[2], b[3])
        load_matrix_x4(b, shared_address(key_tile + swizzled<kChunks>(n * 16 + (lane / 16) * 8 + lane % 8,
                                                                      k * 2 + (lane / 8) % 2)));
#pragma unroll
        for (int t = 0; t < kMTiles; ++t) {
          mma_16x8x16<T>(scores[t][2 * n], query_fragments[t][k], b[0], b[1]);
          mma_16x8x16<T>(scores[t][2 * n + 1], query_fragments[t][k], b[2], b[3]);
        }
      }
    }

    const int first_key = block * kBlockN;
    const bool boundary = first_key + kBlockN > length || (p.causal && first_key + kBlockN - 1 > first_query) ||
                          (p.window > 0 && last_query - first_key >= p.window);
    if (boundary) {
#pragma unroll
      for (int t = 0; t < kMTiles; ++t)
#pragma unroll
        for (int n = 0; n < kSTiles; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int query_index = first_query + warp_row + t * 16 + quad_row + (i / 2) * 8;
            const int key_index = first_key + n * 8 + quad_lane * 2 + i % 2;
            if (!key_allowed(query_index, key_index, length, p.causal, p.window)) scores[t][n][i] = -INFINITY;
          }
    }

    // Online softmax; scores become probabilities (unnormalised).
#pragma unroll
    for (int t = 0; t < kMTiles; ++t)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float block_max = row_max[t][r];
#pragma unroll
        for (int n = 0; n < kSTiles; ++n) block_max = fmaxf(block_max, fmaxf(scores[t][n][2 * r], scores[t][n][2 * r + 1]));
        block_max = quad_max(block_max);
        // A row that has seen no key yet keeps max -inf: subtract 0 instead, so exp2(-inf) = 0 rather than NaN.
        const float base = block_max == -INFINITY ? 0.0f : block_max * p.scale_log2;
        const float correction = fast_exp2(row_max[t][r] * p.scale_log2 - base);
        row_max[t][r] = block_max;
        float sum = row_sum[t][r] * correction;
#pragma unroll
        for (int n = 0; n < kSTiles; ++n)
#pragma unroll
          for (int i = 2 * r; i < 2 * r + 2; ++i) {
            const float probability = fast_exp2(fmaf(scores[t][n][i], p.scale_log2, -base));
            scores[t][n][i] = probability;
            sum += probability;
          }
        row_sum[t][r] = sum;
#pragma unroll
        for (int o = 0; o < kOTiles; ++o) {
          output[t][o][2 * r] *= correction;
          output[t][o][2 * r + 1] *= correction;
        }
      }

    // O += P V: P from the accumulators, V fragments transposed by ldmatrix.
#pragma unroll
    for (int j = 0; j < kSTiles / 2; ++j) {
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int t = 0; t < kMTiles; ++t) accumulators_to_a<T>(scores[t][2 * j], scores[t][2 * j + 1], a[t]);
#pragma unroll
      for (int o = 0; o < kOTiles / 2; ++o) {
        uint32_t b[4];  // channel n-tiles 2o (b[0], b[1]) and 2o + 1 (b[2], b[3])
        load_matrix_x4_transposed(
            b, shared_address(value_tile + swizzled<kChunks>(j * 16 + ((lane / 8) % 2) * 8 + lane % 8,
                                                             o * 2 + lane / 16)));
#pragma unroll
        for (int t = 0; t < kMTiles; ++t) {
          mma_16x8x16<T>(output[t][2 * o], a[t], b[0], b[1]);
          mma_16x8x16<T>(output[t][2 * o + 1], a[t], b[2], b[3]);
        }
      }
    }
  }

  // Normalise and store (4-byte stores: the quad's lanes write 16 contiguous bytes of a row); logsumexp per row.
  T* output_base =
      static_cast<T*>(p.output) + int64_t(begin) * p.output_token_stride + head * p.output_head_stride;
#pragma unroll
  for (int t = 0; t < kMTiles; ++t)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(row_sum[t][r]);
      const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;  // a row without keys outputs zeros
      const int query_index = first_query + warp_row + t * 16 + quad_row + r * 8;
      if (query_index >= length) continue;
      T* row = output_base + int64_t(query_index) * p.output_token_stride + quad_lane * 2;
#pragma unroll
      for (int o = 0; o < kOTiles; ++o)
        *reinterpret_cast<uint32_t*>(row + o * 8) =
            pack<T>(output[t][o][2 * r] * inverse, output[t][o][2 * r + 1] * inverse);
      if (quad_lane == 0)
        p.logsumexp[head * p.logsumexp_head_stride + int64_t(begin + query_index) * p.logsumexp_token_stride] =
            sum > 0.0f ? row_max[t][r] * p.softmax_scale + logf(sum) : -INFINITY;
    }
}

// ---------------------------------------------------------------------------------------------------------------------
// Host

template <class T, int kHeadSize, int kBlockM, int kBlockN, int kWarps, int kMinBlocks>
void launch_forward(const ForwardParams& params, int64_t max_seqlen, int64_t heads, int64_t documents,
                    cudaStream_t stream) {
  using Config = ForwardConfig<T, kHeadSize, kBlockM, kBlockN, kWarps>;
  auto* kernel = &attention_forward_kernel<T, kHeadSize, kBlockM, kBlockN, kWarps, kMinBlocks>;
  FLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Config::kSharedBytes)));
  const dim3 grid(unsigned(ceil_div(max_seqlen, kBlockM)), unsigned(heads), unsigned(documents));
  kernel<<<grid, Config::kThreads, Config::kSharedBytes, stream>>>(params);
}

// head_size 64: 4 warps of 32 rows (two 16-row tiles share every K / V fragment: half the shared-memory reads per
// product); 128: 8 warps of 16 rows, which keeps the accumulators within the register file.
void launch_flash(const ForwardParams& params, DType dtype, int64_t head_size, int64_t max_seqlen, int64_t heads,
                  int64_t documents, cudaStream_t stream) {
  const auto launch = [&]<class T>(std::type_identity<T>) {
    if (head_size == 64)
      launch_forward<T, 64, 128, 64, 4, 1>(params, max_seqlen, heads, documents, stream);
    else
      launch_forward<T, 128, 128, 64, 8, 1>(params, max_seqlen, heads, documents, stream);
  };
  if (dtype == DType::bfloat16)
    launch(std::type_identity<bfloat16>{});
  else
    launch(std::type_identity<float16>{});
}

void attention_forward_flash(const AttentionForwardArgs& args) { attention_forward_steps(args, &launch_flash); }

}  // namespace

std::optional<std::string> forward_tiles_reason(const AttentionForwardArgs& args) {
  if (auto reason = common_reason(args.query, args.key, args.logsumexp, args.cu_seqlens, args.max_seqlen,
                                  args.window_size))
    return reason;
  if (auto reason = query_range_reason(args.query, args.key, args.query_offset)) return reason;
  if (auto reason = tile_dtype_and_size_reason(args.query, args.softmax_scale)) return reason;
  if (auto reason = tile_layout_reason("query", args.query)) return reason;
  if (auto reason = tile_layout_reason("key", args.key)) return reason;
  if (auto reason = tile_layout_reason("value", args.value)) return reason;
  return tile_layout_reason("output", args.output);
}

void attention_forward_steps(const AttentionForwardArgs& args, ForwardLauncher launch) {
  const int64_t tokens = args.query.size(0), heads = args.query.size(1), head_size = args.query.size(2);
  const int64_t documents = args.cu_seqlens.size(0) - 1;
  if (tokens == 0 || documents == 0 || args.max_seqlen == 0) return;

  LaunchScope scope("attention_forward", args.query.device(), args.stream);
  const ForwardParams params{
      .query = args.query.data(),
      .query_token_stride = args.query.stride(0),
      .query_head_stride = args.query.stride(1),
      .key = args.key.data(),
      .key_token_stride = args.key.stride(0),
      .key_head_stride = args.key.stride(1),
      .value = args.value.data(),
      .value_token_stride = args.value.stride(0),
      .value_head_stride = args.value.stride(1),
      .output = args.output.data(),
      .output_token_stride = args.output.stride(0),
      .output_head_stride = args.output.stride(1),
      .logsumexp = args.logsumexp.data_as<float>(),
      .logsumexp_head_stride = args.logsumexp.stride(0),
      .logsumexp_token_stride = args.logsumexp.stride(1),
      .cu_seqlens = args.cu_seqlens.data_as<int32_t>(),
      .cu_seqlens_stride = args.cu_seqlens.stride(0),
      .heads_per_group = int(heads / args.key.size(1)),
      .softmax_scale = float(args.softmax_scale),
      .scale_log2 = float(args.softmax_scale) * kLog2e,
      .causal = args.causal || args.window_size.has_value(),
      .window = args.window_size ? int(*args.window_size) : 0};
  launch(params, args.query.dtype(), head_size, args.max_seqlen, heads, documents, scope.stream());
  scope.check_launch();
}

FLM_REGISTER_KERNEL(AttentionForward, DeviceType::cuda, "flash", /*priority=*/100, KernelKind::optimized,
                    &forward_tiles_reason, &attention_forward_flash,
                    "flash-attention-2 on tensor cores (mma.sync, cp.async double buffering), bf16 / fp16, head_size "
                    "64 / 128, fp32 accumulation");

}  // namespace fast_llm::kernels::cuda::attention
