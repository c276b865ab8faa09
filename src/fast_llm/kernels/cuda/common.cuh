// What the CUDA kernel files of kernels/cuda/ share: the launch scope every launcher opens (NVTX range named after
// the op, the device made current, the op's stream), grid sizes, dtype dispatch, the reasons `supports` gives, element
// loads and stores (fp32 math, rounded to nearest even on store as the CPU reference) in accesses of up to 16 bytes,
// and deterministic warp / row-group reductions.
//
// Conventions of the fused ops: element types are float, bfloat16 and float16 (fp64 is the CPU's; activation and copy
// take it too); math in fp32; the last dimension of a tensor is contiguous and other strides are free; a vector path
// (16-byte accesses) runs when every pointer and row stride it touches is aligned for it, the scalar path otherwise.
// Reductions never use atomics: every sum is taken in an order fixed by the shape and the device, so results are
// bitwise reproducible run to run.
#pragma once

// fmt 9 switches FMT_CONSTEXPR off under nvcc yet keeps C++20 constexpr functions that call FMT_CONSTEXPR ones, which
// the host compiler then rejects; gcc builds have it on, so it is turned on here, before anything includes fmt.
#ifndef FMT_USE_CONSTEXPR
#define FMT_USE_CONSTEXPR 1
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "fast_llm/core/cuda/check.h"
#include "fast_llm/core/device.h"
#include "fast_llm/core/dtype.h"
#include "fast_llm/core/error.h"
#include "fast_llm/core/half.h"
#include "fast_llm/tensor/cuda/device_guard.h"
#include "fast_llm/tensor/stream.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels::cuda {

// ---------------------------------------------------------------------------------------------------------------------
// Host: launching.

// Everything a launcher holds while it queues work: the NVTX range named after the op, the tensor's device made
// current, and the stream (`Stream{}` is the device's compute stream, never the legacy default stream).
class LaunchScope {
 public:
  LaunchScope(const char* op, Device device, Stream stream)
      : op_(op),
        guard_(device.index),
        device_(device),
        stream_(static_cast<cudaStream_t>(stream.handle != nullptr ? stream.handle : compute_stream(device).handle)) {
    nvtxRangePushA(op);
  }
  ~LaunchScope() { nvtxRangePop(); }
  LaunchScope(const LaunchScope&) = delete;
  LaunchScope& operator=(const LaunchScope&) = delete;

  cudaStream_t stream() const { return stream_; }
  Stream tensor_stream() const { return Stream{stream_}; }
  Device device() const { return device_; }
  int multiprocessors() const { return device_info(device_).multiprocessor_count; }

  // Throws `[op] kernel launch failed: ...` if the last launch was rejected (bad configuration, no kernel image).
  void check_launch() const {
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) [[unlikely]]
      throw Error(op_,
                  fmt::format("kernel launch failed: {} ({})", cudaGetErrorString(status), cudaGetErrorName(status)));
  }

 private:
  const char* op_;
  detail::CudaDeviceGuard guard_;
  Device device_;
  cudaStream_t stream_;
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Blocks for a grid-stride loop over `count` items with `threads` threads per block: enough to cover the items, at
// most `blocks_per_multiprocessor` blocks per multiprocessor.
inline unsigned grid_for(int64_t count, int threads, const LaunchScope& scope, int blocks_per_multiprocessor = 8) {
  const int64_t needed = ceil_div(count, threads);
  const int64_t cap = int64_t(scope.multiprocessors()) * blocks_per_multiprocessor;
  return unsigned(needed < 1 ? 1 : needed < cap ? needed : cap);
}

// Grid for kernels over (rows, vectors of a row): blockIdx.x covers the vectors of a row with `column_blocks` blocks,
// blockIdx.y walks rows (row = blockIdx.y, blockIdx.y + gridDim.y, ...), with about 16 blocks per multiprocessor in
// all, so that no thread divides an index.
inline dim3 row_grid(int64_t column_blocks, int64_t rows, const LaunchScope& scope) {
  const int64_t target = int64_t(scope.multiprocessors()) * 16;
  int64_t y = ceil_div(target, column_blocks);
  const int64_t y_max = rows < 65535 ? rows : 65535;
  y = y < 1 ? 1 : y > y_max ? y_max : y;
  return dim3(unsigned(column_blocks), unsigned(y));
}

