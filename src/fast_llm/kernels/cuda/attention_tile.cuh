// Tile primitives of the flash attention kernels (attention_forward.cu, attention_backward.cu): tensor-core
// mma.sync m16n8k16 with fp32 accumulation, ldmatrix fragment loads, cp.async copies into swizzled shared memory, and
// what the CUDA attention variants ask of their arguments beyond the op's contract. The fragment layouts and the
// swizzle are described where they are used.
#pragma once

#include "fast_llm/kernels/cuda/common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <vector>

#include "fast_llm/kernels/attention.h"

namespace fast_llm::kernels::cuda::attention {

constexpr float kLog2e = 1.4426950408889634f;

// ---------------------------------------------------------------------------------------------------------------------
// Device: shared-memory addressing.

// Shared-memory tiles are (rows, head_size) 16-bit elements in 16-byte chunks; chunk c of row r is stored at chunk
// c ^ (r % 8). The eight rows an ldmatrix matrix reads then hit eight different 16-byte bank groups, as do the eight
// chunks a quarter-warp writes with cp.async: no bank conflicts on either side. swizzled: the element offset of
// (row, chunk) in such a tile of `kChunks` 16-byte chunks per row.
template <int kChunks>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  static_assert(kChunks % 8 == 0, "rows of at least 64 16-bit elements");
  return row * kChunks * 8 + ((chunk ^ (row & 7)) * 8);
}

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return uint32_t(__cvta_generic_to_shared(pointer));
}

// ---------------------------------------------------------------------------------------------------------------------
// Device: asynchronous copies. A copy with `valid` false reads nothing and fills the 16 bytes with zeros (rows past a
// document's end: zeros keep 0 * garbage from turning into NaN); its source must still be a mapped address.

__device__ __forceinline__ void copy_async_16(uint32_t destination, const void* source, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source),
               "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void copy_async_4(uint32_t destination, const void* source, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(destination), "l"(source), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `kPending` committed groups of this thread are still in flight.
template <int kPending>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// ---------------------------------------------------------------------------------------------------------------------
// Device: fragments and the tensor-core product.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), for lane = 4 * group + quad_lane:
//   A (16 x 16, row-major), 4 registers of 2 elements: a0 (row group, cols 2q, 2q+1), a1 (row group + 8, same cols),
//     a2 (row group, cols 2q + 8, 2q + 9), a3 (row group + 8, cols 2q + 8, 2q + 9);
//   B (16 x 8, "col": k contiguous per column n), 2 registers: b0 (k 2q, 2q+1; n group), b1 (k 2q + 8, 2q + 9;
//     n group);
//   C (16 x 8, fp32), 4 registers: c0, c1 (row group, cols 2q, 2q+1), c2, c3 (row group + 8, same cols).
// ldmatrix.x4 reads four 8 x 8 matrices of 16-bit elements, lanes 8i..8i+7 naming the eight 16-byte rows of matrix i;
// register i receives (row lane / 4, cols 2 (lane % 4), +1) of matrix i, or with .trans (rows 2 (lane % 4), +1; col
// lane / 4). So a tile stored with the contraction dimension contiguous (Q, K rows for Q K^T) gives A and B fragments
// directly, and one stored with the contraction dimension across rows (V for P V) gives B fragments with .trans.
// A C fragment converts to an A fragment of the next product in registers: the accumulators of n-tiles 2j and 2j + 1
// are exactly a0..a3 of k-step j.

__device__ __forceinline__ void load_matrix_x4(uint32_t (&fragment)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
               : "r"(address));
}

__device__ __forceinline__ void load_matrix_x4_transposed(uint32_t (&fragment)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
               : "r"(address));
}

// The inverse of load_matrix_x4: stores four 8 x 8 matrices of 16-bit elements, lanes 8i..8i+7 naming the eight
// 16-byte rows of matrix i, register i of lane t holding elements 2 (t % 4), + 1 of matrix i's row t / 4 (the layout
// of an mma / wgmma accumulator's 8 x 8 tiles once packed to 16 bits).
__device__ __forceinline__ void store_matrix_x4(uint32_t address, const uint32_t (&fragment)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address),
               "r"(fragment[0]), "r"(fragment[1]), "r"(fragment[2]), "r"(fragment[3])
               : "memory");
}

