// Flash attention backward on Hopper tensor cores (kernels/attention.h), variant "wgmma": the flash-attention-2
// backward with all five products on wgmma (sm_90a, wgmma.cuh), bf16 / fp16 inputs, fp32 accumulation, head sizes 64
// and 128, layouts as "flash". Same contract, preprocess (delta = rowsum(dO * O), lse log2 e), fp32 dQ sums and final
// cast as "flash" (attention_backward.cuh); what differs is the main kernel.
//
// One CTA per (key/value group, document, block of kBlockN = 128 keys), one per multiprocessor, the longest (the first
// key blocks of causal documents) first. Three warpgroups with their own jobs (warp specialisation): two consumers of
// 64 key rows each do all the arithmetic, with K and V in shared memory and dK, dV in fp32 registers for the whole CTA
// (each owns its key rows: no atomics, deterministic); a producer whose loader (warps 8-9) copies the next item's Q,
// dO, lse log2 e and delta into the other of two stages while the consumers work, and whose reducer (warps 10-11) adds
// each item's staged dQ block to the fp32 dQ sums with float4 atomics, off the consumers' path. The producer runs on 40
// registers (setmaxnreg), the consumers on 232. The products per item, the masks and the hand-overs are described at
// the kernel and at its barriers; measurements and what was tried, in docs/benchmarks.md.
#include "fast_llm/kernels/cuda/attention_backward.cuh"
#include "fast_llm/kernels/cuda/attention_wgmma.cuh"
#include "fast_llm/kernels/cuda/wgmma.cuh"

