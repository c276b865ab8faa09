// Flash attention backward on Hopper tensor cores (kernels/attention.h), variant "wgmma": the flash-attention-2
// backward with all five products on wgmma (sm_90a, wgmma.cuh), bf16 / fp16 inputs, fp32 accumulation, head sizes 64
// and 128. Same contract, preprocess (delta = rowsum(dO * O), lse log2 e), fp32 dQ sums and final cast as "flash"
// (attention_backward.cuh); what differs is the main kernel.
//
// One CTA per (key/value group, document, block of kBlockN = 128 keys), two warpgroups of 64 key rows each (256
// threads, one CTA per multiprocessor); the CTAs go out key block by key block, so that the longest (the first key
// blocks of causal documents) start first. The K and V tiles stay in shared memory for the whole CTA, dK and dV in
// fp32 registers (each warpgroup owns its 64 key rows: no atomics, deterministic). The CTA walks every (query head of
// the group, block of kBlockM queries: 128 at head_size 64, 64 at 128) that may see its keys; Q, dO, lse log2 e and
// delta of the next item load by cp.async into the other of two stages while the current item computes. Per item and
// warpgroup, in the transposed orientation (rows = the warpgroup's keys):
//   S^T = K Q^T      m64n{kBlockM}k16 x head_size / 16, A = K rows, B = Q rows, both K-major in shared memory;
//   dP^T = V dO^T    likewise, issued right behind S^T: P^T = exp2(S^T scale log2 e - lse log2 e) is computed while it
//                    runs, straight into A fragments (rounded to T: column tiles 2 j, 2 j + 1 of an accumulator are
//                    k-step j of an A fragment, wgmma.cuh);
//   dS^T = P^T (dP^T - delta), in registers, with P^T as rounded;
//   dV += P^T dO     m64n{head_size}k16 x kBlockM / 16, A = P^T / dS^T from registers, B = dO / Q with rows =
//   dK += dS^T Q     queries = the contraction, channels contiguous: MN-major;
//   dQ = dS K        dS^T is also stored to shared memory (rows = keys, queries contiguous), and after a CTA barrier
//                    m64n64k16 x 8 over all 128 keys, A = dS read transposed (MN-major: queries contiguous), B = K
//                    (rows = keys = the contraction, channels contiguous: MN-major). Warpgroup w takes queries
//                    [64 w, 64 w + 64) at head_size 64, channels [64 w, 64 w + 64) at 128. The fp32 results go to
//                    the dQ sums with float2 atomics (red.v2.f32): measured faster than staging them in shared memory
//                    for bulk reductions (cp.reduce.async.bulk), which the L2 serves at the same rate.
// Scaling: dK and dQ are the gradients of the scaled scores times softmax_scale, applied at the dK store and in the
// dQ cast.
//
// Masks as "flash": query blocks no key of the CTA may see are skipped; per-element masks only on boundary items.
// Query rows past the document's end read zeros (Q, dO, lse, delta): their probabilities are 1, but their dP^T and
// delta are 0, so their dS^T, and their dV and dK contributions, are 0; their dQ rows are not stored. Key rows past
// the end are zero, masked and not stored. A warpgroup whose 64 keys a query block cannot see at all still runs
// (P = 0 everywhere).
//
// Shared memory (1024-byte aligned tiles, canonical 128-byte swizzle of wgmma.cuh): K, V (128 x head_size), 2 stages
// of Q and dO (kBlockM x head_size), dS^T (128 x kBlockM), 2 stages of kBlockM lse and delta: 145 KiB at head_size
// 128, 130 KiB at 64.
//
// Synchronisation per item: (1) each thread waits for its copies of the item, fences them to the async proxy, and a
// CTA barrier publishes them; the same barrier says every warpgroup finished the previous item (its products read
// the stage the next copies overwrite, and the dS^T tile). (2) after both warpgroups stored dS^T (and fenced it), a
// second CTA barrier lets each read the other's half for dQ.
//
// Layouts: as "flash" (channels contiguous, token / head strides multiples of 8, 16-byte aligned data).
#include "fast_llm/kernels/cuda/attention_backward.cuh"
#include "fast_llm/kernels/cuda/attention_wgmma.cuh"
#include "fast_llm/kernels/cuda/wgmma.cuh"