// c += a b for a 16 x 16 A, a 16 x 8 B and a 16 x 8 fp32 C.
template <class T>
__device__ __forceinline__ void mma_16x8x16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, bfloat16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to T (to nearest even) in one register, the first in the low half (the lower column).
template <class T>
__device__ __forceinline__ uint32_t pack(float low, float high) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    const __nv_bfloat162 packed = __floats2bfloat162_rn(low, high);
    return *reinterpret_cast<const uint32_t*>(&packed);
  } else {
    const __half2 packed = __floats2half2_rn(low, high);
    return *reinterpret_cast<const uint32_t*>(&packed);
  }
}

// 2^x on the special-function unit with subnormal results flushed to zero: one instruction, where exp2f's IEEE
// subnormal handling costs a compare and two multiplies around it. The softmax probabilities it computes are under
// 2^-126 only where they are negligible next to the row's largest (which is 1 or close).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The two values of a `pack`ed register, low half first.
template <class T>
__device__ __forceinline__ float2 unpack(uint32_t packed) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    // bf16 is the high half of an fp32: a shift and a mask, no conversion instruction.
    return make_float2(__uint_as_float(packed << 16), __uint_as_float(packed & 0xFFFF0000u));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&packed));
  }
}

// The A fragment of k-step j from the fp32 accumulators of n-tiles 2j and 2j + 1 (same rows, 16 consecutive columns).
template <class T>
__device__ __forceinline__ void accumulators_to_a(const float (&low)[4], const float (&high)[4], uint32_t (&a)[4]) {
  a[0] = pack<T>(low[0], low[1]);
  a[1] = pack<T>(low[2], low[3]);
  a[2] = pack<T>(high[0], high[1]);
  a[3] = pack<T>(high[2], high[3]);
}

// Sum and max over the four lanes of a quad (the lanes holding one accumulator row).
__device__ __forceinline__ float quad_sum(float value) {
  value += __shfl_xor_sync(0xffffffffu, value, 1);
  return value + __shfl_xor_sync(0xffffffffu, value, 2);
}
__device__ __forceinline__ float quad_max(float value) {
  value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 1));
  return fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 2));
}

// Whether query `query` may see key `key`, both relative to their document's start, in a document of `length` tokens.
// `causal` is true also for a window (a window never shows later keys).
__device__ __forceinline__ bool key_allowed(int query, int key, int length, bool causal, int window) {
  return key < length && (!causal || key <= query) && (window <= 0 || query - key < window);
}

// ---------------------------------------------------------------------------------------------------------------------
// Copies rows [first_row, first_row + kRows) of a (tokens, head_size) slice into a swizzled tile (`swizzled`) with
// kThreads threads, zeros past `length` (the mma.sync kernels; the wgmma ones use attention_wgmma.cuh's layout).
template <int kRows, int kHeadSize, int kThreads, class T>
__device__ __forceinline__ void load_tile(T* tile, const T* source, int64_t token_stride, int first_row, int length) {
  constexpr int kChunks = kHeadSize / 8;
  static_assert(kRows * kChunks % kThreads == 0, "whole copies per thread");
#pragma unroll
  for (int step = 0; step < kRows * kChunks / kThreads; ++step) {
    const int index = step * kThreads + int(threadIdx.x);
    const int row = index / kChunks, chunk = index % kChunks;
    const bool valid = first_row + row < length;
    // An invalid row reads nothing, but its address must be mapped: the document's first row is.
    const T* from = source + (valid ? int64_t(first_row + row) * token_stride : 0) + chunk * 8;
    copy_async_16(shared_address(tile + swizzled<kChunks>(row, chunk)), from, valid);
  }
}

// Host: what the CUDA variants ask beyond the op's contract (kernels/attention.h, checked by the entry functions).

