// What the two Hopper attention kernels (attention_forward_wgmma.cu, attention_backward_wgmma.cu) share: their CTA
// shape and the copy of a (rows, head_size) slice into a wgmma operand tile.
#pragma once

#include "fast_llm/kernels/cuda/attention_tile.cuh"
#include "fast_llm/kernels/cuda/wgmma.cuh"

namespace fast_llm::kernels::cuda::attention {

// Both run two warpgroups per CTA.
constexpr int kWgmmaThreads = 256;

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

}  // namespace fast_llm::kernels::cuda::attention