namespace fast_llm::kernels::cuda::attention {
namespace {

constexpr int kBlockN = 128;  // keys per CTA: two consumer warpgroups of 64
constexpr int kConsumerThreads = kWgmmaThreads;
constexpr int kLoaderThreads = 64;   // warps 8 and 9
constexpr int kReducerThreads = 64;  // warps 10 and 11
constexpr int kThreads = kConsumerThreads + kWgmmaProducerThreads;
static_assert(kLoaderThreads + kReducerThreads == kWgmmaProducerThreads);

// Synchronisation: named barriers pair each hand-over (bar.arrive by the side that hands over, bar.sync by the side
// that waits): stage full (loader -> consumers: its copies landed and went through the proxy fence) and free
// (consumers -> loader: every product that read the stage is done), dQ block full (consumers -> reducer) and free
// (reducer -> consumers), and, among the consumers only, one before dS^T is overwritten (the other warpgroup's dQ
// product of the previous item read it) and one after both halves are stored. Their ids and thread counts:
constexpr int kStageFull = 1;      // + stage
constexpr int kStageFree = 3;      // + stage
constexpr int kGradQueryFull = 5;  // + buffer
constexpr int kGradQueryFree = 7;  // + buffer
constexpr int kConsumersOnly = 9;
constexpr int kStageBarrierThreads = kLoaderThreads + kConsumerThreads;
constexpr int kGradQueryBarrierThreads = kReducerThreads + kConsumerThreads;

// kBlockM queries per item: 128 at head_size 64 (S^T and dP^T of m64n128: twice the work per barrier for the same
// registers as head_size 128 with 64 queries), 64 at 128. The two consumer warpgroups split dQ = dS K (64 x 64 each)
// over all 128 keys of the CTA: by queries at head_size 64, by channels at 128.
template <int kHeadSize>
struct WgmmaBackwardConfig {
  static_assert(kHeadSize == 64 || kHeadSize == 128);
  static constexpr int kBlockM = kHeadSize == 64 ? 128 : 64;
  static constexpr bool kSplitQueries = kHeadSize == 64;
  static constexpr uint32_t kKeyBytes = kBlockN * kHeadSize * 2;    // K or V tile
  static constexpr uint32_t kQueryBytes = kBlockM * kHeadSize * 2;  // one Q or dO stage
  static constexpr uint32_t kScoreBytes = kBlockN * kBlockM * 2;    // dS^T
  static constexpr uint32_t kRowBytes = 2 * kBlockM * 4;            // lse or delta, two stages
  // Tiles are 1024-byte aligned, in the canonical 128-byte swizzle of wgmma.cuh. A staged dQ block: fp32 rows padded by
  // 8 floats, so that a warp's float2 stores (8 rows x 4 quad lanes) hit 32 different banks.
  static constexpr uint32_t kGradQueryPitch = (kHeadSize + 8) * 4;
  static constexpr uint32_t kGradQueryBytes = kBlockM * kGradQueryPitch;
  // K, V, 2 Q stages, 2 dO stages, dS^T, lse and delta, 2 dQ buffers, and slack to start the tiles on a 1024-byte
  // boundary: 203 KiB at head_size 64, 214 KiB at 128.
  static constexpr size_t kSharedBytes = 2 * size_t(kKeyBytes) + 4 * size_t(kQueryBytes) + kScoreBytes +
                                         2 * kRowBytes + 2 * size_t(kGradQueryBytes) + 1024;
};

// The CTA walks every (query head of the group, block of kBlockM queries: 128 at head_size 64, 64 at 128) that may
// see its keys. Per item and consumer warpgroup, in the transposed orientation (rows = the warpgroup's keys):
//   S^T = K Q^T      m64n{kBlockM}k16 x head_size / 16, A = K rows, B = Q rows, both K-major in shared memory;
//   dP^T = V dO^T    likewise, issued right behind S^T: P^T = exp2(S^T scale log2 e - lse log2 e) is computed while it
//                    runs, straight into A fragments (rounded to T: column tiles 2 j, 2 j + 1 of an accumulator are
//                    k-step j of an A fragment, wgmma.cuh);
//   dV += P^T dO     m64n{head_size}k16 x kBlockM / 16, A = P^T / dS^T from registers, B = dO / Q with rows =
//   dK += dS^T Q     queries = the contraction, channels contiguous: MN-major; dV is issued as soon as P^T is
//                    there and runs while dS^T = P^T (dP^T - delta) is computed in registers (P^T as rounded), dK
//                    once dS^T is;
//   dQ = dS K        dS^T is also stored to shared memory (stmatrix; rows = keys, queries contiguous), and once both
//                    halves are there m64n64k16 x 8 over all 128 keys, A = dS read transposed (MN-major: queries
//                    contiguous), B = K (rows = keys = the contraction, channels contiguous: MN-major). Warpgroup w
//                    takes queries [64 w, 64 w + 64) at head_size 64, channels [64 w, 64 w + 64) at 128; the block
//                    goes to the reducer through shared memory.
// Scaling: dK and dQ are the gradients of the scaled scores times softmax_scale, applied at the dK store and in the
// dQ cast. With rotary tables (kernels/attention.h) dK goes through the inverse rotation in registers before its
// store, and dQ in the cast, which saves rotary_apply's two passes over them.
//
// Masks as "flash": query blocks no key of the CTA may see are skipped; per-element masks only on boundary items, in
// their own copy of the P^T loop.
// Query rows past the document's end read zeros (Q, dO, lse, delta): their probabilities are 1, but their dP^T and
// delta are 0, so their dS^T, and their dV and dK contributions, are 0; their dQ rows are not added. Key rows past the
// end are zero, masked and not stored. A warpgroup whose 64 keys a query block cannot see at all still runs (P = 0
// everywhere).
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
  const uint32_t grad_query_tiles = delta_tiles + 2 * kBlockM * 4;          // 2 x (kBlockM rows) fp32, padded
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

