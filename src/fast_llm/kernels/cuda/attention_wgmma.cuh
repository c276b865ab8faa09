// What the two Hopper attention kernels (attention_forward_wgmma.cu, attention_backward_wgmma.cu) share: their two
// computing warpgroups and the copy of a (rows, head_size) slice into a wgmma operand tile; and for the backward's
// producer warpgroup, the register split, the hand-overs and a rolled copy.
#pragma once

#include "fast_llm/kernels/cuda/attention_tile.cuh"
#include "fast_llm/kernels/cuda/wgmma.cuh"

namespace fast_llm::kernels::cuda::attention {

// Both run two warpgroups that compute (the consumers). The backward adds a producer warpgroup, which copies the
// operands into shared memory and adds the dQ blocks to their sums; setmaxnreg moves registers from it to the
// consumers: 2 x 128 x 232 + 128 x 40 = 64512 of the 65536. (The same producer in the forward, which has no atomics,
// was measured and not kept: docs/benchmarks.md.)
constexpr int kWgmmaThreads = 256;  // the consumers
constexpr int kWgmmaProducerThreads = 128;
constexpr int kWgmmaConsumerRegisters = 232, kWgmmaProducerRegisters = 40;

__device__ __forceinline__ void claim_consumer_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWgmmaConsumerRegisters));
}
__device__ __forceinline__ void release_producer_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWgmmaProducerRegisters));
}

// Named barriers (id 1-15; 0 is __syncthreads') for the hand-overs: the side that hands over arrives (and goes on),
// the side that takes over syncs (waits for `threads` arrivals, its own included). A barrier orders the ordinary
// memory accesses of the threads before it; shared memory written by cp.async and read by wgmma also needs the
// writer's wait and proxy fence before it arrives.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Copies rows [first_row, first_row + kRows) of a (tokens, head_size) slice into a canonical swizzled tile at shared
// address `tile`, zeros past `length`. A thread copies the same chunk of rows row0, row0 + kRowStep, ...: the source
// pointer advances by a stride the compiler cannot see through (wgmma::opaque), else it would keep every step's
// 64-bit address alive across the attention loop.
template <int kRows, int kHeadSize, class T>
__device__ __forceinline__ void load_wgmma_tile(uint32_t tile, const T* source, int64_t token_stride, int first_row,
                                          int length) {
  constexpr int kChunks = kHeadSize / 8;
  constexpr int kRowStep = kWgmmaThreads / kChunks;
  static_assert(kWgmmaThreads % kChunks == 0 && kRows % kRowStep == 0, "whole copies per thread");
  const int row0 = int(threadIdx.x) / kChunks, chunk = int(threadIdx.x) % kChunks;
  const int64_t step_stride = int64_t(wgmma::opaque(uint64_t(token_stride * kRowStep)));
  // An invalid row reads nothing, but its address must be mapped: the document's first row is.
  const T* from = source + int64_t(first_row + row0) * token_stride + chunk * 8;
#pragma unroll
  for (int step = 0; step < kRows / kRowStep; ++step) {
    const int row = row0 + step * kRowStep;
    const bool valid = first_row + row < length;
    copy_async_16(tile + wgmma::swizzled_offset<kRows>(row, chunk), valid ? from : source, valid);
    from += step_stride;
  }
}

// The producer's copy of rows [first_row, first_row + kRows) of a (tokens, head_size) slice into a canonical swizzled
// tile (as load_wgmma_tile, zeros past `length`) by kThreadCount threads (`thread` in [0, kThreadCount)), in a loop
// kept rolled: unrolled, its addresses would not fit the producer's registers.
template <int kRows, int kHeadSize, int kThreadCount, class T>
__device__ __forceinline__ void load_wgmma_tile_rolled(uint32_t tile, const T* source, int64_t token_stride,
                                                       int first_row, int length, int thread) {
  constexpr int kChunks = kHeadSize / 8;
  constexpr int kRowStep = kThreadCount / kChunks;
  static_assert(kThreadCount % kChunks == 0 && kRows % kRowStep == 0, "whole copies per thread");
  const int row0 = thread / kChunks, chunk = thread % kChunks;
  // An invalid row reads nothing, but its address must be mapped: the document's first row is.
  const T* from = source + int64_t(first_row + row0) * token_stride + chunk * 8;
#pragma unroll 1
  for (int row = row0; row < kRows; row += kRowStep, from += token_stride * kRowStep) {
    const bool valid = first_row + row < length;
    copy_async_16(tile + wgmma::swizzled_offset<kRows>(row, chunk), valid ? from : source, valid);
  }
}

}  // namespace fast_llm::kernels::cuda::attention