namespace fast_llm::kernels::cuda::attention {
namespace {

constexpr int kBlockN = 128;  // keys per CTA: two warpgroups of 64
constexpr int kThreads = kWgmmaThreads;

// kBlockM queries per item: 128 at head_size 64 (S^T and dP^T of m64n128: twice the work per barrier for the same
// registers as head_size 128 with 64 queries; measured 1.2x faster than 64 at head_size 64), 64 at 128. The two
// warpgroups split dQ = dS K (64 x 64 each) over all 128 keys of the CTA: by queries at head_size 64 (warpgroup w
// takes queries [64 w, 64 w + 64), every channel), by channels at 128 (channels [64 w, 64 w + 64), every query).
template <int kHeadSize>
struct WgmmaBackwardConfig {
  static_assert(kHeadSize == 64 || kHeadSize == 128);
  static constexpr int kBlockM = kHeadSize == 64 ? 128 : 64;
  static constexpr bool kSplitQueries = kHeadSize == 64;
  static constexpr uint32_t kKeyBytes = kBlockN * kHeadSize * 2;    // K or V tile
  static constexpr uint32_t kQueryBytes = kBlockM * kHeadSize * 2;  // one Q or dO stage
  static constexpr uint32_t kScoreBytes = kBlockN * kBlockM * 2;    // dS^T
  static constexpr uint32_t kRowBytes = 2 * kBlockM * 4;            // lse or delta, two stages
  // K, V, 2 Q stages, 2 dO stages, dS^T, lse and delta, and slack to start the tiles on a 1024-byte boundary.
  static constexpr size_t kSharedBytes =
      2 * size_t(kKeyBytes) + 4 * size_t(kQueryBytes) + kScoreBytes + 2 * kRowBytes + 1024;
};

template <class T, int kHeadSize>
__global__ void __launch_bounds__(kThreads, 1) attention_backward_wgmma_kernel(const BackwardParams p) {
  using Config = WgmmaBackwardConfig<kHeadSize>;
  constexpr int kBlockM = Config::kBlockM;
  constexpr int kKSteps = kHeadSize / 16;       // k-steps of S^T and dP^T (channels)
  constexpr int kQuerySteps = kBlockM / 16;     // k-steps of dV and dK (queries)
  constexpr int kBlockRegisters = kBlockM / 2;  // S^T, dP^T: 64 keys x 64 queries over 128 threads
  constexpr int kGradRegisters = kHeadSize / 2;  // dK, dV: 64 keys x head_size
  constexpr int kGradQueryRegisters = 32;        // dQ: 64 queries x 64 channels
  constexpr int kGradQuerySteps = kBlockN / 16;   // k-steps (keys) of dQ = dS K

  extern __shared__ unsigned char shared[];
  const uint32_t key_tile = (shared_address(shared) + 1023) & ~1023u;  // (kBlockN, kHeadSize)
  const uint32_t value_tile = key_tile + Config::kKeyBytes;           // (kBlockN, kHeadSize)
  const uint32_t query_tiles = value_tile + Config::kKeyBytes;        // 2 x (kBlockM, kHeadSize)
  const uint32_t grad_output_tiles = query_tiles + 2 * Config::kQueryBytes;  // 2 x (kBlockM, kHeadSize)
  const uint32_t score_tile = grad_output_tiles + 2 * Config::kQueryBytes;   // (kBlockN keys, kBlockM queries): dS^T
  const uint32_t logsumexp_tiles = score_tile + Config::kScoreBytes;        // 2 x (kBlockM) fp32
  const uint32_t delta_tiles = logsumexp_tiles + 2 * kBlockM * 4;           // 2 x (kBlockM) fp32
  const float* logsumexp_shared = reinterpret_cast<const float*>(shared + (logsumexp_tiles - shared_address(shared)));
  const float* delta_shared = reinterpret_cast<const float*>(shared + (delta_tiles - shared_address(shared)));

  // Grid (groups, documents, key blocks): the CTAs go out key block by key block, so that the longest (the first key
  // blocks of causal documents, seen by every query block) start first and the short ones fill the tail.
  const int group = int(blockIdx.x), document = int(blockIdx.y);
  const int begin = p.cu_seqlens[document * p.cu_seqlens_stride];
  const int length = p.cu_seqlens[(document + 1) * p.cu_seqlens_stride] - begin;
  const int first_key = int(blockIdx.z) * kBlockN;
  if (first_key >= length) return;
  const int last_key = min(first_key + kBlockN, length) - 1;

  // The query blocks that may see some key of [first_key, last_key], for each head of the group (at least one: a key
  // is seen by its own query).
  const QueryBlocks seeing = query_blocks_seeing<kBlockM>(p, first_key, last_key, length);
  const int block_begin = seeing.begin, blocks = seeing.count;
  const int items = blocks * p.heads_per_group;

  const int warpgroup = int(threadIdx.x) / 128, lane = int(threadIdx.x) % 32;
  const int quad_row = lane / 4, quad_lane = lane % 4;
  const int warp_row = (int(threadIdx.x) % 128) / 32 * 16;  // the warp's first row in a warpgroup's 64-row fragment
  // This thread's key rows in the block: key_row and key_row + 8 (rows of the S^T, dP^T, dK, dV fragments).
  const int key_row = warpgroup * 64 + warp_row + quad_row;

  const T* key = static_cast<const T*>(p.key.data) + int64_t(begin) * p.key.token_stride + group * p.key.head_stride;
  const T* value =
      static_cast<const T*>(p.value.data) + int64_t(begin) * p.value.token_stride + group * p.value.head_stride;

  // Descriptors (wgmma.cuh). A step's descriptor is its tile's plus the step's byte offset >> 4; the tile
  // descriptors go through wgmma::opaque where they are used so that the compiler does not keep every step's
  // descriptor in registers.
  //   K-major, A = K / V (the warpgroup's 64 rows of a 128-row tile) and B = Q / dO (kBlockM rows): k-step s (16
  //     channels) in column block s / 4, 32 (s % 4) bytes in.
  //   MN-major, B = dO / Q for dV / dK (kBlockM rows = queries, column blocks of 64 channels kBlockM * 128 bytes
  //     apart), A = dS^T for dQ (128 rows = keys, column blocks of 64 queries 128 * 128 bytes apart), B = K for dQ
  //     (128 rows = keys, column blocks 128 * 128 bytes apart): k-step s (16 rows) at byte 2048 s.
  const uint64_t key_descriptor = wgmma::descriptor(key_tile + warpgroup * 64 * 128, 16, 1024);
  const uint64_t value_descriptor = wgmma::descriptor(value_tile + warpgroup * 64 * 128, 16, 1024);
  const uint64_t query_descriptor = wgmma::descriptor(query_tiles, 16, 1024);
  const uint64_t grad_output_descriptor = wgmma::descriptor(grad_output_tiles, 16, 1024);
  const uint64_t query_mn_descriptor = wgmma::descriptor(query_tiles, kBlockM * 128, 1024);
  const uint64_t grad_output_mn_descriptor = wgmma::descriptor(grad_output_tiles, kBlockM * 128, 1024);
  // dQ: the warpgroup's 64 query rows (from grad_query_row) and 64 channels (from grad_query_channels) over all keys.
  // A = the dS^T column block of the queries, B = the K column block of the channels.
  const int grad_query_row = Config::kSplitQueries ? warpgroup * 64 : 0;
  const int grad_query_channels = Config::kSplitQueries ? 0 : warpgroup * 64;
  const uint64_t score_descriptor =
      wgmma::descriptor(score_tile + (grad_query_row / 64) * kBlockN * 128, kBlockN * 128, 1024);
  const uint64_t key_mn_descriptor =
      wgmma::descriptor(key_tile + (grad_query_channels / 64) * kBlockN * 128, kBlockN * 128, 1024);
  constexpr uint64_t kStageStep = Config::kQueryBytes >> 4;
  const auto key_step = [](int s) { return uint64_t(((s / 4) * kBlockN * 128 + (s % 4) * 32) >> 4); };
  const auto query_step = [](int s) { return uint64_t(((s / 4) * kBlockM * 128 + (s % 4) * 32) >> 4); };
  const auto row_step = [](int s) { return uint64_t((s * 2048) >> 4); };

  // Issues the copies of item `item` (head, query block) into `stage`: Q and dO tiles, and lse and delta by the
  // first 128 threads.
  const auto load_item = [&](int item, int stage) {
    const int head = group * p.heads_per_group + item / blocks;
    const int first_query = (block_begin + item % blocks) * kBlockM;
    const T* query = static_cast<const T*>(p.query.data) + int64_t(begin) * p.query.token_stride +
                     head * p.query.head_stride;
    const T* grad_output = static_cast<const T*>(p.grad_output.data) + int64_t(begin) * p.grad_output.token_stride +
                           head * p.grad_output.head_stride;
    load_wgmma_tile<kBlockM, kHeadSize>(query_tiles + stage * Config::kQueryBytes, query, p.query.token_stride,
                                        first_query, length);
    load_wgmma_tile<kBlockM, kHeadSize>(grad_output_tiles + stage * Config::kQueryBytes, grad_output,
                                        p.grad_output.token_stride, first_query, length);
    const int index = int(threadIdx.x);
    if (index < 2 * kBlockM) {
      const int row = index % kBlockM;
      const bool valid = first_query + row < length;
      const int64_t token = begin + (valid ? first_query + row : 0);
      if (index < kBlockM)
        copy_async_4(logsumexp_tiles + (stage * kBlockM + row) * 4, p.logsumexp_log2 + head * p.tokens + token,
                     valid);
      else
        copy_async_4(delta_tiles + (stage * kBlockM + row) * 4, p.delta + head * p.tokens + token, valid);
    }
  };

  load_wgmma_tile<kBlockN, kHeadSize>(key_tile, key, p.key.token_stride, first_key, length);
  load_wgmma_tile<kBlockN, kHeadSize>(value_tile, value, p.value.token_stride, first_key, length);
  if (items > 0) load_item(0, 0);
  copy_async_commit();

  float grad_key[kGradRegisters], grad_value[kGradRegisters];
#pragma unroll
  for (int i = 0; i < kGradRegisters; ++i) grad_key[i] = grad_value[i] = 0.0f;

  for (int item = 0; item < items; ++item) {
    const int stage = item & 1;
    const int head = group * p.heads_per_group + item / blocks;
    const int first_query = (block_begin + item % blocks) * kBlockM;

    // (1) This item's tiles are visible to every thread and to the tensor cores; the previous item is done.
    copy_async_wait<0>();
    wgmma::proxy_fence();
    __syncthreads();
    if (item + 1 < items) load_item(item + 1, stage ^ 1);
    copy_async_commit();

    // S^T = K Q^T and dP^T = V dO^T, two batches.
    float scores[kBlockRegisters], grad_probabilities[kBlockRegisters];
    wgmma::wgmma_fence();
    {
      const uint64_t a = wgmma::opaque(key_descriptor), b = wgmma::opaque(query_descriptor + stage * kStageStep);
#pragma unroll
      for (int s = 0; s < kKSteps; ++s)
        wgmma::product_ss<T, kBlockM, false, false>(scores, a + key_step(s), b + query_step(s), s > 0);
      wgmma::commit();
    }
    {
      const uint64_t a = wgmma::opaque(value_descriptor),
                     b = wgmma::opaque(grad_output_descriptor + stage * kStageStep);
#pragma unroll
      for (int s = 0; s < kKSteps; ++s)
        wgmma::product_ss<T, kBlockM, false, false>(grad_probabilities, a + key_step(s), b + query_step(s), s > 0);
      wgmma::commit();
    }

    // P^T while dP^T runs, straight into A fragments (k-step j = queries 16 j .. 16 j + 15; register r holds fragment
    // elements 8 j + 2 r, + 1: key row key_row + 8 (r % 2), query columns 16 j + 8 (r / 2) + 2 q, + 1), so that the
    // fp32 scores die before dP^T arrives.
    wgmma::wait<1>();
    wgmma::fence_operands(scores);
    const bool boundary = first_key + kBlockN > length || (p.causal && first_key + kBlockN - 1 > first_query) ||
                          (p.window > 0 && first_query + kBlockM - 1 - first_key >= p.window);
    const float* logsumexp_row = logsumexp_shared + stage * kBlockM + quad_lane * 2;
    uint32_t probability_a[kQuerySteps][4];
#pragma unroll
    for (int j = 0; j < kQuerySteps; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float2 logsumexp = *reinterpret_cast<const float2*>(logsumexp_row + 16 * j + 8 * (r / 2));
        float probabilities[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float probability = fast_exp2(fmaf(scores[8 * j + 2 * r + h], p.scale_log2, h == 0 ? -logsumexp.x
                                                                                               : -logsumexp.y));
          if (boundary && !key_allowed(first_query + 16 * j + 8 * (r / 2) + 2 * quad_lane + h,
                                       first_key + key_row + 8 * (r % 2), length, p.causal, p.window))
            probability = 0.0f;
          probabilities[h] = probability;
        }
        probability_a[j][r] = pack<T>(probabilities[0], probabilities[1]);
      }

    // dS^T = P^T (dP^T - delta), with P^T as rounded for dV (what the products see), into A fragments.
    wgmma::wait<0>();
    wgmma::fence_operands(grad_probabilities);
    const float* delta_row = delta_shared + stage * kBlockM + quad_lane * 2;
    uint32_t grad_score_a[kQuerySteps][4];
#pragma unroll
    for (int j = 0; j < kQuerySteps; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float2 delta = *reinterpret_cast<const float2*>(delta_row + 16 * j + 8 * (r / 2));
        const float2 probability = unpack<T>(probability_a[j][r]);
        grad_score_a[j][r] = pack<T>(probability.x * (grad_probabilities[8 * j + 2 * r] - delta.x),
                                     probability.y * (grad_probabilities[8 * j + 2 * r + 1] - delta.y));
      }

    // dS^T to shared memory, rows = keys, kBlockM / 8 chunks per row (column blocks of 64 queries): register r of
    // k-step j is row
    // key_row + 8 (r % 2), chunk 2 j + r / 2, bytes 4 q .. 4 q + 3 of the chunk. Stored before the products that read
    // the fragments are issued (their registers are the products' operands until the wait).
#pragma unroll
    for (int j = 0; j < kQuerySteps; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const uint32_t address =
            score_tile + wgmma::swizzled_offset<kBlockN>(key_row + 8 * (r % 2), 2 * j + r / 2) + quad_lane * 4;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(grad_score_a[j][r]) : "memory");
      }
    wgmma::proxy_fence();

    // dV += P^T dO, dK += dS^T Q.
    wgmma::fence_operands(grad_value);
    wgmma::fence_operands(grad_key);
    wgmma::wgmma_fence();
    {
      const uint64_t b = wgmma::opaque(grad_output_mn_descriptor + stage * kStageStep);
#pragma unroll
      for (int j = 0; j < kQuerySteps; ++j)
        wgmma::product_rs<T, kHeadSize, true>(grad_value, probability_a[j], b + row_step(j), true);
    }
    {
      const uint64_t b = wgmma::opaque(query_mn_descriptor + stage * kStageStep);
#pragma unroll
      for (int j = 0; j < kQuerySteps; ++j)
        wgmma::product_rs<T, kHeadSize, true>(grad_key, grad_score_a[j], b + row_step(j), true);
    }
    wgmma::commit();

    // (2) Both warpgroups' dS^T are in shared memory: dQ = dS K, A = dS^T read transposed, B = K (MN-major).
    __syncthreads();
    float grad_query[kGradQueryRegisters];
    wgmma::wgmma_fence();
    {
      const uint64_t a = wgmma::opaque(score_descriptor), b = wgmma::opaque(key_mn_descriptor);
#pragma unroll
      for (int s = 0; s < kGradQuerySteps; ++s)
        wgmma::product_ss<T, 64, true, true>(grad_query, a + row_step(s), b + row_step(s), s > 0);
      wgmma::commit();
    }
    wgmma::wait<0>();
    wgmma::fence_operands(grad_query);
    wgmma::fence_operands(grad_value);
    wgmma::fence_operands(grad_key);

    // dQ fragment element 4 j + i: row grad_query_row + warp_row + quad_row + 8 (i / 2) of the item's queries,
    // channel grad_query_channels + 8 j + 2 q + i % 2. Unscaled sums into the scratch.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int query_index = first_query + grad_query_row + warp_row + quad_row + 8 * r;
      if (query_index >= length) continue;
      float* row = p.grad_query_sum + (int64_t(begin + query_index) * p.heads + head) * kHeadSize +
                   grad_query_channels + quad_lane * 2;
#pragma unroll
      for (int j = 0; j < 8; ++j)
        atomicAdd(reinterpret_cast<float2*>(row + 8 * j),
                  make_float2(grad_query[4 * j + 2 * r], grad_query[4 * j + 2 * r + 1]));
    }
  }

