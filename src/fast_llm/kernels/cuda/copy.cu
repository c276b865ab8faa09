// CUDA fill / copy / cast (kernels/copy.h): grid-stride loops; contiguous tensors move in 16-byte vectors when their
// pointers allow it, any other layout element by element through its strides. Conversions follow copy.h and match the
// CPU reference bit for bit: round to nearest even (float64 -> 16-bit in one rounding, by the conversion intrinsics),
// float -> integer truncated and saturated, NaN -> 0.
#include "fast_llm/kernels/cuda/common.cuh"

#include <limits>

#include "fast_llm/kernels/copy.h"

namespace fast_llm::kernels::cuda {

// The grid-stride loops' launch: 256 threads a block, at most 32 blocks per multiprocessor.
constexpr int kThreads = 256;
constexpr int kBlocksPerMultiprocessor = 32;

// Calls `function(std::type_identity<T>{})` with the element type of any dtype.
template <class Function>
static void visit_any(DType dtype, Function&& function) {
  visit_dtype<float, double, bfloat16, float16, int32_t, int64_t, uint8_t, uint16_t, uint32_t>(
      dtype, std::forward<Function>(function));
}

// Up to kMaxTensorRank sizes and strides, passed by value to the kernels that walk strided tensors.
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

static StridedLayout layout_of(const Tensor& tensor) {
  StridedLayout layout;
  layout.rank = tensor.rank();
  for (int dim = 0; dim < tensor.rank(); ++dim) {
    layout.sizes[dim] = tensor.size(dim);
    layout.strides[dim] = tensor.stride(dim);
  }
  return layout;
}

template <class I>
static __device__ __forceinline__ I saturate_to_integer(double value) {
  if (isnan(value)) return I(0);
  const double truncated = trunc(value);
  // int64's maximum rounds up to 2^63 in float64: values at or above it saturate, every one below converts exactly.
  if (truncated <= double(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (truncated >= double(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return I(truncated);
}

template <class To>
static __device__ __forceinline__ To from_double(double value) {
  if constexpr (std::is_same_v<To, double>)
    return value;
  else if constexpr (std::is_same_v<To, float>)
    return __double2float_rn(value);
  else if constexpr (std::is_same_v<To, bfloat16>)
    return bfloat16{__bfloat16_as_ushort(__double2bfloat16(value))};
  else if constexpr (std::is_same_v<To, float16>)
    return float16{__half_as_ushort(__double2half(value))};
  else
    return saturate_to_integer<To>(value);
}

// From a value exact in float32 (float32, bfloat16, float16 sources): one rounding.
template <class To>
static __device__ __forceinline__ To from_float(float value) {
  if constexpr (std::is_same_v<To, bfloat16> || std::is_same_v<To, float16>)
    return store<To>(value);
  else
    return from_double<To>(double(value));
}

template <class To, class From>
static __device__ __forceinline__ To convert(From value) {
  if constexpr (std::is_integral_v<From> && std::is_integral_v<To>)
    return static_cast<To>(value);  // modulo 2^bits; with To == From, a plain copy of the bits
  else if constexpr (std::is_integral_v<From> || std::is_same_v<From, double>)
    return from_double<To>(double(value));
  else
    return from_float<To>(load(value));
}

// Contiguous: `count` elements, N at a time (pointers aligned to N elements of both types); the tail one by one.
template <class To, class From, int N>
static __global__ void cast_contiguous_kernel(To* __restrict__ destination, const From* __restrict__ source, int64_t count) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = count / N;
  for (int64_t vector = first; vector < vectors; vector += stride) {
    const Vector<From, N> input = reinterpret_cast<const Vector<From, N>*>(source)[vector];
    Vector<To, N> output;
#pragma unroll
    for (int lane = 0; lane < N; ++lane) output.values[lane] = convert<To>(input.values[lane]);
    reinterpret_cast<Vector<To, N>*>(destination)[vector] = output;
  }
  for (int64_t index = vectors * N + first; index < count; index += stride)
    destination[index] = convert<To>(source[index]);
}

template <class To, class From>
static __global__ void cast_strided_kernel(To* __restrict__ destination, StridedLayout destination_layout,
                                    const From* __restrict__ source, StridedLayout source_layout, int64_t count) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; index < count; index += stride)
    destination[destination_layout.offset(index)] = convert<To>(source[source_layout.offset(index)]);
}

template <class T, int N>
static __global__ void fill_contiguous_kernel(T* __restrict__ data, int64_t count, double value) {
  const T element = from_double<T>(value);
  Vector<T, N> vector_value;
#pragma unroll
  for (int lane = 0; lane < N; ++lane) vector_value.values[lane] = element;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = count / N;
  for (int64_t vector = first; vector < vectors; vector += stride)
    reinterpret_cast<Vector<T, N>*>(data)[vector] = vector_value;
  for (int64_t index = vectors * N + first; index < count; index += stride) data[index] = element;
}

template <class T>
static __global__ void fill_strided_kernel(T* __restrict__ data, StridedLayout layout, int64_t count, double value) {
  const T element = from_double<T>(value);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; index < count; index += stride)
    data[layout.offset(index)] = element;
}

// Elements per 16-byte access of the wider of two types.
template <class A, class B>
static constexpr int vector_width() {
  constexpr size_t widest = sizeof(A) > sizeof(B) ? sizeof(A) : sizeof(B);
  return int(16 / widest);
}

template <class To, class From>
static void launch_cast(const Tensor& source, const Tensor& destination, const LaunchScope& scope) {
  const int64_t count = source.numel();
  auto* destination_data = static_cast<To*>(destination.data());
  const auto* source_data = static_cast<const From*>(source.data());
  auto grid = [&](int64_t items) { return grid_for(items, kThreads, scope, kBlocksPerMultiprocessor); };
  if (source.is_contiguous() && destination.is_contiguous()) {
    constexpr int N = vector_width<To, From>();
    if (is_aligned(destination_data, sizeof(To) * N) && is_aligned(source_data, sizeof(From) * N))
      cast_contiguous_kernel<To, From, N>
          <<<grid(count / N + 1), kThreads, 0, scope.stream()>>>(destination_data, source_data, count);
    else
      cast_contiguous_kernel<To, From, 1>
          <<<grid(count), kThreads, 0, scope.stream()>>>(destination_data, source_data, count);
  } else {
    cast_strided_kernel<To, From><<<grid(count), kThreads, 0, scope.stream()>>>(
        destination_data, layout_of(destination), source_data, layout_of(source), count);
  }
  scope.check_launch();
}

static void fill_cuda(const FillArgs& args) {
  const int64_t count = args.tensor.numel();
  if (count == 0) return;
  LaunchScope scope("fill", args.tensor.device(), args.stream);
  auto grid = [&](int64_t items) { return grid_for(items, kThreads, scope, kBlocksPerMultiprocessor); };
  visit_any(args.tensor.dtype(), [&]<class T>(std::type_identity<T>) {
    T* data = static_cast<T*>(args.tensor.data());
    constexpr int N = int(16 / sizeof(T));
    if (!args.tensor.is_contiguous())
      fill_strided_kernel<T>
          <<<grid(count), kThreads, 0, scope.stream()>>>(data, layout_of(args.tensor), count, args.value);
    else if (is_aligned(data, sizeof(T) * N))
      fill_contiguous_kernel<T, N><<<grid(count / N + 1), kThreads, 0, scope.stream()>>>(data, count, args.value);
    else
      fill_contiguous_kernel<T, 1><<<grid(count), kThreads, 0, scope.stream()>>>(data, count, args.value);
    scope.check_launch();
  });
}

static void copy_cuda(const CopyArgs& args) {
  if (args.source.numel() == 0) return;
  LaunchScope scope("copy", args.destination.device(), args.stream);
  // Contiguous to contiguous is one byte copy (the copy engine or cudaMemcpyAsync's own kernel).
  if (args.source.is_contiguous() && args.destination.is_contiguous()) {
    FLM_CUDA_CHECK(cudaMemcpyAsync(args.destination.data(), args.source.data(), args.source.nbytes(),
                                   cudaMemcpyDeviceToDevice, scope.stream()));
    return;
  }
  // Elements move as unsigned words of their size: the same kernel for every dtype of that size, bits untouched.
  switch (args.source.element_size()) {
    case 1: launch_cast<uint8_t, uint8_t>(args.source, args.destination, scope); return;
    case 2: launch_cast<uint16_t, uint16_t>(args.source, args.destination, scope); return;
    case 4: launch_cast<uint32_t, uint32_t>(args.source, args.destination, scope); return;
    case 8: launch_cast<uint64_t, uint64_t>(args.source, args.destination, scope); return;
  }
  throw InternalError("kernels", fmt::format("copy: element size {} is not handled", args.source.element_size()));
}

static void cast_cuda(const CastArgs& args) {
  if (args.source.numel() == 0) return;
  LaunchScope scope("cast", args.destination.device(), args.stream);
  visit_any(args.source.dtype(), [&]<class From>(std::type_identity<From>) {
    visit_any(args.destination.dtype(),
              [&]<class To>(std::type_identity<To>) { launch_cast<To, From>(args.source, args.destination, scope); });
  });
}

FLM_REGISTER_KERNEL(Fill, DeviceType::cuda, "elementwise", /*priority=*/0, KernelKind::baseline, nullptr, &fill_cuda,
                    "grid-stride loop, 16-byte stores when contiguous, any dtype and strides");
FLM_REGISTER_KERNEL(Copy, DeviceType::cuda, "elementwise", /*priority=*/0, KernelKind::baseline, nullptr, &copy_cuda,
                    "cudaMemcpyAsync when both contiguous, else a grid-stride loop over strides");
FLM_REGISTER_KERNEL(Cast, DeviceType::cuda, "elementwise", /*priority=*/0, KernelKind::baseline, nullptr, &cast_cuda,
                    "grid-stride loop, 16-byte vectors when contiguous, any dtypes and strides");

}  // namespace fast_llm::kernels::cuda
