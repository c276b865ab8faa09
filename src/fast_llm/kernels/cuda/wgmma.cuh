// Hopper warpgroup tensor-core products (wgmma, sm_90a) for the attention kernels: shared-memory matrix descriptors,
// the fences and waits around the asynchronous products, and the m64nNk16 instructions (N = 64, 128) with operands in
// shared memory (SS) or A in registers (RS). bf16 / fp16 inputs, fp32 accumulation.
//
// A warpgroup is 4 consecutive warps starting at a warp index divisible by 4; its 128 threads issue every wgmma
// together (.sync.aligned: never in divergent code). One m64nNk16 computes D (64 x N) (+)= A (64 x 16) B (16 x N).
// Shared-memory operands are in the canonical 128-byte-swizzled layout (swizzled_offset, descriptor), register
// operands in the fragments of product_rs, which are mma.sync's per warp (attention_tile.cuh); the fences a product
// needs are described at wgmma_fence.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "fast_llm/core/half.h"

namespace fast_llm::kernels::cuda::wgmma {

// Shared-memory operands use the canonical 128-byte-swizzled layout: a tile of R rows and 64 16-bit elements (128
// bytes) per row, 16-byte chunk c of row r stored at chunk c ^ (r % 8), so 8 rows form a 1024-byte swizzle atom; the
// tile must start on a 1024-byte boundary (the hardware applies the swizzle to the address bits, address bits 4-6 ^=
// bits 7-9). Wider rows (head_size 128) are split in column blocks of 64 elements, stored one after the other
// (block b of an R-row tile at byte b * R * 128). Descriptors:
//   K-major (the contraction dimension contiguous: Q and K for Q K^T, A and B with no transpose): stride byte offset =
//     1024 (from one 8-row atom to the next along M or N), leading byte offset unused (one k16 step, 32 bytes, lies
//     inside an atom); k-step s of a column block starts 32 s bytes into it (the swizzle is applied after the offset).
//   MN-major (N contiguous: V for P V, B transposed): 64 N-elements x 8 k-rows per atom; stride byte offset = 1024
//     (from one 8-row atom to the next along K), leading byte offset = R * 128 (from one 64-column block to the next
//     along N); k-step s starts at row 16 s, byte 2048 s.
// Descriptor bits (PTX ISA "Matrix Descriptor Format"): 0-13 start address >> 4, 16-29 leading byte offset >> 4,
// 32-45 stride byte offset >> 4, 49-51 base offset (0: atoms are 1024-byte aligned), 62-63 swizzle (1: 128 bytes).
//
// Byte offset of (row, chunk) in a canonical 128-byte-swizzled tile of `kRows` rows (chunk: 16 bytes of a row of
// kChunks chunks, split in column blocks of 8 chunks).
template <int kRows>
__device__ __forceinline__ uint32_t swizzled_offset(int row, int chunk) {
  return uint32_t((chunk / 8) * kRows * 128 + row * 128 + (((chunk % 8) ^ (row % 8)) * 16));
}

// A shared-memory matrix descriptor with 128-byte swizzling; `address` is a shared-window byte address.
__device__ __forceinline__ uint64_t descriptor(uint32_t address, uint32_t leading_bytes, uint32_t stride_bytes) {
  return uint64_t((address >> 4) & 0x3FFF) | (uint64_t((leading_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((stride_bytes >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}

// The same value, which the compiler can no longer see through: keeps it from hoisting values derived from it (every
// k-step's descriptor) out of loops into long-lived registers.
__device__ __forceinline__ uint64_t opaque(uint64_t value) {
  asm volatile("mov.b64 %0, %0;\n" : "+l"(value));
  return value;
}

// Ordering: shared memory written by ordinary stores or cp.async and then read by wgmma needs
// fence.proxy.async.shared::cta in the writing threads before the barrier that publishes it (proxy_fence). A wgmma
// reads and writes its registers asynchronously: wgmma_fence() before the first product of a batch (orders earlier
// register writes, of the accumulators and of A), commit() after the batch, wait<N>() before touching the results;
// fence_operands() keeps the compiler from moving reads of the accumulators above that wait.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most `kPending` committed batches of this warpgroup are still running.
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Shared memory written through the generic proxy (stores, cp.async) becomes visible to wgmma's async proxy.
__device__ __forceinline__ void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <int kCount>
__device__ __forceinline__ void fence_operands(float (&registers)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(registers[i])::"memory");
}
template <int kCount>
__device__ __forceinline__ void fence_operands(uint32_t (&registers)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+r"(registers[i])::"memory");
}

// The instructions, for TYPE "bf16" or "f16" (generated operand lists: N / 2 accumulators).
#define FLM_WGMMA_SS_64(TYPE)                                                                                     \
  asm volatile(                                                                                                   \
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %34, 0;\n"                                              \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {"                                            \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
      "%23, %24, %25, %26, %27, %28, %29, %30, %31}, "                                                            \
      "%32, %33, accumulate, 1, 1, %35, %36;\n}\n"                                                                \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),     \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),   \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])    \
      : "l"(a_descriptor), "l"(b_descriptor), "r"(int(accumulate)), "n"(int(kTransposeA)), "n"(int(kTransposeB)))

#define FLM_WGMMA_RS_64(TYPE)                                                                                       \
  asm volatile(                                                                                                     \
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %37, 0;\n"                                                \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {"                                              \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "   \
      "%23, %24, %25, %26, %27, %28, %29, %30, %31}, "                                                              \
      "{%32, %33, %34, %35}, %36, accumulate, 1, 1, %38;\n}\n"                                                      \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),             \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),       \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),     \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])      \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_descriptor), "r"(int(accumulate)), "n"(int(kTransposeB)))