// Threads per block for kernels over vectors of a row: a multiple of 32, at most 256.
inline int row_threads(int64_t vectors) {
  const int64_t threads = round_up(vectors, 32);
  return int(threads > 256 ? 256 : threads);
}

// Launch shape for kernels over (tokens, steps of a token) whose threads keep their step and walk the tokens, so
// that no index is divided inside the loop: a block is (min(steps, threads), threads / that) threads, x over the
// steps (a thread takes steps threadIdx.x, + blockDim.x, ...), y over tokens (blockIdx.x blockDim.y + threadIdx.y,
// + gridDim.x blockDim.y, ...); grid_for's cap on the blocks.
struct TokenStepGrid {
  dim3 grid, block;
};
inline TokenStepGrid token_step_grid(int64_t tokens, int64_t steps, const LaunchScope& scope, int threads = 256) {
  const int x = int(steps < 1 ? 1 : steps < threads ? steps : threads);
  const int y = threads / x;
  return {dim3(grid_for(tokens, y, scope)), dim3(unsigned(x), unsigned(y))};
}

// A token_step_grid thread's first token and the stride of its token loop.
__device__ __forceinline__ int64_t first_token_of_thread() { return int64_t(blockIdx.x) * blockDim.y + threadIdx.y; }
__device__ __forceinline__ int64_t token_loop_stride() { return int64_t(gridDim.x) * blockDim.y; }

// ---------------------------------------------------------------------------------------------------------------------
// Host: what a launcher asks of its tensors. The op's entry function has checked the contract (kernels/contract.h);
// `*_reason` functions tell `supports` what a variant cannot run beyond it.

inline std::optional<std::string> cuda_floating_reason(std::string_view name, const Tensor& tensor) {
  if (tensor.dtype() == DType::float32 || tensor.dtype() == DType::bfloat16 || tensor.dtype() == DType::float16)
    return std::nullopt;
  return fmt::format("{} has dtype {}; supported: float32, bfloat16, float16", name, dtype_name(tensor.dtype()));
}

inline std::optional<std::string> float32_reason(std::string_view name, const Tensor& tensor) {
  if (tensor.dtype() == DType::float32) return std::nullopt;
  return fmt::format("{} has dtype {}; supported: float32", name, dtype_name(tensor.dtype()));
}

// The last dimension is contiguous (other strides are free).
inline std::optional<std::string> inner_contiguous_reason(std::string_view name, const Tensor& tensor) {
  if (tensor.rank() == 0 || tensor.stride(-1) == 1 || tensor.size(-1) == 1) return std::nullopt;
  return fmt::format("{} has strides {}: the last dimension must be contiguous", name, tensor.strides().str());
}

inline std::optional<std::string> contiguous_reason(std::string_view name, const Tensor& tensor) {
  if (tensor.is_contiguous()) return std::nullopt;
  return fmt::format("{} is not contiguous (shape {}, strides {})", name, tensor.shape().str(), tensor.strides().str());
}

// Whether `pointer` is aligned to `bytes`.
inline bool is_aligned(const void* pointer, size_t bytes) { return reinterpret_cast<uintptr_t>(pointer) % bytes == 0; }

// Stride (in elements) between rows of a 2-d tensor; 0 when there is a single row (its stride is never used).
inline int64_t row_stride(const Tensor& tensor) { return tensor.size(0) > 1 ? tensor.stride(0) : 0; }

// Elements per 16-byte vector.
template <class T>
inline constexpr int kVectorElements = int(16 / sizeof(T));

// Whether a 2-d tensor suits 16-byte accesses of element type T at every row start.
template <class T>
bool rows_aligned(const Tensor& tensor) {
  return is_aligned(tensor.data(), 16) && row_stride(tensor) % kVectorElements<T> == 0;
}

