// Flash attention forward on Hopper tensor cores (kernels/attention.h), variant "wgmma": the flash-attention-2
// algorithm with both products on wgmma (sm_90a, wgmma.cuh), bf16 / fp16 inputs, fp32 accumulation, head sizes 64
// and 128. Same contract, masks, output, logsumexp and layouts as "flash" (attention_forward.cu). A CTA holds 128
// queries: two consumer warpgroups of 64 rows (their products, online softmax and store: ForwardWarpgroup), the
// longest CTAs first (ForwardBlock).
//
// Each warpgroup's loop is software-pipelined: iteration i issues S_{i+1} = Q K_{i+1}^T and then O += P_i V_i without
// waiting in between, waits for S_{i+1} only (wait_group 1: the older batch), computes its softmax while P_i V_i still
// runs on the tensor cores, and waits for P_i V_i just before rescaling O.
//
// Two kernels share that loop and differ in who copies the tiles (cp.async, zero-filled past the document's end): at
// head_size 64 a producer warpgroup, at 128 the consumers themselves (the faster of the two at each size,
// docs/benchmarks.md).
#include "fast_llm/kernels/cuda/attention_forward.cuh"
#include "fast_llm/kernels/cuda/attention_wgmma.cuh"
#include "fast_llm/kernels/cuda/wgmma.cuh"

namespace fast_llm::kernels::cuda::attention {
namespace {

// One consumer warpgroup of the Hopper attention forward: its 64 query rows' scores, probabilities, output and
// online-softmax state in registers, and the steps of the flash-attention-2 loop on them. Both forward kernels run two
// of these; they differ only in who copies the tiles and how the hand-overs are made.
//
// Per key block of kBlockN keys:
//   S = Q K^T  (m64n{kBlockN}k16 x head_size / 16, A = Q and B = K from shared memory, both K-major),
//   online softmax of S in registers (log2 domain: max on raw scores, one FFMA + EX2 per score),
//   O = O * correction + P V  (m64n{head_size}k16 x kBlockN / 16, A = P straight from the S accumulators converted to
//   T in registers, B = V from shared memory, MN-major).
// Tiles are in the canonical 128-byte-swizzled layout of wgmma.cuh (load_wgmma_tile). Descriptors: Q (A, K-major):
// the warpgroup's 64 rows, k-step s in column block s / 4 at byte 32 (s % 4); K (B, K-major) likewise over kBlockN
// rows; V (B, MN-major): k-step j = keys 16 j .. 16 j + 15 at byte 2048 j, column blocks of 64 channels kBlockN * 128
// bytes apart. A step's descriptor is its tile's plus the step's offset >> 4. The tile descriptors go through
// wgmma::opaque where they are used: otherwise the compiler keeps every step's descriptor of every stage in registers
// across the loop (64 registers at head_size 128), and spills.
template <class T, int kHeadSize, int kBlockM, int kBlockN>
struct ForwardWarpgroup {
  static constexpr int kKSteps = kHeadSize / 16;  // k-steps of Q K^T
  static constexpr int kPSteps = kBlockN / 16;    // k-steps of P V
  static constexpr int kScoreRegisters = kBlockN / 2;
  static constexpr int kOutputRegisters = kHeadSize / 2;

  const int first_query, last_query, length;
  const int quad_row, quad_lane;
  const int row_base;  // this thread's rows in the CTA's block: row_base + quad_row and row_base + quad_row + 8

  float scores[kScoreRegisters];       // S, then P (unnormalised), of the current block
  float output[kOutputRegisters];      // O, unnormalised
  uint32_t probabilities[kPSteps][4];  // P as the A operand of P V
  // Per row r (quad_row + 8 r): running max of the raw scores, and this lane's part of the running sum of exp (the
  // quad's four parts are added at the end; every rescale applies to all four alike).
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  // `warpgroup`: which 64 rows of the CTA's kBlockM queries this one holds.
  __device__ __forceinline__ ForwardWarpgroup(int first_query_, int last_query_, int length_, int warpgroup)
      : first_query(first_query_),
        last_query(last_query_),
        length(length_),
        quad_row(int(threadIdx.x) % 32 / 4),
        quad_lane(int(threadIdx.x) % 4),
        row_base(warpgroup * 64 + (int(threadIdx.x) % 128) / 32 * 16) {
#pragma unroll
    for (int i = 0; i < kOutputRegisters; ++i) output[i] = 0.0f;
  }