  copy_async_wait<0>();  // with no items, the K / V copies are still in flight: none may outlive the block

  // dK = scale dS^T Q, dV = P^T dO for the thread's key rows inside the document (fragment element 4 j + i: key row
  // key_row + 8 (i / 2), channel 8 j + 2 q + i % 2).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key_index = first_key + key_row + 8 * r;
    if (key_index >= length) continue;
    T* grad_key_row = static_cast<T*>(p.grad_key) + int64_t(begin + key_index) * p.grad_key_token_stride +
                      group * p.grad_key_head_stride + quad_lane * 2;
    T* grad_value_row = static_cast<T*>(p.grad_value) + int64_t(begin + key_index) * p.grad_value_token_stride +
                        group * p.grad_value_head_stride + quad_lane * 2;
#pragma unroll
    for (int j = 0; j < kHeadSize / 8; ++j) {
      *reinterpret_cast<uint32_t*>(grad_key_row + 8 * j) =
          pack<T>(grad_key[4 * j + 2 * r] * p.softmax_scale, grad_key[4 * j + 2 * r + 1] * p.softmax_scale);
      *reinterpret_cast<uint32_t*>(grad_value_row + 8 * j) =
          pack<T>(grad_value[4 * j + 2 * r], grad_value[4 * j + 2 * r + 1]);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Host

std::optional<std::string> supports_wgmma_backward(const AttentionBackwardArgs& args) {
  if (auto reason = backward_tiles_reason(args)) return reason;
  if (ceil_div(args.max_seqlen, kBlockN) > 65535)  // grid.z
    return fmt::format("max_seqlen {} is over {} tokens", args.max_seqlen, 65535 * kBlockN);
  return hopper_reason(args.query.device());
}

template <class T, int kHeadSize>
void launch_wgmma_kernel(const BackwardParams& params, int64_t max_seqlen, int64_t groups, int64_t documents,
                         cudaStream_t stream) {
  constexpr size_t kSharedBytes = WgmmaBackwardConfig<kHeadSize>::kSharedBytes;
  auto* kernel = &attention_backward_wgmma_kernel<T, kHeadSize>;
  FLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSharedBytes)));
  const dim3 grid(unsigned(groups), unsigned(documents), unsigned(ceil_div(max_seqlen, kBlockN)));
  kernel<<<grid, kThreads, kSharedBytes, stream>>>(params);
}