// Calls `function(std::type_identity<T>{})` with the element type T of `dtype`, which must be one of Types (a
// variant's `supports` has declined the others), and returns its result.
template <class T, class... Types, class Function>
decltype(auto) visit_dtype(DType dtype, Function&& function) {
  if (dtype == DTypeOf<T>::value) return function(std::type_identity<T>{});
  if constexpr (sizeof...(Types) > 0)
    return visit_dtype<Types...>(dtype, std::forward<Function>(function));
  else
    throw InternalError("kernels",
                        fmt::format("visit_dtype: {} is not an element type of this launcher", dtype_name(dtype)));
}

// The same over the fused ops' element types.
template <class Function>
decltype(auto) visit_floating(DType dtype, Function&& function) {
  return visit_dtype<float, bfloat16, float16>(dtype, std::forward<Function>(function));
}

// The rotary rotation of one pair (x1, x2) = (x[i], x[i + half]) of the rotate-half layout (kernels/rotary.h):
// x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin; the inverse is the same with -sin.
__device__ __forceinline__ void rotate_pair(float& x1, float& x2, float cos, float sin) {
  const float first = x1 * cos - x2 * sin, second = x2 * cos + x1 * sin;
  x1 = first;
  x2 = second;
}

// ---------------------------------------------------------------------------------------------------------------------
// Device: elements. Loads widen to fp32 (fp64 stays fp64); stores round to nearest even, as the CPU's store_value.

__device__ __forceinline__ float load(float value) { return value; }
__device__ __forceinline__ double load(double value) { return value; }
__device__ __forceinline__ float load(bfloat16 value) { return __uint_as_float(uint32_t(value.bits) << 16); }
__device__ __forceinline__ float load(float16 value) { return __half2float(__ushort_as_half(value.bits)); }

template <class T, class Value>
__device__ __forceinline__ T store(Value value) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    return T(value);
  else if constexpr (std::is_same_v<T, bfloat16>)
    return bfloat16{__bfloat16_as_ushort(__float2bfloat16_rn(float(value)))};
  else
    return float16{__half_as_ushort(__float2half_rn(float(value)))};
}

// N elements of T loaded or stored as one aligned access.
template <class T, int N>
struct alignas(sizeof(T) * N) Vector {
  T values[N];
};

// ---------------------------------------------------------------------------------------------------------------------
// Device: N consecutive elements as floats, in accesses of one Vector of up to 16 bytes.

// Loads N consecutive elements as floats, in accesses of up to 16 bytes: `pointer` must be aligned to
// min(16, N * sizeof(T)) bytes.
template <int N, class T>
__device__ __forceinline__ void load_floats(const T* pointer, float (&values)[N]) {
  constexpr int kPiece = int(16 / sizeof(T)) < N ? int(16 / sizeof(T)) : N;
#pragma unroll
  for (int piece = 0; piece < N / kPiece; ++piece) {
    const Vector<T, kPiece> pack = *reinterpret_cast<const Vector<T, kPiece>*>(pointer + piece * kPiece);
#pragma unroll
    for (int i = 0; i < kPiece; ++i) values[piece * kPiece + i] = load(pack.values[i]);
  }
}

// Rounds N floats to T and stores them, in accesses of up to 16 bytes (alignment as load_floats).
template <int N, class T>
__device__ __forceinline__ void store_floats(T* pointer, const float (&values)[N]) {
  constexpr int kPiece = int(16 / sizeof(T)) < N ? int(16 / sizeof(T)) : N;
#pragma unroll
  for (int piece = 0; piece < N / kPiece; ++piece) {
    Vector<T, kPiece> pack;
#pragma unroll
    for (int i = 0; i < kPiece; ++i) pack.values[i] = store<T>(values[piece * kPiece + i]);
    *reinterpret_cast<Vector<T, kPiece>*>(pointer + piece * kPiece) = pack;
  }
}

// Raw N-element vectors (kept in registers between two passes over a row; N * sizeof(T) <= 16).
template <int N, class T>
__device__ __forceinline__ Vector<T, N> load_pack(const T* pointer) {
  return *reinterpret_cast<const Vector<T, N>*>(pointer);
}

template <int N, class T>
__device__ __forceinline__ void unpack_floats(const Vector<T, N>& pack, float (&values)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) values[i] = load(pack.values[i]);
}