  // S = Q K^T for the key tile at `key_descriptor` (issued and committed; the caller waits). `query_descriptor` is
  // this warpgroup's 64 rows of the query tile.
  __device__ __forceinline__ void issue_scores(uint64_t query_descriptor, uint64_t key_descriptor) {
    const uint64_t query_tile = wgmma::opaque(query_descriptor), key_tile = wgmma::opaque(key_descriptor);
#pragma unroll
    for (int s = 0; s < kKSteps; ++s)
      wgmma::product_ss<T, kBlockN, false, false>(
          scores, query_tile + uint64_t(((s / 4) * kBlockM * 128 + (s % 4) * 32) >> 4),
          key_tile + uint64_t(((s / 4) * kBlockN * 128 + (s % 4) * 32) >> 4), s > 0);
    wgmma::commit();
  }

  // Masks the scores of key block `block` where needed, then the online softmax update: scores become exp2 of the
  // scaled scores minus the new max; `correction` is what the old output and sums are multiplied by.
  __device__ __forceinline__ void softmax(const ForwardParams& p, int block, float (&correction)[2]) {
    const int first_key = block * kBlockN;
    const bool boundary = first_key + kBlockN > length || (p.causal && first_key + kBlockN - 1 > first_query) ||
                          (p.window > 0 && last_query - first_key >= p.window);
    if (boundary) {
      // Row r may see keys [key_begin, key_end) of the block, counted from this lane's first column (2 quad_lane):
      // a compare of a constant per element.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int query_index = first_query + row_base + quad_row + r * 8;
        const int key_end = min(length, p.causal ? query_index + 1 : length) - first_key - quad_lane * 2;
        const int key_begin = (p.window > 0 ? query_index - p.window + 1 : 0) - first_key - quad_lane * 2;
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (j * 8 + e < key_begin || j * 8 + e >= key_end) scores[4 * j + 2 * r + e] = -INFINITY;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float block_max = row_max[r];
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j)
        block_max = fmaxf(block_max, fmaxf(scores[4 * j + 2 * r], scores[4 * j + 2 * r + 1]));
      block_max = quad_max(block_max);
      // A row that has seen no key yet keeps max -inf: subtract 0 instead, so exp2(-inf) = 0 rather than NaN.
      const float base = block_max == -INFINITY ? 0.0f : block_max * p.scale_log2;
      correction[r] = fast_exp2(row_max[r] * p.scale_log2 - base);
      row_max[r] = block_max;
      float sum = row_sum[r] * correction[r];
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
        for (int i = 4 * j + 2 * r; i < 4 * j + 2 * r + 2; ++i) {
          scores[i] = fast_exp2(fmaf(scores[i], p.scale_log2, -base));
          sum += scores[i];
        }
      row_sum[r] = sum;
    }
  }

  // P in T as the A fragments of P V: column tiles 2 j and 2 j + 1 of S are k-step j.
  __device__ __forceinline__ void convert_probabilities() {
#pragma unroll
    for (int j = 0; j < kPSteps; ++j) {
      probabilities[j][0] = pack<T>(scores[8 * j], scores[8 * j + 1]);
      probabilities[j][1] = pack<T>(scores[8 * j + 2], scores[8 * j + 3]);
      probabilities[j][2] = pack<T>(scores[8 * j + 4], scores[8 * j + 5]);
      probabilities[j][3] = pack<T>(scores[8 * j + 6], scores[8 * j + 7]);
    }
  }

  // O += P V for the value tile at `value_descriptor` (issued and committed).
  __device__ __forceinline__ void issue_output(uint64_t value_descriptor) {
    const uint64_t value_tile = wgmma::opaque(value_descriptor);
#pragma unroll
    for (int j = 0; j < kPSteps; ++j)
      wgmma::product_rs<T, kHeadSize, true>(output, probabilities[j], value_tile + uint64_t((j * 2048) >> 4), true);
    wgmma::commit();
  }