void launch_wgmma_main(const BackwardParams& params, DType dtype, int64_t head_size, int64_t max_seqlen,
                       int64_t groups, int64_t documents, cudaStream_t stream) {
  const auto for_head_size = [&]<class T>(std::type_identity<T>) {
    if (head_size == 64)
      launch_wgmma_kernel<T, 64>(params, max_seqlen, groups, documents, stream);
    else
      launch_wgmma_kernel<T, 128>(params, max_seqlen, groups, documents, stream);
  };
  if (dtype == DType::bfloat16)
    for_head_size(std::type_identity<bfloat16>{});
  else
    for_head_size(std::type_identity<float16>{});
}

void attention_backward_wgmma(const AttentionBackwardArgs& args) { attention_backward_steps(args, &launch_wgmma_main); }

}  // namespace

FLM_REGISTER_KERNEL(AttentionBackward, DeviceType::cuda, "wgmma", /*priority=*/200, KernelKind::optimized,
                    &supports_wgmma_backward, &attention_backward_wgmma,
                    "flash-attention-2 backward on Hopper wgmma (sm_90): 128-key blocks per CTA over two "
                    "warpgroups, K / V resident in swizzled shared memory, Q / dO double buffered (cp.async), "
                    "dK / dV in registers (no atomics), dQ = dS K on wgmma into an fp32 scratch (vector atomics); "
                    "bf16 / fp16, head_size 64 / 128");

}  // namespace fast_llm::kernels::cuda::attention