  // Roles: one branch per warpgroup (setmaxnreg needs it).
  if (threadIdx.x >= kConsumerThreads) {
    release_producer_registers();
    const int thread = int(threadIdx.x) - kConsumerThreads;
    if (thread < kLoaderThreads) {
      // Loader: Q, dO, lse log2 e and delta of each item into its stage, once the consumers are done with the item
      // two back that used it.
      for (int item = 0; item < items; ++item) {
        const int stage = item & 1;
        if (item >= 2) named_barrier_sync(kStageFree + stage, kStageBarrierThreads);
        const int head = group * p.heads_per_group + item / blocks;
        const int first_query = (block_begin + item % blocks) * kBlockM;
        const T* query = static_cast<const T*>(p.query.data) + int64_t(begin) * p.query.token_stride +
                         head * p.query.head_stride;
        const T* grad_output = static_cast<const T*>(p.grad_output.data) +
                               int64_t(begin) * p.grad_output.token_stride + head * p.grad_output.head_stride;
        load_wgmma_tile_rolled<kBlockM, kHeadSize, kLoaderThreads>(
            query_tiles + stage * Config::kQueryBytes, query, p.query.token_stride, first_query, length, thread);
        load_wgmma_tile_rolled<kBlockM, kHeadSize, kLoaderThreads>(grad_output_tiles + stage * Config::kQueryBytes,
                                                                   grad_output, p.grad_output.token_stride,
                                                                   first_query, length, thread);
        for (int index = thread; index < 2 * kBlockM; index += kLoaderThreads) {
          const int row = index % kBlockM;
          const bool valid = first_query + row < length;
          const int64_t token = begin + (valid ? first_query + row : 0);
          if (index < kBlockM)
            copy_async_4(logsumexp_tiles + (stage * kBlockM + row) * 4, p.logsumexp_log2 + head * p.tokens + token,
                         valid);
          else
            copy_async_4(delta_tiles + (stage * kBlockM + row) * 4, p.delta + head * p.tokens + token, valid);
        }
        copy_async_commit();
        copy_async_wait<0>();
        wgmma::proxy_fence();
        named_barrier_arrive(kStageFull + stage, kStageBarrierThreads);
      }
    } else {
      // Reducer: each staged dQ block into the fp32 sums, rows inside the document only, 16 bytes per atomic.
      constexpr int kVectors = kHeadSize / 4;
      const int reducer = thread - kLoaderThreads;
      for (int item = 0; item < items; ++item) {
        const int buffer = item & 1;
        named_barrier_sync(kGradQueryFull + buffer, kGradQueryBarrierThreads);
        const int head = group * p.heads_per_group + item / blocks;
        const int first_query = (block_begin + item % blocks) * kBlockM;
        const int rows = min(kBlockM, length - first_query);
        const uint32_t tile = grad_query_tiles + buffer * Config::kGradQueryBytes;
        float* sums = p.grad_query_sum + (int64_t(begin + first_query) * p.heads + head) * kHeadSize;
#pragma unroll 2
        for (int index = reducer; index < rows * kVectors; index += kReducerThreads) {
          const int row = index / kVectors, vector = index % kVectors;
          float4 value;
          asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                       : "=f"(value.x), "=f"(value.y), "=f"(value.z), "=f"(value.w)
                       : "r"(tile + row * Config::kGradQueryPitch + vector * 16)
                       : "memory");
          atomicAdd(reinterpret_cast<float4*>(sums + int64_t(row) * p.heads * kHeadSize) + vector, value);
        }
        if (item + 2 < items) named_barrier_arrive(kGradQueryFree + buffer, kGradQueryBarrierThreads);
      }
    }
  } else {
    claim_consumer_registers();
    const int warpgroup = int(threadIdx.x) / 128, lane = int(threadIdx.x) % 32;
    const int quad_row = lane / 4, quad_lane = lane % 4;
    const int warp_row = (int(threadIdx.x) % 128) / 32 * 16;  // the warp's first row in a warpgroup's 64-row fragment
    // This thread's key rows in the block: key_row and key_row + 8 (rows of the S^T, dP^T, dK, dV fragments).
    const int key_row = warpgroup * 64 + warp_row + quad_row;
    // The dS^T row this lane names in the stmatrix stores: row lane % 8 of matrix lane / 8 (rows + 8 (r % 2)).
    const int score_store_row = warpgroup * 64 + warp_row + lane % 8 + 8 * ((lane / 8) % 2);

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

    // K and V, by the consumers, for the whole CTA.
    load_wgmma_tile<kBlockN, kHeadSize>(key_tile, key, p.key.token_stride, first_key, length);
    load_wgmma_tile<kBlockN, kHeadSize>(value_tile, value, p.value.token_stride, first_key, length);
    copy_async_commit();
    copy_async_wait<0>();
    wgmma::proxy_fence();
    named_barrier_sync(kConsumersOnly, kConsumerThreads);

    float grad_key[kGradRegisters], grad_value[kGradRegisters];
#pragma unroll
    for (int i = 0; i < kGradRegisters; ++i) grad_key[i] = grad_value[i] = 0.0f;

    for (int item = 0; item < items; ++item) {
      const int stage = item & 1;
      const int first_query = (block_begin + item % blocks) * kBlockM;

      // The loader filled this item's stage (and fenced it for the tensor cores).
      named_barrier_sync(kStageFull + stage, kStageBarrierThreads);

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
      // Two copies of the loop, so that the items off the mask boundaries (most of them) carry no per-element mask
      // test: a test under `if (boundary)` inside the loop still cost its compares and predicates per element.
      const float* logsumexp_row = logsumexp_shared + stage * kBlockM + quad_lane * 2;
      uint32_t probability_a[kQuerySteps][4];
      const auto exponentiate = [&]<bool kMasked>() {
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
              if (kMasked && !key_allowed(first_query + 16 * j + 8 * (r / 2) + 2 * quad_lane + h,
                                          first_key + key_row + 8 * (r % 2), length, p.causal, p.window))
                probability = 0.0f;
              probabilities[h] = probability;
            }
            probability_a[j][r] = pack<T>(probabilities[0], probabilities[1]);
          }
      };
      if (boundary)
        exponentiate.template operator()<true>();
      else
        exponentiate.template operator()<false>();