  __device__ __forceinline__ void rescale_output(const float (&correction)[2]) {
#pragma unroll
    for (int k = 0; k < kOutputRegisters; ++k) output[k] *= correction[(k / 2) % 2];
  }

  // Normalises and stores the rows inside the document (4-byte stores: the quad's lanes write 16 contiguous bytes of
  // a row), and their logsumexp.
  __device__ __forceinline__ void store(const ForwardParams& p, int begin, int head) const {
    T* output_base =
        static_cast<T*>(p.output) + int64_t(begin) * p.output_token_stride + head * p.output_head_stride;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;  // a row without keys outputs zeros
      const int query_index = first_query + row_base + quad_row + r * 8;
      if (query_index >= length) continue;
      T* row = output_base + int64_t(query_index) * p.output_token_stride + quad_lane * 2;
#pragma unroll
      for (int j = 0; j < kHeadSize / 8; ++j)
        *reinterpret_cast<uint32_t*>(row + j * 8) =
            pack<T>(output[4 * j + 2 * r] * inverse, output[4 * j + 2 * r + 1] * inverse);
      if (quad_lane == 0)
        p.logsumexp[head * p.logsumexp_head_stride + int64_t(begin + query_index) * p.logsumexp_token_stride] =
            sum > 0.0f ? row_max[r] * p.softmax_scale + logf(sum) : -INFINITY;
    }
  }
};

constexpr int kBlockM = 128;  // queries per CTA: two consumer warpgroups of 64
constexpr int kBlockN = 128;  // keys per block
constexpr int kConsumerThreads = kWgmmaThreads;

// A CTA's document, queries and key blocks. Grid (heads, documents, query blocks), the last query block first: the
// CTAs go out query block by query block, the longest (the last blocks of causal documents, which see every key
// block) first, so the short ones fill the tail; the heads of a group go out together and share their key and value
// tiles in L2. `empty`: no query of the CTA is inside its document (the kernel returns at once; the other fields are
// then unset).
struct ForwardBlock {
  int begin, length, first_query, last_query, head, group, block_begin, blocks;
  bool empty;

  __device__ __forceinline__ explicit ForwardBlock(const ForwardParams& p) {
    head = int(blockIdx.x);
    const int document = int(blockIdx.y);
    begin = p.cu_seqlens[document * p.cu_seqlens_stride];
    length = p.cu_seqlens[(document + 1) * p.cu_seqlens_stride] - begin;
    first_query = (int(gridDim.z) - 1 - int(blockIdx.z)) * kBlockM;
    empty = first_query >= length;
  }
  // The rest, once the CTA is known not to be empty.
  __device__ __forceinline__ void locate(const ForwardParams& p) {
    last_query = min(first_query + kBlockM, length) - 1;
    group = head / p.heads_per_group;
    // The key blocks some query of [first_query, last_query] may see: at least one (a query sees its own key).
    const KeyBlocks seen = key_blocks_seen<kBlockN>(p, first_query, last_query, length);
    block_begin = seen.begin;
    blocks = seen.end - seen.begin;
  }
  template <class T>
  __device__ __forceinline__ const T* query(const ForwardParams& p) const {
    return static_cast<const T*>(p.query) + int64_t(begin) * p.query_token_stride + head * p.query_head_stride;
  }
  template <class T>
  __device__ __forceinline__ const T* key(const ForwardParams& p) const {
    return static_cast<const T*>(p.key) + int64_t(begin) * p.key_token_stride + group * p.key_head_stride;
  }
  template <class T>
  __device__ __forceinline__ const T* value(const ForwardParams& p) const {
    return static_cast<const T*>(p.value) + int64_t(begin) * p.value_token_stride + group * p.value_head_stride;
  }
};

// ---------------------------------------------------------------------------------------------------------------------
// head_size 128, `synchronous`: the two consumers copy the tiles themselves into double-buffered stages, K_{i+2} and
// V_{i+1} during iteration i, with one CTA-wide barrier per iteration. Its steps are the ForwardWarpgroup ones written
// out as lambdas: the same kernel on ForwardWarpgroup was slower (docs/benchmarks.md).

