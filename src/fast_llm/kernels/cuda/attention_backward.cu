// Flash attention backward on CUDA (kernels/attention.h), variant "flash": the flash-attention-2 backward on tensor
// cores (mma.sync m16n8k16, bf16 / fp16 inputs, fp32 accumulation), head sizes 64 and 128; layouts as the forward
// (channels contiguous, token / head strides multiples of 8, 16-byte aligned data). Three kernels on the op's stream,
// with fp32 scratch from the caching allocator:
//   1. delta = rowsum(dO * O) per (head, token) (the softmax correction), and lse log2 e, into (heads, tokens)
//      scratches;
//   2. the main kernel, one CTA per (key block, key/value group, document): dK, dV in registers (deterministic, no
//      atomics), dQ added to an fp32 (tokens, heads, head_size) scratch with vector atomics;
//   3. grad_query = scale * dQ scratch, rounded to the input dtype, through the inverse rotary rotation when the op
//      has rotary tables (kernels/attention.h); this variant's dK then goes through rotary_apply after the kernels.
// Steps 1 and 3 and the scratch are shared with the Hopper variant "wgmma" (attention_backward.cuh,
// attention_backward_wgmma.cu), which brings its own main kernel.
#include "fast_llm/kernels/cuda/attention_backward.cuh"

