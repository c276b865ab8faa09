// One-read softmax statistics of a row of logits, for the CUDA head losses that need a row's logsumexp (and its
// expectation of z) before a pass of their own (policy_gradient.cu and dpo.cu, variant "parallel"). Every thread keeps
// an online SoftmaxState (max, sum exp(z - max), sum exp(z - max) z) over its columns, reading them once with 16-byte
// loads where the row allows and one element at a time for the tail; the block merges the states in a fixed order (a
// butterfly over each warp, then the warps in order). The same row, block size and `vectorized` give the same bits in
// every run; another block size or layout another rounding of the same sums.
#pragma once

#include "fast_llm/kernels/cuda/common.cuh"

namespace fast_llm::kernels::cuda {

// A row's softmax statistics over the logits seen so far, relative to their maximum: sum exp(z - max) and
// sum exp(z - max) z. Empty: max = -inf, sums 0 (a non-empty state has sum >= 1, or NaN, which merging keeps).
// Trivial, for shared memory.
struct SoftmaxState {
  float max, sum, weighted;
};

__device__ __forceinline__ void add_logit(SoftmaxState& state, float z) {
  if (z == -INFINITY) return;  // exp(-inf) adds nothing, and exp(-inf - -inf) before a finite logit would be NaN
  if (z > state.max) {
    const float rescale = expf(state.max - z);  // 0 for the first logit
    state.sum = state.sum * rescale + 1.0f;
    state.weighted = state.weighted * rescale + z;
    state.max = z;
  } else {
    const float weight = expf(z - state.max);
    state.sum += weight;
    state.weighted += weight * z;
  }
}

// Symmetric in its arguments bit for bit (x + y == y + x; the products rounded apart, never contracted into a fused
// multiply-add, which would round one of them only), so both lanes of a butterfly step get the same state.
__device__ __forceinline__ SoftmaxState merge_states(const SoftmaxState& a, const SoftmaxState& b) {
  if (a.sum == 0.0f) return b;
  if (b.sum == 0.0f) return a;
  const float max = fmaxf(a.max, b.max);
  const float rescale_a = expf(a.max - max), rescale_b = expf(b.max - max);
  return {max, __fmul_rn(a.sum, rescale_a) + __fmul_rn(b.sum, rescale_b),
          __fmul_rn(a.weighted, rescale_a) + __fmul_rn(b.weighted, rescale_b)};
}

// This thread's state over its columns of a row of `count` values, z = logit(value): the 16-byte vectors
// threadIdx.x, threadIdx.x + kBlockThreads, ... where `vectorized` (the row starts 16-byte aligned), then the columns
// after the last full vector (all of them otherwise) one by one.
template <int kBlockThreads, class T, class Logit>
__device__ __forceinline__ SoftmaxState thread_softmax_state(const T* row, int64_t count, bool vectorized,
                                                             const Logit& logit) {
  constexpr int kVector = kVectorElements<T>;
  SoftmaxState state{-INFINITY, 0.0f, 0.0f};
  const int64_t vectors = vectorized ? count / kVector : 0;
#pragma unroll 2  // two loads in flight per thread before the dependent updates
  for (int64_t vector = threadIdx.x; vector < vectors; vector += kBlockThreads) {
    float values[kVector];
    load_floats<kVector>(row + vector * kVector, values);
#pragma unroll
    for (int i = 0; i < kVector; ++i) add_logit(state, logit(values[i]));
  }
  for (int64_t column = vectors * kVector + threadIdx.x; column < count; column += kBlockThreads)
    add_logit(state, logit(load(row[column])));
  return state;
}

// The block's state, valid in thread 0: a butterfly over each warp (every lane the same bits), then the warps in
// order. `scratch` holds one state per warp; every thread of the block must call it (it synchronises the block
// before writing scratch, so successive calls may share it).
template <int kBlockThreads>
__device__ __forceinline__ SoftmaxState block_softmax_state(SoftmaxState state, SoftmaxState* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const SoftmaxState other{__shfl_xor_sync(0xffffffffu, state.max, offset),
                             __shfl_xor_sync(0xffffffffu, state.sum, offset),
                             __shfl_xor_sync(0xffffffffu, state.weighted, offset)};
    state = merge_states(state, other);
  }
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  __syncthreads();  // the previous call's reader is done with scratch
  if (lane == 0) scratch[warp] = state;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int i = 1; i < kBlockThreads / 32; ++i) state = merge_states(state, scratch[i]);
  return state;
}

}  // namespace fast_llm::kernels::cuda