// ---------------------------------------------------------------------------------------------------------------------
// Device: deterministic reductions. A butterfly of plain additions gives every lane the same bits (a + b == b + a);
// sums across warps go through shared memory and are read back by every thread in the same order.

__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ __forceinline__ double warp_sum(double value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// Sums `value` over a row group: `warps_per_group` consecutive warps of the block (threadIdx.x / 32 /
// warps_per_group names the group). Every thread of the block must call it the same number of times (it
// synchronises the block when a group has several warps); `scratch` holds one float per warp of the block.
__device__ __forceinline__ float group_sum(float value, float* scratch, int warps_per_group) {
  value = warp_sum(value);
  if (warps_per_group == 1) return value;
  const int warp = int(threadIdx.x) / 32;
  __syncthreads();  // the previous call's readers are done with scratch
  if (threadIdx.x % 32 == 0) scratch[warp] = value;
  __syncthreads();
  const int first = warp - warp % warps_per_group;
  float total = 0.0f;
  for (int i = 0; i < warps_per_group; ++i) total += scratch[first + i];
  return total;
}

// Two sums over a row group at once, for groups that walk many rows each: the warps of a group synchronise among
// themselves only, on named barrier 1 + group, so the groups of a block go through their rows independently (a
// block-wide barrier per row made every group wait for the slowest one's loads). `scratch` holds two float2 per warp
// of the block, in halves selected by `parity`, which successive calls of a group must alternate: one barrier per
// call then suffices, because a warp that writes a half again has passed the barrier of the call between, which its
// group's warps reach only after reading that half. Every thread of a group must make the same calls. Barrier 0 stays
// the block's (__syncthreads); a block has 16, so at most 15 groups of several warps.
__device__ __forceinline__ float2 group_sum2(float2 value, float2 (*scratch)[32], int warps_per_group, int parity) {
  value.x = warp_sum(value.x);
  value.y = warp_sum(value.y);
  if (warps_per_group == 1) return value;
  const int warp = int(threadIdx.x) / 32;
  if (threadIdx.x % 32 == 0) scratch[parity][warp] = value;
  asm volatile("bar.sync %0, %1;" : : "r"(1 + warp / warps_per_group), "r"(32 * warps_per_group) : "memory");
  const int first = warp - warp % warps_per_group;
  float2 total = make_float2(0.0f, 0.0f);
  for (int i = 0; i < warps_per_group; ++i) {
    total.x += scratch[parity][first + i].x;
    total.y += scratch[parity][first + i].y;
  }
  return total;
}

// A logit as the head's losses see it: z = x s, or c tanh(x s / c) with a softcap c > 0 (c <= 0: none), and dz/dx
// into `derivative` when it is not null (the CPU references' scaled_logits_row).
__device__ __forceinline__ float scaled_softcapped_logit(float x, float scale, float softcap, float* derivative) {
  const float scaled = x * scale;
  if (softcap <= 0.0f) {
    if (derivative != nullptr) *derivative = scale;
    return scaled;
  }
  const float tanh = tanhf(scaled / softcap);
  if (derivative != nullptr) *derivative = scale * (1.0f - tanh * tanh);
  return softcap * tanh;
}

// The block's sum (or maximum) of one value per thread, in thread order (the same result in every run); every thread
// gets it. `scratch` holds blockDim.x floats; the block synchronises twice.
__device__ __forceinline__ float block_reduce_in_thread_order(float value, float* scratch, bool maximum) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  float result = scratch[0];
  for (unsigned index = 1; index < blockDim.x; ++index)
    result = maximum ? fmaxf(result, scratch[index]) : result + scratch[index];
  __syncthreads();
  return result;
}

// Sums `value` over the whole block (blockDim.x a multiple of 32, at most 1024) in double; the result is valid in
// thread 0. `scratch` holds 32 doubles.
__device__ __forceinline__ double block_sum_to_thread0(double value, double* scratch) {
  value = warp_sum(value);
  const int warp = int(threadIdx.x) / 32, warps = int(blockDim.x) / 32;
  if (threadIdx.x % 32 == 0) scratch[warp] = value;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0)
    for (int i = 0; i < warps; ++i) total += scratch[i];
  return total;
}

}  // namespace fast_llm::kernels::cuda