template <int kHeadSize>
struct SynchronousConfig {
  static constexpr int kKSteps = kHeadSize / 16;  // k-steps of Q K^T
  static constexpr int kPSteps = kBlockN / 16;    // k-steps of P V
  static constexpr int kScoreRegisters = kBlockN / 2;
  static constexpr int kOutputRegisters = kHeadSize / 2;
  static constexpr uint32_t kQueryBytes = kBlockM * kHeadSize * 2;
  static constexpr uint32_t kTileBytes = kBlockN * kHeadSize * 2;  // one key or value stage
  // Q, 2 key stages, 2 value stages, and slack to start the tiles on a 1024-byte boundary.
  static constexpr size_t kSharedBytes = kQueryBytes + 4 * size_t(kTileBytes) + 1024;
  static constexpr int kThreads = kConsumerThreads;
};

template <class T, int kHeadSize>
__global__ void __launch_bounds__(kConsumerThreads, 1) attention_forward_synchronous_kernel(const ForwardParams p) {
  using Config = SynchronousConfig<kHeadSize>;
  constexpr int kKSteps = Config::kKSteps, kPSteps = Config::kPSteps;
  constexpr int kScoreRegisters = Config::kScoreRegisters, kOutputRegisters = Config::kOutputRegisters;
  constexpr uint32_t kTileBytes = Config::kTileBytes;

  extern __shared__ unsigned char shared[];
  const uint32_t query_tile = (shared_address(shared) + 1023) & ~1023u;  // (kBlockM, kHeadSize) swizzled
  const uint32_t key_tiles = query_tile + Config::kQueryBytes;            // 2 x (kBlockN, kHeadSize)
  const uint32_t value_tiles = key_tiles + 2 * kTileBytes;                // 2 x (kBlockN, kHeadSize)

  ForwardBlock cta(p);
  if (cta.empty) return;
  cta.locate(p);
  const int head = cta.head, begin = cta.begin, length = cta.length;
  const int first_query = cta.first_query, last_query = cta.last_query;
  const int block_begin = cta.block_begin, blocks = cta.blocks;
  const T* query = cta.query<T>(p);
  const T* key = cta.key<T>(p);
  const T* value = cta.value<T>(p);

  const int warpgroup = int(threadIdx.x) / 128, lane = int(threadIdx.x) % 32;
  const int quad_row = lane / 4, quad_lane = lane % 4;
  // This thread's rows in the block: row_base + quad_row and row_base + quad_row + 8 (wgmma.cuh fragments).
  const int row_base = warpgroup * 64 + (int(threadIdx.x) % 128) / 32 * 16;

  // Descriptors. Q (A, K-major): the warpgroup's 64 rows, k-step s in column block s / 4 at byte 32 (s % 4).
  // K (B, K-major): likewise over kBlockN rows. V (B, MN-major): k-step j = keys 16 j .. 16 j + 15 at byte 2048 j,
  // column blocks of 64 channels kBlockN * 128 bytes apart. A step's descriptor is its tile's plus the step's offset
  // >> 4 (the start address field is the low bits, far from overflowing). The tile descriptors go through
  // wgmma::opaque where they are used: otherwise the compiler keeps every step's descriptor of every stage in
  // registers across the loop (64 registers at head_size 128), and spills.
  const uint64_t query_descriptor =
      wgmma::descriptor(query_tile + warpgroup * 64 * 128, 16, 1024);
  const uint64_t key_descriptor = wgmma::descriptor(key_tiles, 16, 1024);
  const uint64_t value_descriptor = wgmma::descriptor(value_tiles, kBlockN * 128, 1024);
  constexpr uint64_t kStageStep = kTileBytes >> 4;
  const auto query_step = [](int s) { return uint64_t(((s / 4) * kBlockM * 128 + (s % 4) * 32) >> 4); };
  const auto key_step = [](int s) { return uint64_t(((s / 4) * kBlockN * 128 + (s % 4) * 32) >> 4); };
  const auto value_step = [](int j) { return uint64_t((j * 2048) >> 4); };

  float scores[kScoreRegisters];    // S, then P (unnormalised), of the current block
  float output[kOutputRegisters];   // O, unnormalised
  uint32_t probabilities[kPSteps][4];  // P as the A operand of P V
  // Per row r (quad_row + 8 r): running max of the raw scores, and this lane's part of the running sum of exp (the
  // quad's four parts are added at the end; every rescale applies to all four alike).
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < kOutputRegisters; ++i) output[i] = 0.0f;

  // S = Q K^T for the key tile in `stage` (issued and committed; the caller waits).
  const auto issue_scores = [&](int stage) {
    const uint64_t query_tile_descriptor = wgmma::opaque(query_descriptor);
    const uint64_t key_tile_descriptor = wgmma::opaque(key_descriptor + stage * kStageStep);
#pragma unroll
    for (int s = 0; s < kKSteps; ++s)
      wgmma::product_ss<T, kBlockN, false, false>(scores, query_tile_descriptor + query_step(s),
                                                  key_tile_descriptor + key_step(s), s > 0);
    wgmma::commit();
  };

  // Masks the scores of key block `block` where needed, then the online softmax update: scores become exp2 of the
  // scaled scores minus the new max; `correction` is what the old output and sums are multiplied by.
  const auto softmax = [&](int block, float (&correction)[2]) {
    const int first_key = block * kBlockN;
    const bool boundary = first_key + kBlockN > length || (p.causal && first_key + kBlockN - 1 > first_query) ||
                          (p.window > 0 && last_query - first_key >= p.window);
    if (boundary) {
      // Row r may see keys [key_begin, key_end) of the block, counted from this lane's first column (2 quad_lane):
      // a compare of a constant per element.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int query_index = first_query + row_base + quad_row + r * 8;
        const int key_end = min(length, p.causal ? query_index + 1 : length) - first_key - quad_lane * 2;
        const int key_begin = (p.window > 0 ? query_index - p.window + 1 : 0) - first_key - quad_lane * 2;
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (j * 8 + e < key_begin || j * 8 + e >= key_end) scores[4 * j + 2 * r + e] = -INFINITY;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float block_max = row_max[r];
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j)
        block_max = fmaxf(block_max, fmaxf(scores[4 * j + 2 * r], scores[4 * j + 2 * r + 1]));
      block_max = quad_max(block_max);
      // A row that has seen no key yet keeps max -inf: subtract 0 instead, so exp2(-inf) = 0 rather than NaN.
      const float base = block_max == -INFINITY ? 0.0f : block_max * p.scale_log2;
      correction[r] = fast_exp2(row_max[r] * p.scale_log2 - base);
      row_max[r] = block_max;
      float sum = row_sum[r] * correction[r];
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
        for (int i = 4 * j + 2 * r; i < 4 * j + 2 * r + 2; ++i) {
          scores[i] = fast_exp2(fmaf(scores[i], p.scale_log2, -base));
          sum += scores[i];
        }
      row_sum[r] = sum;
    }
  };

  // P in T as the A fragments of P V: column tiles 2 j and 2 j + 1 of S are k-step j.
  const auto convert_probabilities = [&]() {
#pragma unroll
    for (int j = 0; j < kPSteps; ++j) {
      probabilities[j][0] = pack<T>(scores[8 * j], scores[8 * j + 1]);
      probabilities[j][1] = pack<T>(scores[8 * j + 2], scores[8 * j + 3]);
      probabilities[j][2] = pack<T>(scores[8 * j + 4], scores[8 * j + 5]);
      probabilities[j][3] = pack<T>(scores[8 * j + 6], scores[8 * j + 7]);
    }
  };

  // O += P V for the value tile in `stage` (issued and committed).
  const auto issue_output = [&](int stage) {
    const uint64_t value_tile_descriptor = wgmma::opaque(value_descriptor + stage * kStageStep);
#pragma unroll
    for (int j = 0; j < kPSteps; ++j)
      wgmma::product_rs<T, kHeadSize, true>(output, probabilities[j], value_tile_descriptor + value_step(j), true);
    wgmma::commit();
  };

  // Every thread's copies so far have landed and are visible to the tensor cores (and every warpgroup is past the
  // products that read the stages the next copies overwrite).
  const auto publish = [&]() {
    copy_async_wait<0>();
    wgmma::proxy_fence();
    __syncthreads();
  };

  // Prologue: Q and K_0, then V_0 and K_1; S_0 and its softmax.
  load_wgmma_tile<kBlockM, kHeadSize>(query_tile, query, p.query_token_stride, first_query, length);
  load_wgmma_tile<kBlockN, kHeadSize>(key_tiles, key, p.key_token_stride, block_begin * kBlockN, length);
  copy_async_commit();
  load_wgmma_tile<kBlockN, kHeadSize>(value_tiles, value, p.value_token_stride, block_begin * kBlockN,
                                      length);
  if (blocks > 1)
    load_wgmma_tile<kBlockN, kHeadSize>(key_tiles + kTileBytes, key, p.key_token_stride,
                                        (block_begin + 1) * kBlockN, length);
  copy_async_commit();
  copy_async_wait<1>();
  wgmma::proxy_fence();
  __syncthreads();

  float correction[2];
  wgmma::wgmma_fence();
  issue_scores(0);
  wgmma::wait<0>();
  wgmma::fence_operands(scores);
  softmax(block_begin, correction);  // the output is still zero: nothing to correct
  convert_probabilities();

  // Iteration i: S_{i+1} and P_i V_i, for every block but the last.
  for (int i = 0; i + 1 < blocks; ++i) {
    publish();  // V_i and K_{i+1}
    if (i + 2 < blocks)
      load_wgmma_tile<kBlockN, kHeadSize>(key_tiles + (i & 1) * kTileBytes, key, p.key_token_stride,
                                          (block_begin + i + 2) * kBlockN, length);
    load_wgmma_tile<kBlockN, kHeadSize>(value_tiles + ((i + 1) & 1) * kTileBytes, value,
                                        p.value_token_stride, (block_begin + i + 1) * kBlockN, length);
    copy_async_commit();

    wgmma::fence_operands(output);
    wgmma::wgmma_fence();  // orders the softmax's writes of the scores and probabilities before the products
    issue_scores((i + 1) & 1);
    issue_output(i & 1);
    wgmma::wait<1>();  // S_{i+1} done; P_i V_i may still run
    wgmma::fence_operands(scores);
    softmax(block_begin + i + 1, correction);
    wgmma::wait<0>();  // P_i V_i done: the output may be rescaled and the probabilities overwritten
    wgmma::fence_operands(output);
#pragma unroll
    for (int k = 0; k < kOutputRegisters; ++k) output[k] *= correction[(k / 2) % 2];
    convert_probabilities();
  }

  // The last block: P V only.
  publish();
  wgmma::fence_operands(output);
  wgmma::wgmma_fence();
  issue_output((blocks - 1) & 1);
  wgmma::wait<0>();
  wgmma::fence_operands(output);

  // Normalise and store (4-byte stores: the quad's lanes write 16 contiguous bytes of a row); logsumexp per row.
  T* output_base =
      static_cast<T*>(p.output) + int64_t(begin) * p.output_token_stride + head * p.output_head_stride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(row_sum[r]);
    const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;  // a row without keys outputs zeros
    const int query_index = first_query + row_base + quad_row + r * 8;
    if (query_index >= length) continue;
    T* row = output_base + int64_t(query_index) * p.output_token_stride + quad_lane * 2;
