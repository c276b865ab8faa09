// One consumer warpgroup of the Hopper attention forward (attention_forward_wgmma.cu): its 64 query rows' scores,
// probabilities, output and online-softmax state in registers, and the steps of the flash-attention-2 loop on them.
// Both forward kernels run two of these; they differ only in who copies the tiles and how the hand-overs are made.
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
#pragma once

#include "fast_llm/kernels/cuda/attention_forward.cuh"
#include "fast_llm/kernels/cuda/wgmma.cuh"

namespace fast_llm::kernels::cuda::attention {

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

}  // namespace fast_llm::kernels::cuda::attention