#define FLM_WGMMA_SS_128(TYPE)                                                                                    \
  asm volatile(                                                                                                   \
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %66, 0;\n"                                              \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {"                                           \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, " \
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "     \
      "%64, %65, accumulate, 1, 1, %67, %68;\n}\n"                                                                \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),     \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),   \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),   \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),   \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),   \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),   \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])    \
      : "l"(a_descriptor), "l"(b_descriptor), "r"(int(accumulate)), "n"(int(kTransposeA)), "n"(int(kTransposeB)))

#define FLM_WGMMA_RS_128(TYPE)                                                                                      \
  asm volatile(                                                                                                     \
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %69, 0;\n"                                                \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {"                                             \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "   \
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "   \
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "       \
      "{%64, %65, %66, %67}, %68, accumulate, 1, 1, %70;\n}\n"                                                      \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),             \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),       \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),     \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),     \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),     \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),     \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),     \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])      \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_descriptor), "r"(int(accumulate)), "n"(int(kTransposeB)))

// d (+)= A B with A (64 x 16) and B (16 x N) from shared memory; `accumulate` false overwrites d.
template <class T, int N, bool kTransposeA, bool kTransposeB>
__device__ __forceinline__ void product_ss(float (&d)[N / 2], uint64_t a_descriptor, uint64_t b_descriptor,
                                           bool accumulate) {
  static_assert(std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>);
  if constexpr (N == 64) {
    if constexpr (std::is_same_v<T, bfloat16>)
      FLM_WGMMA_SS_64("bf16");
    else
      FLM_WGMMA_SS_64("f16");
  } else {
    static_assert(N == 128);
    if constexpr (std::is_same_v<T, bfloat16>)
      FLM_WGMMA_SS_128("bf16");
    else
      FLM_WGMMA_SS_128("f16");
  }
}

// Register fragments (PTX ISA, "Register Fragments and Shared Memory Matrix Layouts" of wgmma .m64nNk16), for thread
// t of the warpgroup: warp w = t / 32, lane = t % 32, group g = lane / 4, quad lane q = lane % 4.
//   D, fp32, N / 2 registers: d[4 j + i] holds row 16 w + g + 8 (i / 2), column 8 j + 2 q + (i % 2), for the N / 8
//     column tiles j: per warp, exactly the C fragments of mma.sync m16n8k16 for n-tiles j = 0 .. N / 8 - 1.
//   A from registers, 4 registers of 2 16-bit elements: a0 (row 16 w + g, columns 2 q, 2 q + 1), a1 (row + 8, same
//     columns), a2 (row 16 w + g, columns 2 q + 8, + 9), a3 (row + 8, columns 2 q + 8, + 9): per warp, the A fragment
//     of mma.sync m16n8k16. So a D of one product converts to the A of the next in registers: column tiles 2 j and
//     2 j + 1 of D are k-step j of A (attention_tile.cuh accumulators_to_a).
//
// d (+)= A B with A (64 x 16) from registers (the fragment above) and B (16 x N) from shared memory.
template <class T, int N, bool kTransposeB>
__device__ __forceinline__ void product_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b_descriptor,
                                           bool accumulate) {
  static_assert(std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>);
  if constexpr (N == 64) {
    if constexpr (std::is_same_v<T, bfloat16>)
      FLM_WGMMA_RS_64("bf16");
    else
      FLM_WGMMA_RS_64("f16");
  } else {
    static_assert(N == 128);
    if constexpr (std::is_same_v<T, bfloat16>)
      FLM_WGMMA_RS_128("bf16");
    else
      FLM_WGMMA_RS_128("f16");
  }
}

#undef FLM_WGMMA_SS_64
#undef FLM_WGMMA_RS_64
#undef FLM_WGMMA_SS_128
#undef FLM_WGMMA_RS_128

}  // namespace fast_llm::kernels::cuda::wgmma