#pragma unroll
    for (int j = 0; j < kHeadSize / 8; ++j)
      *reinterpret_cast<uint32_t*>(row + j * 8) =
          pack<T>(output[4 * j + 2 * r] * inverse, output[4 * j + 2 * r + 1] * inverse);
    if (quad_lane == 0)
      p.logsumexp[head * p.logsumexp_head_stride + int64_t(begin + query_index) * p.logsumexp_token_stride] =
          sum > 0.0f ? row_max[r] * p.softmax_scale + logf(sum) : -INFINITY;
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// head_size 64, `producer`: a third warpgroup (40 registers by setmaxnreg, the consumers 232) copies Q and the key /
// value tiles of each block into 4 stages; the hand-overs are named barriers: full(stage, consumer), on which the
// producer arrives once its copies landed and went through the proxy fence and each consumer syncs on its own (the two
// consumers are never tied to each other), and free(stage), on which both consumers arrive once P V of the stage's
// block is done and the producer syncs.

template <int kHeadSize>
struct ProducerConfig {
  static constexpr int kStages = 4;  // of (K, V); at least 3, see the producer's loop
  static constexpr uint32_t kQueryBytes = kBlockM * kHeadSize * 2;
  static constexpr uint32_t kTileBytes = kBlockN * kHeadSize * 2;
  static constexpr uint32_t kStageBytes = 2 * kTileBytes;  // K then V
  static constexpr size_t kSharedBytes = kQueryBytes + kStages * size_t(kStageBytes) + 1024;
  static constexpr int kThreads = kConsumerThreads + kWgmmaProducerThreads;
  // Named barriers (0 is __syncthreads'): full(stage, consumer), free(stage).
  static constexpr int full(int stage, int consumer) { return 1 + 2 * stage + consumer; }
  static constexpr int free(int stage) { return 1 + 2 * kStages + stage; }
  static_assert(free(kStages - 1) <= 15, "16 named barriers");
  static constexpr int kFullThreads = kWgmmaProducerThreads + 128;
  static constexpr int kFreeThreads = kWgmmaProducerThreads + kConsumerThreads;
};

