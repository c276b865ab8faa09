// Helpers shared by the CUDA kernels of kernels/cuda/: the stream a launch goes to, grid sizes for grid-stride loops,
// the NVTX range every launcher opens, dtype dispatch, and element loads / stores that do their arithmetic in fp32
// (fp64 for fp64) and round to nearest even on store, as the CPU reference does.
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

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "fast_llm/core/cuda/check.h"
#include "fast_llm/core/device.h"
#include "fast_llm/core/dtype.h"
#include "fast_llm/core/half.h"
#include "fast_llm/tensor/stream.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels::cuda {

// `Stream{}` means the device's compute stream (tensor/stream.h).
inline cudaStream_t resolve_stream(Device device, Stream stream) {
  return static_cast<cudaStream_t>(stream.handle != nullptr ? stream.handle : compute_stream(device).handle);
}

// Marks a launcher's work in Nsight Systems timelines, named after the op.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

inline constexpr int kBlockSize = 256;

// Blocks for a grid-stride loop over `items`: enough to fill every SM several times over, no more (each thread then
// loops, which amortises its index arithmetic).
inline unsigned grid_size(Device device, int64_t items) {
  const int64_t needed = (items + kBlockSize - 1) / kBlockSize;
  const int64_t resident = int64_t(device_info(device).multiprocessor_count) * (2048 / kBlockSize) * 4;
  return unsigned(std::max<int64_t>(1, std::min(needed, resident)));
}

// Whether `pointer` is aligned to `bytes`.
inline bool is_aligned(const void* pointer, size_t bytes) { return reinterpret_cast<uintptr_t>(pointer) % bytes == 0; }

// Calls function(std::type_identity<T>{}) with the storage type of a floating dtype; false for other dtypes.
template <class Function>
bool visit_floating(DType dtype, Function&& function) {
  switch (dtype) {
    case DType::float32: function(std::type_identity<float>{}); return true;
    case DType::float64: function(std::type_identity<double>{}); return true;
    case DType::bfloat16: function(std::type_identity<bfloat16>{}); return true;
    case DType::float16: function(std::type_identity<float16>{}); return true;
    default: return false;
  }
}

// The same for every dtype.
template <class Function>
void visit_any(DType dtype, Function&& function) {
  if (visit_floating(dtype, function)) return;
  switch (dtype) {
    case DType::int32: function(std::type_identity<int32_t>{}); return;
    case DType::int64: function(std::type_identity<int64_t>{}); return;
    case DType::uint8: function(std::type_identity<uint8_t>{}); return;
    case DType::uint16: function(std::type_identity<uint16_t>{}); return;
    case DType::uint32: function(std::type_identity<uint32_t>{}); return;
    default: break;
  }
  throw InternalError("kernels", "visit_any: dtype not handled");
}

// Arithmetic type for elements of type T: fp64 for fp64, fp32 for the rest.
template <class T>
using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;

__device__ __forceinline__ float load(float value) { return value; }
__device__ __forceinline__ double load(double value) { return value; }
__device__ __forceinline__ float load(bfloat16 value) { return __uint_as_float(uint32_t(value.bits) << 16); }
__device__ __forceinline__ float load(float16 value) { return __half2float(__ushort_as_half(value.bits)); }

// Rounds a computed value to T (to nearest even).
template <class T, class Value>
__device__ __forceinline__ T store(Value value) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    return T(value);
  else if constexpr (std::is_same_v<T, bfloat16>)
    return bfloat16{__bfloat16_as_ushort(__float2bfloat16_rn(float(value)))};
  else
    return float16{__half_as_ushort(__float2half_rn(float(value)))};
}

// Up to kMaxTensorRank sizes and strides, passed by value to kernels that walk strided tensors.
struct StridedLayout {
  int rank = 0;
  int64_t sizes[kMaxTensorRank] = {};
  int64_t strides[kMaxTensorRank] = {};

  // Offset (in elements) of the element with row-major linear index `linear`.
  __device__ __forceinline__ int64_t offset(int64_t linear) const {
    int64_t result = 0;
    for (int dim = rank - 1; dim >= 0; --dim) {
      result += (linear % sizes[dim]) * strides[dim];
      linear /= sizes[dim];
    }
    return result;
  }
};

inline StridedLayout layout_of(const Tensor& tensor) {
  StridedLayout layout;
  layout.rank = tensor.rank();
  for (int dim = 0; dim < tensor.rank(); ++dim) {
    layout.sizes[dim] = tensor.size(dim);
    layout.strides[dim] = tensor.stride(dim);
  }
  return layout;
}

// N elements of T loaded or stored as one aligned access.
template <class T, int N>
struct alignas(sizeof(T) * N) Vector {
  T values[N];
};

}  // namespace fast_llm::kernels::cuda