      // dV += P^T dO, issued now: it runs while dS^T is computed (faster than issuing it with dK below,
      // docs/benchmarks.md).
      wgmma::fence_operands(grad_value);
      wgmma::wgmma_fence();
      {
        const uint64_t b = wgmma::opaque(grad_output_mn_descriptor + stage * kStageStep);
#pragma unroll
        for (int j = 0; j < kQuerySteps; ++j)
          wgmma::product_rs<T, kHeadSize, true>(grad_value, probability_a[j], b + row_step(j), true);
        wgmma::commit();
      }

      // dS^T = P^T (dP^T - delta), with P^T as rounded for dV (what the products see), into A fragments, once dP^T is
      // there (dV may still run).
      wgmma::wait<1>();
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

      // The other consumer warpgroup's dQ product of the previous item, which read the dS^T tile, is done.
      named_barrier_sync(kConsumersOnly, kConsumerThreads);
      // dS^T to shared memory, rows = keys, kBlockM / 8 chunks per row (column blocks of 64 queries): register r of
      // k-step j is row key_row + 8 (r % 2), chunk 2 j + r / 2, bytes 4 q .. 4 q + 3 of the chunk, i.e. the four 8 x 8
      // matrices of one stmatrix.x4, whose row k of matrix r lane 8 r + k names (one instruction per k-step instead
      // of four 4-byte stores). Stored before the products that read the fragments are issued (their registers are
      // the products' operands until the wait).
#pragma unroll
      for (int j = 0; j < kQuerySteps; ++j)
        store_matrix_x4(score_tile + wgmma::swizzled_offset<kBlockN>(score_store_row, 2 * j + lane / 16),
                        grad_score_a[j]);
      wgmma::proxy_fence();