template <class T, int kHeadSize>
__global__ void __launch_bounds__(ProducerConfig<kHeadSize>::kThreads, 1)
    attention_forward_producer_kernel(const ForwardParams p) {
  using Config = ProducerConfig<kHeadSize>;
  constexpr int kStages = Config::kStages;
  constexpr uint32_t kTileBytes = Config::kTileBytes, kStageBytes = Config::kStageBytes;
  extern __shared__ unsigned char shared[];
  const uint32_t query_tile = (shared_address(shared) + 1023) & ~1023u;  // (kBlockM, kHeadSize) swizzled
  const uint32_t stages = query_tile + Config::kQueryBytes;               // kStages x (K, V)

  ForwardBlock cta(p);
  if (cta.empty) return;
  cta.locate(p);
  const int blocks = cta.blocks, length = cta.length;

  if (threadIdx.x >= kConsumerThreads) {
    // Producer: Q with the first block, then the key / value tiles of each block into stage block % kStages once the
    // consumers freed it. A block's copies stay in flight while the previous block's are waited for and published;
    // publishing block j - 1 only after the stage of block j is free is safe because the consumers free block
    // j - kStages after seeing block j - kStages + 1 <= j - 2 (kStages >= 3).
    release_producer_registers();
    const int thread = int(threadIdx.x) - kConsumerThreads;
    const T* key = cta.key<T>(p);
    const T* value = cta.value<T>(p);
    const auto publish = [&](int block) {
      wgmma::proxy_fence();
      named_barrier_arrive(Config::full(block % kStages, 0), Config::kFullThreads);
      named_barrier_arrive(Config::full(block % kStages, 1), Config::kFullThreads);
    };
    for (int j = 0; j < blocks; ++j) {
      const int stage = j % kStages;
      if (j >= kStages) named_barrier_sync(Config::free(stage), Config::kFreeThreads);
      if (j == 0)
        load_wgmma_tile_rolled<kBlockM, kHeadSize, kWgmmaProducerThreads>(query_tile, cta.query<T>(p),
                                                                          p.query_token_stride, cta.first_query,
                                                                          length, thread);
      const int first_key = (cta.block_begin + j) * kBlockN;
      load_wgmma_tile_rolled<kBlockN, kHeadSize, kWgmmaProducerThreads>(stages + stage * kStageBytes, key,
                                                                        p.key_token_stride, first_key, length, thread);
      load_wgmma_tile_rolled<kBlockN, kHeadSize, kWgmmaProducerThreads>(
          stages + stage * kStageBytes + kTileBytes, value, p.value_token_stride, first_key, length, thread);
      copy_async_commit();
      if (j >= 1) {
        copy_async_wait<1>();
        publish(j - 1);
      }
    }
    copy_async_wait<0>();
    publish(blocks - 1);
    return;
  }

  claim_consumer_registers();
  const int warpgroup = int(threadIdx.x) / 128;
  ForwardWarpgroup<T, kHeadSize, kBlockM, kBlockN> wg(cta.first_query, cta.last_query, length, warpgroup);
  const uint64_t query_descriptor = wgmma::descriptor(query_tile + warpgroup * 64 * 128, 16, 1024);
  const auto key_descriptor = [&](int block) {
    return wgmma::descriptor(stages + (block % kStages) * kStageBytes, 16, 1024);
  };
  const auto value_descriptor = [&](int block) {
    return wgmma::descriptor(stages + (block % kStages) * kStageBytes + kTileBytes, kBlockN * 128, 1024);
  };
  float correction[2];
  named_barrier_sync(Config::full(0, warpgroup), Config::kFullThreads);
  wgmma::wgmma_fence();
  wg.issue_scores(query_descriptor, key_descriptor(0));
  wgmma::wait<0>();
  wgmma::fence_operands(wg.scores);
  wg.softmax(p, cta.block_begin, correction);
  wg.convert_probabilities();

  for (int i = 0; i + 1 < blocks; ++i) {
    named_barrier_sync(Config::full((i + 1) % kStages, warpgroup), Config::kFullThreads);
    wgmma::fence_operands(wg.output);
    wgmma::wgmma_fence();
    wg.issue_scores(query_descriptor, key_descriptor(i + 1));
    wg.issue_output(value_descriptor(i));
    wgmma::wait<1>();
    wgmma::fence_operands(wg.scores);
    wg.softmax(p, cta.block_begin + i + 1, correction);
    wgmma::wait<0>();
    wgmma::fence_operands(wg.output);
    // Block i's stage is read by nobody any more; the producer waits for it only if a later block goes there.
    if (i + kStages < blocks) named_barrier_arrive(Config::free(i % kStages), Config::kFreeThreads);
    wg.rescale_output(correction);
    wg.convert_probabilities();
  }

  wgmma::fence_operands(wg.output);
  wgmma::wgmma_fence();
  wg.issue_output(value_descriptor(blocks - 1));
  wgmma::wait<0>();
  wgmma::fence_operands(wg.output);
  wg.store(p, cta.begin, cta.head);
}