namespace fast_llm::kernels::cuda::attention {
namespace {

constexpr int kDeltaThreads = 256;
constexpr int kCastThreads = 256;

// ---------------------------------------------------------------------------------------------------------------------
// 1. delta = rowsum(dO * O) and lse log2 e: kHeadSize / 8 lanes per (token, head) row, 16-byte loads.

template <class T, int kHeadSize>
__global__ void __launch_bounds__(kDeltaThreads)
    attention_delta_kernel(TokenHeadTensor grad_output, TokenHeadTensor output, const float* logsumexp,
                           int64_t logsumexp_head_stride, int64_t logsumexp_token_stride, float* delta,
                           float* logsumexp_log2, int64_t tokens, int heads) {
  constexpr int kLanesPerRow = kHeadSize / 8;
  static_assert(32 % kLanesPerRow == 0);
  const int64_t rows = tokens * heads;
  const int member = int(threadIdx.x) % kLanesPerRow;
  const int64_t first = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kLanesPerRow;
  const int64_t step = int64_t(gridDim.x) * blockDim.x / kLanesPerRow;
  // Every lane of a warp runs the same number of iterations (the warp's rows stay together), for the shuffles.
  for (int64_t base = first - first % (32 / kLanesPerRow); base < rows; base += step) {
    const int64_t row = base + first % (32 / kLanesPerRow);
    float sum = 0.0f;
    if (row < rows) {
      const int64_t token = row / heads, head = row % heads;
      float g[8], o[8];
      load_floats<8>(static_cast<const T*>(grad_output.data) + token * grad_output.token_stride +
                         head * grad_output.head_stride + member * 8,
                     g);
      load_floats<8>(static_cast<const T*>(output.data) + token * output.token_stride + head * output.head_stride +
                         member * 8,
                     o);
#pragma unroll
      for (int i = 0; i < 8; ++i) sum += g[i] * o[i];
    }
#pragma unroll
    for (int offset = kLanesPerRow / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (row < rows && member == 0) {
      const int64_t token = row / heads, head = row % heads;
      delta[head * tokens + token] = sum;
      const float lse = logsumexp[head * logsumexp_head_stride + token * logsumexp_token_stride];
      logsumexp_log2[head * tokens + token] = isfinite(lse) ? lse * kLog2e : INFINITY;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// 2. The main kernel.
//
// One CTA per (key block, key/value group, document): it keeps its (kBlockN, head_size) K and V tiles in shared memory
// and dK, dV in fp32 registers (each warp owns 16 key rows), and walks every (query head of the group, query block)
// that may see its keys, with the next Q / dO tiles loading (cp.async, double buffered) while the current ones are
// used. Per query block, in the transposed orientation so that each warp's products keep its own key rows:
//   S^T = K Q^T,  P^T = exp2(S^T scale log2 e - lse log2 e),  dP^T = V dO^T,  dS^T = P^T (dP^T - delta),
//   dV += P^T dO,  dK += dS^T Q  (A operands straight from the accumulators),
// then dS^T goes through shared memory for dQ = dS K, which each warp adds for its part of the query block into the
// fp32 (tokens, heads, head_size) scratch with vector atomics. dK and dV need no atomics (one CTA owns a key block and
// every head of its group), so they are deterministic; dQ's fp32 sums depend on the atomics' order.
// Masks as the forward: blocks no query may see are skipped, per-element masks only on boundary blocks. Query rows
// past the document's end read zeros and get lse = +inf (probability 0); key rows past it are masked and not stored.

template <class T, int kHeadSize, int kBlockM, int kWarps>
struct BackwardConfig {
  static constexpr int kBlockN = 16 * kWarps;  // key rows per CTA: 16 per warp
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kChunks = kHeadSize / 8;
  static constexpr int kKSteps = kHeadSize / 16;  // k-steps over channels
  static constexpr int kQTiles = kBlockM / 8;     // n-tiles over the queries of S^T, dP^T
  static constexpr int kOTiles = kHeadSize / 8;   // n-tiles over channels of dK, dV
  // dQ work units: (16 queries, kUnitChannels) each, at least one per warp where the block allows.
  static constexpr int kUnitChannels = (kBlockM / 16) * (kHeadSize / 64) >= kWarps ? 64 : 32;
  static constexpr int kScoreStride = kBlockM + 8;  // dS^T rows padded by 16 bytes: conflict-free ldmatrix and stores
  static constexpr int kTileBytes = kHeadSize * int(sizeof(T));  // per row
  static constexpr size_t kSharedBytes =
      size_t(2 * kBlockN + 4 * kBlockM) * kTileBytes + size_t(kBlockN) * kScoreStride * sizeof(T) +
      size_t(4 * kBlockM) * sizeof(float);
  static_assert(kBlockM % 16 == 0 && kHeadSize % 64 == 0 && 2 * kBlockM <= kThreads);
};

template <class T, int kHeadSize, int kBlockM, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) attention_backward_kernel(const BackwardParams p) {
  using Config = BackwardConfig<T, kHeadSize, kBlockM, kWarps>;
  constexpr int kBlockN = Config::kBlockN, kThreads = Config::kThreads, kChunks = Config::kChunks;
  constexpr int kKSteps = Config::kKSteps, kQTiles = Config::kQTiles, kOTiles = Config::kOTiles;
  constexpr int kScoreStride = Config::kScoreStride;

  extern __shared__ __align__(128) unsigned char shared[];
  T* key_tile = reinterpret_cast<T*>(shared);                     // (kBlockN, kHeadSize)
  T* value_tile = key_tile + kBlockN * kHeadSize;                 // (kBlockN, kHeadSize)
  T* query_tiles = value_tile + kBlockN * kHeadSize;              // 2 x (kBlockM, kHeadSize)
  T* grad_output_tiles = query_tiles + 2 * kBlockM * kHeadSize;   // 2 x (kBlockM, kHeadSize)
  T* score_tile = grad_output_tiles + 2 * kBlockM * kHeadSize;    // (kBlockN, kScoreStride): dS^T
  float* logsumexp_tiles = reinterpret_cast<float*>(score_tile + kBlockN * kScoreStride);  // 2 x (kBlockM)
  float* delta_tiles = logsumexp_tiles + 2 * kBlockM;                                      // 2 x (kBlockM)

  const int document = int(blockIdx.z), group = int(blockIdx.y);
  const int begin = p.cu_seqlens[document * p.cu_seqlens_stride];
  const int length = p.cu_seqlens[(document + 1) * p.cu_seqlens_stride] - begin;
  const int first_key = int(blockIdx.x) * kBlockN;
  if (first_key >= length) return;
  const int last_key = min(first_key + kBlockN, length) - 1;

  // The query blocks that may see some key of [first_key, last_key], for each head of the group.
  const QueryBlocks seeing = query_blocks_seeing<kBlockM>(p, first_key, last_key, length);
  const int block_begin = seeing.begin, blocks = seeing.count;
  const int items = blocks * p.heads_per_group;

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int quad_row = lane / 4, quad_lane = lane % 4;
  const int warp_key = warp * 16;  // the warp's first key row in the block

  const T* key = static_cast<const T*>(p.key.data) + int64_t(begin) * p.key.token_stride + group * p.key.head_stride;
  const T* value =
      static_cast<const T*>(p.value.data) + int64_t(begin) * p.value.token_stride + group * p.value.head_stride;

  // Issues the copies of item `item` (head, query block) into `stage`.
  const auto load_item = [&](int item, int stage) {
    const int head = group * p.heads_per_group + item / blocks;
    const int first_query = (block_begin + item % blocks) * kBlockM;
    const T* query = static_cast<const T*>(p.query.data) + int64_t(begin) * p.query.token_stride +
                     head * p.query.head_stride;
    const T* grad_output = static_cast<const T*>(p.grad_output.data) + int64_t(begin) * p.grad_output.token_stride +
                           head * p.grad_output.head_stride;
    load_tile<kBlockM, kHeadSize, kThreads>(query_tiles + stage * kBlockM * kHeadSize, query, p.query.token_stride,
                                            first_query, length);
    load_tile<kBlockM, kHeadSize, kThreads>(grad_output_tiles + stage * kBlockM * kHeadSize, grad_output,
                                            p.grad_output.token_stride, first_query, length);
    const int index = int(threadIdx.x);
    if (index < 2 * kBlockM) {
      const int row = index % kBlockM;
      const bool valid = first_query + row < length;
      const int64_t token = begin + (valid ? first_query + row : 0);
      if (index < kBlockM)
        copy_async_4(shared_address(logsumexp_tiles + stage * kBlockM + row),
                     p.logsumexp_log2 + head * p.tokens + token, valid);
      else
        copy_async_4(shared_address(delta_tiles + stage * kBlockM + row), p.delta + head * p.tokens + token, valid);
    }
  };

  load_tile<kBlockN, kHeadSize, kThreads>(key_tile, key, p.key.token_stride, first_key, length);
  load_tile<kBlockN, kHeadSize, kThreads>(value_tile, value, p.value.token_stride, first_key, length);
  if (items > 0) load_item(0, 0);
  copy_async_commit();

  float grad_key[kOTiles][4], grad_value[kOTiles][4];
#pragma unroll
  for (int o = 0; o < kOTiles; ++o)
#pragma unroll
    for (int i = 0; i < 4; ++i) grad_key[o][i] = grad_value[o][i] = 0.0f;

  for (int item = 0; item < items; ++item) {
    const int stage = item & 1;
    const int head = group * p.heads_per_group + item / blocks;
    const int first_query = (block_begin + item % blocks) * kBlockM;
    __syncthreads();  // every warp is done with the stage the next copy overwrites, and with dS^T
    if (item + 1 < items) load_item(item + 1, stage ^ 1);
    copy_async_commit();
    copy_async_wait<1>();
    __syncthreads();
    const T* query_tile = query_tiles + stage * kBlockM * kHeadSize;
    const T* grad_output_tile = grad_output_tiles + stage * kBlockM * kHeadSize;

    // S^T = K Q^T and dP^T = V dO^T: (16, kBlockM) per warp.
    float scores[kQTiles][4], grad_probabilities[kQTiles][4];
#pragma unroll
    for (int n = 0; n < kQTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) scores[n][i] = grad_probabilities[n][i] = 0.0f;
#pragma unroll
    for (int k = 0; k < kKSteps; ++k) {
      uint32_t key_a[4], value_a[4];
      const int a_offset = swizzled<kChunks>(warp_key + lane % 16, k * 2 + lane / 16);
      load_matrix_x4(key_a, shared_address(key_tile + a_offset));
      load_matrix_x4(value_a, shared_address(value_tile + a_offset));
#pragma unroll
      for (int n = 0; n < kQTiles / 2; ++n) {
        const int b_offset = swizzled<kChunks>(n * 16 + (lane / 16) * 8 + lane % 8, k * 2 + (lane / 8) % 2);
        uint32_t b[4];
        load_matrix_x4(b, shared_address(query_tile + b_offset));
        mma_16x8x16<T>(scores[2 * n], key_a, b[0], b[1]);
        mma_16x8x16<T>(scores[2 * n + 1], key_a, b[2], b[3]);
        load_matrix_x4(b, shared_address(grad_output_tile + b_offset));
        mma_16x8x16<T>(grad_probabilities[2 * n], value_a, b[0], b[1]);
        mma_16x8x16<T>(grad_probabilities[2 * n + 1], value_a, b[2], b[3]);
      }
    }

    const bool boundary = first_key + kBlockN > length || (p.causal && first_key + kBlockN - 1 > first_query) ||
                          (p.window > 0 && first_query + kBlockM - 1 - first_key >= p.window);
    // Probabilities and dS^T, in place: scores become P^T, grad_probabilities become dS^T.
#pragma unroll
    for (int n = 0; n < kQTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int column = n * 8 + quad_lane * 2 + i % 2;
        const int query_index = first_query + column;
        const int key_index = first_key + warp_key + quad_row + (i / 2) * 8;
        // A query past the document's end (or, defensively, without any key: +inf) has no gradient: probability 0.
        const float base = query_index < length ? logsumexp_tiles[stage * kBlockM + column] : INFINITY;
        float probability = fast_exp2(fmaf(scores[n][i], p.scale_log2, -base));
        if (boundary && !key_allowed(query_index, key_index, length, p.causal, p.window)) probability = 0.0f;
        scores[n][i] = probability;
        grad_probabilities[n][i] = probability * (grad_probabilities[n][i] - delta_tiles[stage * kBlockM + column]);
      }

    // dV += P^T dO and dK += dS^T Q: A from the accumulators, B (rows = queries) transposed by ldmatrix.
#pragma unroll
    for (int j = 0; j < kQTiles / 2; ++j) {
      uint32_t probability_a[4], grad_score_a[4];
      accumulators_to_a<T>(scores[2 * j], scores[2 * j + 1], probability_a);
      accumulators_to_a<T>(grad_probabilities[2 * j], grad_probabilities[2 * j + 1], grad_score_a);
#pragma unroll
      for (int o = 0; o < kOTiles / 2; ++o) {
        const int b_offset = swizzled<kChunks>(j * 16 + ((lane / 8) % 2) * 8 + lane % 8, o * 2 + lane / 16);
        uint32_t b[4];
        load_matrix_x4_transposed(b, shared_address(grad_output_tile + b_offset));
        mma_16x8x16<T>(grad_value[2 * o], probability_a, b[0], b[1]);
        mma_16x8x16<T>(grad_value[2 * o + 1], probability_a, b[2], b[3]);
        load_matrix_x4_transposed(b, shared_address(query_tile + b_offset));
        mma_16x8x16<T>(grad_key[2 * o], grad_score_a, b[0], b[1]);
        mma_16x8x16<T>(grad_key[2 * o + 1], grad_score_a, b[2], b[3]);
      }
    }

    // dS^T to shared memory, rows = keys (the warp's own 16), columns = queries.
#pragma unroll
    for (int n = 0; n < kQTiles; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<uint32_t*>(score_tile + (warp_key + quad_row + r * 8) * kScoreStride + n * 8 +
                                     quad_lane * 2) =
            pack<T>(grad_probabilities[n][2 * r], grad_probabilities[n][2 * r + 1]);
    __syncthreads();

    // dQ (kBlockM, kHeadSize) += dS K, in units of (16 queries, kUnitChannels channels) spread over the warps; A = dS
    // from dS^T and B = K (rows = keys) both transposed by ldmatrix. The unscaled sums go to the fp32 scratch.
    constexpr int kUnitChannels = Config::kUnitChannels;
    constexpr int kUnits = (kBlockM / 16) * (kHeadSize / kUnitChannels);
    for (int unit = warp; unit < kUnits; unit += kWarps) {
      const int query_tile_index = unit % (kBlockM / 16), channel_chunk = unit / (kBlockM / 16);
      float grad_query[kUnitChannels / 8][4];
#pragma unroll
      for (int o = 0; o < kUnitChannels / 8; ++o)
#pragma unroll
        for (int i = 0; i < 4; ++i) grad_query[o][i] = 0.0f;
#pragma unroll
      for (int k = 0; k < kBlockN / 16; ++k) {
        uint32_t a[4];
        load_matrix_x4_transposed(
            a, shared_address(score_tile + (k * 16 + (lane / 16) * 8 + lane % 8) * kScoreStride +
                              query_tile_index * 16 + ((lane / 8) % 2) * 8));
#pragma unroll
        for (int o = 0; o < kUnitChannels / 16; ++o) {
          uint32_t b[4];
          load_matrix_x4_transposed(
              b, shared_address(key_tile + swizzled<kChunks>(k * 16 + ((lane / 8) % 2) * 8 + lane % 8,
                                                             channel_chunk * (kUnitChannels / 8) + o * 2 + lane / 16)));
          mma_16x8x16<T>(grad_query[2 * o], a, b[0], b[1]);
          mma_16x8x16<T>(grad_query[2 * o + 1], a, b[2], b[3]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int query_index = first_query + query_tile_index * 16 + quad_row + r * 8;
        if (query_index >= length) continue;
        float* row = p.grad_query_sum + (int64_t(begin + query_index) * p.heads + head) * kHeadSize +
                     channel_chunk * kUnitChannels + quad_lane * 2;
#pragma unroll
        for (int o = 0; o < kUnitChannels / 8; ++o)
          atomicAdd(reinterpret_cast<float2*>(row + o * 8), make_float2(grad_query[o][2 * r], grad_query[o][2 * r + 1]));
      }
    }
  }

  copy_async_wait<0>();  // with no items, the K / V copies are still in flight: none may outlive the block

  // dK = scale dS^T Q, dV = P^T dO for the warp's key rows inside the document.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key_index = first_key + warp_key + quad_row + r * 8;
    if (key_index >= length) continue;
    T* grad_key_row = static_cast<T*>(p.grad_key) + int64_t(begin + key_index) * p.grad_key_token_stride +
                      group * p.grad_key_head_stride + quad_lane * 2;
    T* grad_value_row = static_cast<T*>(p.grad_value) + int64_t(begin + key_index) * p.grad_value_token_stride +
                        group * p.grad_value_head_stride + quad_lane * 2;
#pragma unroll
    for (int o = 0; o < kOTiles; ++o) {
      *reinterpret_cast<uint32_t*>(grad_key_row + o * 8) =
          pack<T>(grad_key[o][2 * r] * p.softmax_scale, grad_key[o][2 * r + 1] * p.softmax_scale);
      *reinterpret_cast<uint32_t*>(grad_value_row + o * 8) = pack<T>(grad_value[o][2 * r], grad_value[o][2 * r + 1]);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// 3. grad_query = scale * dQ sums, rounded to the input dtype, and with rotary tables (RotaryTables) the inverse
// rotation of each head's pairs (c, c + head_size / 2) (kernels/rotary.h): a thread takes 8 channels (two 16-byte
// loads of the sums, one 16-byte store), 8 of each half with rotary; it keeps them and walks the tokens
// (token_step_grid).

struct GradQueryCast {
  const float* sums;  // (tokens, heads, head_size) contiguous
  void* grad_query;   // (tokens, heads, head_size) T
  int64_t token_stride, head_stride;
  int64_t tokens;
  int heads;
  float scale;
  RotaryTables rotary;
};

template <class T, int kHeadSize, bool kRotary>
__global__ void __launch_bounds__(kCastThreads) attention_grad_query_kernel(const GradQueryCast p) {
  constexpr int kHalf = kHeadSize / 2;
  constexpr int kStepsPerHead = kHeadSize / 8 / (kRotary ? 2 : 1);
  for (int step = int(threadIdx.x); step < p.heads * kStepsPerHead; step += int(blockDim.x)) {
    const int head = step / kStepsPerHead, column = (step % kStepsPerHead) * 8;
    for (int64_t token = first_token_of_thread(); token < p.tokens; token += token_loop_stride()) {
      const float* sums = p.sums + (token * p.heads + head) * kHeadSize + column;
      T* grad_query = static_cast<T*>(p.grad_query) + token * p.token_stride + head * p.head_stride + column;
      float x[8];
      load_floats<8>(sums, x);
      if constexpr (kRotary) {
        float y[8], cos[8], sin[8];
        load_floats<8>(sums + kHalf, y);
        load_floats<8>(p.rotary.cos + token * p.rotary.stride + column, cos);
        load_floats<8>(p.rotary.sin + token * p.rotary.stride + column, sin);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          rotate_pair(x[i], y[i], cos[i], -sin[i]);
          x[i] *= p.scale;
          y[i] *= p.scale;
        }
        store_floats<8>(grad_query, x);
        store_floats<8>(grad_query + kHalf, y);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) x[i] *= p.scale;
        store_floats<8>(grad_query, x);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Host

template <class T, int kHeadSize, int kBlockM, int kWarps>
void launch_backward(const BackwardParams& params, int64_t max_seqlen, int64_t groups, int64_t documents,
                     cudaStream_t stream) {
  using Config = BackwardConfig<T, kHeadSize, kBlockM, kWarps>;
  auto* kernel = &attention_backward_kernel<T, kHeadSize, kBlockM, kWarps>;
  FLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Config::kSharedBytes)));
  const dim3 grid(unsigned(ceil_div(max_seqlen, Config::kBlockN)), unsigned(groups), unsigned(documents));
  kernel<<<grid, Config::kThreads, Config::kSharedBytes, stream>>>(params);
}

// kWarps warps of 16 key rows. dK and dV hold head_size fp32 registers per thread, S^T and dP^T kBlockM / 2 each:
// query blocks of 64 at head_size 64, of 32 at 128 (64 would spill).
template <int kWarps>
void launch_flash_main(const BackwardParams& params, DType dtype, int64_t head_size, int64_t max_seqlen,
                       int64_t groups, int64_t documents, cudaStream_t stream) {
  const auto for_head_size = [&]<class T>(std::type_identity<T>) {
    if (head_size == 64)
      launch_backward<T, 64, 64, kWarps>(params, max_seqlen, groups, documents, stream);
    else
      launch_backward<T, 128, 32, kWarps>(params, max_seqlen, groups, documents, stream);
  };
  if (dtype == DType::bfloat16)
    for_head_size(std::type_identity<bfloat16>{});
  else
    for_head_size(std::type_identity<float16>{});
}

template <int kWarps>
void attention_backward_flash(const AttentionBackwardArgs& args) {
  attention_backward_steps(args, &launch_flash_main<kWarps>, /*main_unrotates_key=*/false);
}

}  // namespace

std::optional<std::string> backward_tiles_reason(const AttentionBackwardArgs& args) {
  if (auto reason = common_reason(args.query, args.key, args.logsumexp, args.cu_seqlens, args.max_seqlen,
                                  args.window_size))
    return reason;
  if (auto reason = query_range_reason(args.query, args.key, args.query_offset)) return reason;
  if (auto reason = tile_dtype_and_size_reason(args.query, args.softmax_scale)) return reason;
  for (const auto& [name, tensor] :
       {std::pair<const char*, const Tensor*>{"query", &args.query}, {"key", &args.key}, {"value", &args.value},
        {"grad_output", &args.grad_output}, {"output", &args.output}, {"grad_query", &args.grad_query},
        {"grad_key", &args.grad_key}, {"grad_value", &args.grad_value}})
    if (auto reason = tile_layout_reason(name, *tensor)) return reason;
  return std::nullopt;
}

namespace {

// The rotary tables of `args` (the op's contract: fp32, (tokens, at most head_size / 2), the query's device) as the
// kernels here read them, or none: no tables, or tables of fewer columns or of a layout they cannot read (16-byte
// aligned contiguous rows, the same row stride for both).
RotaryTables foldable_rotary(const AttentionBackwardArgs& args) {
  if (args.rotary_cos == nullptr) return {};
  const Tensor &cos = *args.rotary_cos, &sin = *args.rotary_sin;
  const int64_t tokens = args.query.size(0);
  for (const Tensor* table : {&cos, &sin})
    if (2 * table->size(1) != args.query.size(2) || table->stride(1) != 1 || !is_aligned(table->data(), 16) ||
        (tokens > 1 && table->stride(0) % 4 != 0))
      return {};
  if (tokens > 1 && cos.stride(0) != sin.stride(0)) return {};
  return {.cos = cos.data_as<float>(), .sin = sin.data_as<float>(), .stride = tokens > 1 ? cos.stride(0) : 0};
}

}  // namespace

void attention_backward_steps(const AttentionBackwardArgs& args, BackwardMainLauncher launch_main,
                              bool main_unrotates_key) {
  const Device device = args.query.device();
  const int64_t tokens = args.query.size(0), heads = args.query.size(1), head_size = args.query.size(2);
  const int64_t groups = args.key.size(1), documents = args.cu_seqlens.size(0) - 1;
  if (tokens == 0) return;

  LaunchScope scope("attention_backward", device, args.stream);
  // Every token belongs to a document, so the main kernel writes every row of dK, dV (and dQ through the sums) unless
  // there is nothing to run: then the gradients are zeros.
  Tensor delta = Tensor::empty(Shape{heads, tokens}, DType::float32, device, scope.tensor_stream());
  Tensor logsumexp_log2 = Tensor::empty(Shape{heads, tokens}, DType::float32, device, scope.tensor_stream());
  Tensor grad_query_sum = Tensor::empty(Shape{tokens, heads, head_size}, DType::float32, device, scope.tensor_stream());
  FLM_CUDA_CHECK(cudaMemsetAsync(grad_query_sum.data(), 0, grad_query_sum.nbytes(), scope.stream()));
  const RotaryTables rotary = foldable_rotary(args);

  const auto launch = [&]<class T, int kHeadSize>(std::type_identity<T>, std::integral_constant<int, kHeadSize>) {
    const TokenHeadTensor grad_output{args.grad_output.data(), args.grad_output.stride(0), args.grad_output.stride(1)};
    const TokenHeadTensor output{args.output.data(), args.output.stride(0), args.output.stride(1)};
    attention_delta_kernel<T, kHeadSize><<<grid_for(tokens * heads * (kHeadSize / 8), kDeltaThreads, scope),
                                           kDeltaThreads, 0, scope.stream()>>>(
        grad_output, output, args.logsumexp.data_as<float>(), args.logsumexp.stride(0), args.logsumexp.stride(1),
        delta.data_as<float>(), logsumexp_log2.data_as<float>(), tokens, int(heads));
    scope.check_launch();
    if (documents > 0 && args.max_seqlen > 0) {
      const BackwardParams params{
          .query = {args.query.data(), args.query.stride(0), args.query.stride(1)},
          .key = {args.key.data(), args.key.stride(0), args.key.stride(1)},
          .value = {args.value.data(), args.value.stride(0), args.value.stride(1)},
          .grad_output = grad_output,
          .grad_key = args.grad_key.data(),
          .grad_key_token_stride = args.grad_key.stride(0),
          .grad_key_head_stride = args.grad_key.stride(1),
          .grad_value = args.grad_value.data(),
          .grad_value_token_stride = args.grad_value.stride(0),
          .grad_value_head_stride = args.grad_value.stride(1),
          .logsumexp_log2 = logsumexp_log2.data_as<float>(),
          .delta = delta.data_as<float>(),
          .grad_query_sum = grad_query_sum.data_as<float>(),
          .cu_seqlens = args.cu_seqlens.data_as<int32_t>(),
          .cu_seqlens_stride = args.cu_seqlens.stride(0),
          .tokens = tokens,
          .heads = int(heads),
          .heads_per_group = int(heads / groups),
          .softmax_scale = float(args.softmax_scale),
          .scale_log2 = float(args.softmax_scale) * kLog2e,
          .causal = args.causal || args.window_size.has_value(),
          .window = args.window_size ? int(*args.window_size) : 0,
          .rotary = rotary};
      launch_main(params, args.query.dtype(), kHeadSize, args.max_seqlen, groups, documents, scope.stream());
      scope.check_launch();
    }
    const GradQueryCast cast{.sums = grad_query_sum.data_as<float>(),
                             .grad_query = args.grad_query.data(),
                             .token_stride = args.grad_query.stride(0),
                             .head_stride = args.grad_query.stride(1),
                             .tokens = tokens,
                             .heads = int(heads),
                             .scale = float(args.softmax_scale),
                             .rotary = rotary};
    const TokenStepGrid grid =
        token_step_grid(tokens, heads * (kHeadSize / 8) / (rotary.cos ? 2 : 1), scope, kCastThreads);
    if (rotary.cos)
      attention_grad_query_kernel<T, kHeadSize, true><<<grid.grid, grid.block, 0, scope.stream()>>>(cast);
    else
      attention_grad_query_kernel<T, kHeadSize, false><<<grid.grid, grid.block, 0, scope.stream()>>>(cast);
    scope.check_launch();
  };
  const auto for_head_size = [&]<class T>(std::type_identity<T> type) {
    if (head_size == 64)
      launch(type, std::integral_constant<int, 64>{});
    else
      launch(type, std::integral_constant<int, 128>{});
  };
  if (args.query.dtype() == DType::bfloat16)
    for_head_size(std::type_identity<bfloat16>{});
  else
    for_head_size(std::type_identity<float16>{});
  // Tables the kernels could not read, or a main kernel that leaves dK as it is.
  if (rotary.cos == nullptr)
    unrotate_attention_gradients(args, /*query=*/true, /*key=*/true);
  else if (!main_unrotates_key)
    unrotate_attention_gradients(args, /*query=*/false, /*key=*/true);
}

FLM_REGISTER_KERNEL(AttentionBackward, DeviceType::cuda, "flash", /*priority=*/100, KernelKind::optimized,
                    &backward_tiles_reason, &attention_backward_flash<4>,
                    "flash-attention-2 backward on tensor cores: per key block dK, dV in registers (no atomics), dQ "
                    "in an fp32 scratch (vector atomics); bf16 / fp16, head_size 64 / 128");

}  // namespace fast_llm::kernels::cuda::attention