      // dK += dS^T Q.
      wgmma::fence_operands(grad_key);
      wgmma::wgmma_fence();
      {
        const uint64_t b = wgmma::opaque(query_mn_descriptor + stage * kStageStep);
#pragma unroll
        for (int j = 0; j < kQuerySteps; ++j)
          wgmma::product_rs<T, kHeadSize, true>(grad_key, grad_score_a[j], b + row_step(j), true);
      }
      wgmma::commit();

      // Both warpgroups' dS^T are in shared memory: dQ = dS K, A = dS^T read transposed, B = K (MN-major).
      named_barrier_sync(kConsumersOnly, kConsumerThreads);
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

      // Every product that read this stage is done: the loader may refill it (for item + 2, if there is one).
      if (item + 2 < items) named_barrier_arrive(kStageFree + stage, kStageBarrierThreads);

      // dQ fragment element 4 j + i: row grad_query_row + warp_row + quad_row + 8 (i / 2) of the item's queries,
      // channel grad_query_channels + 8 j + 2 q + i % 2, staged for the reducer in buffer `stage` once it has added
      // what that buffer held (item - 2). Unscaled sums.
      if (item >= 2) named_barrier_sync(kGradQueryFree + stage, kGradQueryBarrierThreads);
      const uint32_t grad_query_tile = grad_query_tiles + stage * Config::kGradQueryBytes;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int query_row = grad_query_row + warp_row + quad_row + 8 * r;
        const uint32_t row =
            grad_query_tile + query_row * Config::kGradQueryPitch + (grad_query_channels + quad_lane * 2) * 4;
#pragma unroll
        for (int j = 0; j < 8; ++j)
          asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(row + 32 * j), "f"(grad_query[4 * j + 2 * r]),
                       "f"(grad_query[4 * j + 2 * r + 1])
                       : "memory");
      }
      named_barrier_arrive(kGradQueryFull + stage, kGradQueryBarrierThreads);
    }

    // dK = scale dS^T Q, dV = P^T dO for the thread's key rows inside the document (fragment element 4 j + i: key row
    // key_row + 8 (i / 2), channel 8 j + 2 q + i % 2). With rotary tables dK goes through the inverse rotation first:
    // channels c and c + head_size / 2 are elements 4 j + i and 4 (j + head_size / 16) + i of the same thread.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key_index = first_key + key_row + 8 * r;
      if (key_index >= length) continue;
      if (p.rotary.cos != nullptr) {
        const int64_t table_row = int64_t(begin + key_index) * p.rotary.stride + quad_lane * 2;
#pragma unroll
        for (int j = 0; j < kHeadSize / 16; ++j) {
          const float2 cos = *reinterpret_cast<const float2*>(p.rotary.cos + table_row + 8 * j);
          const float2 sin = *reinterpret_cast<const float2*>(p.rotary.sin + table_row + 8 * j);
          rotate_pair(grad_key[4 * j + 2 * r], grad_key[4 * (j + kHeadSize / 16) + 2 * r], cos.x, -sin.x);
          rotate_pair(grad_key[4 * j + 2 * r + 1], grad_key[4 * (j + kHeadSize / 16) + 2 * r + 1], cos.y, -sin.y);
        }
      }
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

void attention_backward_wgmma(const AttentionBackwardArgs& args) {
  attention_backward_steps(args, &launch_wgmma_main, /*main_unrotates_key=*/true);
}

}  // namespace

FLM_REGISTER_KERNEL(AttentionBackward, DeviceType::cuda, "wgmma", /*priority=*/200, KernelKind::optimized,
                    &supports_wgmma_backward, &attention_backward_wgmma,
                    "flash-attention-2 backward on Hopper wgmma (sm_90): 128-key blocks per CTA over two consumer "
                    "warpgroups (K / V resident in swizzled shared memory, dK / dV in registers, no atomics) and a "
                    "producer warpgroup that loads the next Q / dO stage (cp.async) and adds the dQ blocks to an fp32 "
                    "scratch (float4 atomics); bf16 / fp16, head_size 64 / 128");

}  // namespace fast_llm::kernels::cuda::attention