// ---------------------------------------------------------------------------------------------------------------------
// Host

std::optional<std::string> supports_wgmma_forward(const AttentionForwardArgs& args) {
  if (auto reason = forward_tiles_reason(args)) return reason;
  if (ceil_div(args.max_seqlen, kBlockM) > 65535)  // grid.z
    return fmt::format("max_seqlen {} is over {} tokens", args.max_seqlen, 65535 * kBlockM);
  return hopper_reason(args.query.device());
}

template <class Config, class Kernel>
void launch_forward(Kernel* kernel, const ForwardParams& params, int64_t max_seqlen, int64_t heads,
                    int64_t documents, cudaStream_t stream) {
  FLM_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Config::kSharedBytes)));
  const dim3 grid(unsigned(heads), unsigned(documents), unsigned(ceil_div(max_seqlen, kBlockM)));
  kernel<<<grid, Config::kThreads, Config::kSharedBytes, stream>>>(params);
}

void launch_wgmma(const ForwardParams& params, DType dtype, int64_t head_size, int64_t max_seqlen, int64_t heads,
                  int64_t documents, cudaStream_t stream) {
  const auto launch = [&]<class T>(std::type_identity<T>) {
    if (head_size == 64)
      launch_forward<ProducerConfig<64>>(&attention_forward_producer_kernel<T, 64>, params, max_seqlen,
                                         heads, documents, stream);
    else
      launch_forward<SynchronousConfig<128>>(&attention_forward_synchronous_kernel<T, 128>, params, max_seqlen,
                                             heads, documents, stream);
  };
  if (dtype == DType::bfloat16)
    launch(std::type_identity<bfloat16>{});
  else
    launch(std::type_identity<float16>{});
}

void attention_forward_wgmma(const AttentionForwardArgs& args) { attention_forward_steps(args, &launch_wgmma); }

}  // namespace

FLM_REGISTER_KERNEL(AttentionForward, DeviceType::cuda, "wgmma", /*priority=*/200, KernelKind::optimized,
                    &supports_wgmma_forward, &attention_forward_wgmma,
                    "flash-attention-2 on Hopper wgmma (sm_90), two warpgroups of 64 queries, 128-key blocks in "
                    "swizzled shared memory (cp.async), softmax overlapped with P V; head_size 64: a producer "
                    "warpgroup copies into 4 stages; bf16 / fp16, head_size 64 / 128");

}  // namespace fast_llm::kernels::cuda::attention