// Why the CUDA kernels cannot run the problem at all (logsumexp's dtype, index ranges), or nothing.
inline std::optional<std::string> common_reason(const Tensor& query, const Tensor& key, const Tensor& logsumexp,
                                                const Tensor& cu_seqlens, int64_t max_seqlen,
                                                const std::optional<int64_t>& window_size) {
  if (auto reason = float32_reason("logsumexp", logsumexp)) return reason;
  if (key.size(0) >= (int64_t(1) << 31) || max_seqlen >= (int64_t(1) << 30))
    return fmt::format("{} keys, max_seqlen {}; supported: below 2^31 and 2^30", key.size(0), max_seqlen);
  if (cu_seqlens.size(0) - 1 > 65535 || query.size(1) > 65535)
    return fmt::format("{} documents, {} heads; supported: at most 65535 of each", cu_seqlens.size(0) - 1,
                       query.size(1));
  if (window_size && *window_size >= (int64_t(1) << 30))
    return fmt::format("window_size {}; supported: below 2^30", *window_size);
  return std::nullopt;
}

// The tile kernels ("flash", "wgmma") index queries and keys by one token number: a query range inside a longer key
// range (query_offset, more keys than queries: micro_batch_splits, sequence_data_parallel) is the reference's only.
inline std::optional<std::string> query_range_reason(const Tensor& query, const Tensor& key, int64_t query_offset) {
  if (query_offset == 0 && key.size(0) == query.size(0)) return std::nullopt;
  return fmt::format("queries at key rows [{}, {}) of {} keys (a piece of a sequence against a longer key range, "
                     "schedule.micro_batch_splits or model.distributed.sequence_data_parallel): only the reference "
                     "variants support it",
                     query_offset, query_offset + query.size(0), key.size(0));
}

// Why a tile kernel ("flash", "wgmma") cannot read or write `tensor` (named `name`) with 16-byte copies: its channels
// must be contiguous, its data 16-byte aligned and its token / head strides whole 16-byte chunks. Or nothing.
inline std::optional<std::string> tile_layout_reason(std::string_view name, const Tensor& tensor) {
  if (auto reason = inner_contiguous_reason(name, tensor)) return reason;
  if (!is_aligned(tensor.data(), 16) || tensor.stride(0) % 8 != 0 || tensor.stride(1) % 8 != 0)
    return fmt::format("{} (strides {}) is not 16-byte aligned with token and head strides multiples of 8", name,
                       tensor.strides().str());
  return std::nullopt;
}

// Why a tile kernel cannot run this query: bf16 / fp16 only, head sizes 64 / 128, a positive softmax scale (the
// running max is kept on raw scores). Or nothing.
inline std::optional<std::string> tile_dtype_and_size_reason(const Tensor& query, double softmax_scale) {
  if (query.dtype() != DType::bfloat16 && query.dtype() != DType::float16)
    return fmt::format("query has dtype {}; supported: bfloat16, float16", dtype_name(query.dtype()));
  if (query.size(2) != 64 && query.size(2) != 128)
    return fmt::format("head_size {}; supported: 64, 128", query.size(2));
  if (!(softmax_scale > 0.0)) return fmt::format("softmax_scale {}; supported: positive", softmax_scale);
  return std::nullopt;
}

// Why `device` cannot run the wgmma kernels (sm_90a machine code runs on compute capability 9.0 only), or nothing.
// Capabilities are probed once.
inline std::optional<std::string> hopper_reason(Device device) {
  static const std::vector<int> capabilities = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    std::vector<int> result(size_t(count), 0);
    for (int index = 0; index < count; ++index) {
      int major = 0, minor = 0;
      if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) == cudaSuccess &&
          cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index) == cudaSuccess)
        result[size_t(index)] = major * 10 + minor;
    }
    return result;
  }();
  const int capability =
      device.index >= 0 && size_t(device.index) < capabilities.size() ? capabilities[size_t(device.index)] : 0;
  if (capability != 90)
    return fmt::format("{} has compute capability {}.{}; wgmma needs 9.0 (sm_90a)", device.str(), capability / 10,
                       capability % 10);
  return std::nullopt;
}

}  // namespace fast_llm::kernels::cuda::attention
