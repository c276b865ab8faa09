// Fused CUDA axpy and dropout (kernels/pointwise.h), variant "fused".
//
// axpy: output += alpha * input over contiguous tensors of any two of float32, bfloat16, float16; a grid-stride loop
// over groups of kVec elements (16 bytes of the narrower type) with 16-byte accesses, the last count % kVec elements
// one by one; the scalar path runs when a pointer is not 16-byte aligned. Math in fp32.
// dropout: in place over a contiguous tensor; a thread takes groups of 4 elements 4k .. 4k + 3, draws one Philox
// block philox4x32(seed, k) for them (exactly what random_uniform(seed, 4k + j) returns, so the mask is the CPU
// reference's bit for bit), keeps element i when uniform >= float(p), and scales kept elements by float(1 / (1 - p)).
#include "fast_llm/kernels/cuda/common.cuh"

#include "fast_llm/core/random.h"
#include "fast_llm/kernels/pointwise.h"

namespace fast_llm::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <class In, class Out, int kVec>
__global__ void __launch_bounds__(kThreads) axpy_kernel(const In* input, Out* output, int64_t count, float alpha) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t thread = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = count / kVec;
  for (int64_t v = thread; v < vectors; v += stride) {
    float x[kVec], y[kVec];
    load_floats<kVec>(input + v * kVec, x);
    load_floats<kVec>(output + v * kVec, y);
#pragma unroll
    for (int i = 0; i < kVec; ++i) y[i] += alpha * x[i];
    store_floats<kVec>(output + v * kVec, y);
  }
  for (int64_t i = vectors * kVec + thread; i < count; i += stride)
    output[i] = store<Out>(load(output[i]) + alpha * load(input[i]));
}

// x = x * (uniform(seed, i) >= threshold ? scale : 0) for the 4 elements of each group.
template <class T, bool kVectorized>
__global__ void __launch_bounds__(kThreads) dropout_kernel(T* data, int64_t count, uint64_t seed, float threshold,
                                                           float scale) {
  const int64_t groups = (count + 3) / 4;
  for (int64_t group = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; group < groups;
       group += int64_t(gridDim.x) * blockDim.x) {
    const Philox4 random = philox4x32(seed, uint64_t(group));
    const uint32_t bits[4] = {random.x, random.y, random.z, random.w};
    float factor[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) factor[i] = uint_to_uniform(bits[i]) >= threshold ? scale : 0.0f;
    const int64_t first = group * 4;
    if (kVectorized && first + 4 <= count) {
      float x[4];
      load_floats<4>(data + first, x);
#pragma unroll
      for (int i = 0; i < 4; ++i) x[i] *= factor[i];
      store_floats<4>(data + first, x);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (first + i < count) data[first + i] = store<T>(load(data[first + i]) * factor[i]);
    }
  }
}

std::optional<std::string> supports_axpy(const AxpyArgs& args) {
  if (auto reason = cuda_floating_reason("input", args.input)) return reason;
  if (auto reason = cuda_floating_reason("output", args.output)) return reason;
  if (auto reason = contiguous_reason("input", args.input)) return reason;
  return contiguous_reason("output", args.output);
}

void axpy_fused(const AxpyArgs& args) {
  const int64_t count = args.output.numel();
  if (count == 0) return;
  LaunchScope scope("axpy", args.output.device(), args.stream);
  visit_floating(args.input.dtype(), [&]<class In>(std::type_identity<In>) {
    visit_floating(args.output.dtype(), [&]<class Out>(std::type_identity<Out>) {
      constexpr int kVec = sizeof(In) == 2 || sizeof(Out) == 2 ? 8 : 4;
      const bool vectorized = is_aligned(args.input.data(), 16) && is_aligned(args.output.data(), 16);
      const In* input = static_cast<const In*>(args.input.data());
      Out* output = static_cast<Out*>(args.output.data());
      const unsigned grid = grid_for(vectorized ? ceil_div(count, kVec) : count, kThreads, scope);
      if (vectorized)
        axpy_kernel<In, Out, kVec><<<grid, kThreads, 0, scope.stream()>>>(input, output, count, float(args.alpha));
      else
        axpy_kernel<In, Out, 1><<<grid, kThreads, 0, scope.stream()>>>(input, output, count, float(args.alpha));
      scope.check_launch();
    });
  });
}

std::optional<std::string> supports_dropout(const DropoutArgs& args) {
  if (auto reason = cuda_floating_reason("tensor", args.tensor)) return reason;
  return contiguous_reason("tensor", args.tensor);
}

void dropout_fused(const DropoutArgs& args) {
  const int64_t count = args.tensor.numel();
  // p = 0 keeps every element and scales by 1: nothing changes.
  if (count == 0 || args.probability == 0.0) return;
  LaunchScope scope("dropout", args.tensor.device(), args.stream);
  visit_floating(args.tensor.dtype(), [&]<class T>(std::type_identity<T>) {
    const bool vectorized = is_aligned(args.tensor.data(), 4 * sizeof(T));
    T* data = static_cast<T*>(args.tensor.data());
    const float threshold = float(args.probability), scale = float(1.0 / (1.0 - args.probability));
    const unsigned grid = grid_for(ceil_div(count, 4), kThreads, scope);
    if (vectorized)
      dropout_kernel<T, true><<<grid, kThreads, 0, scope.stream()>>>(data, count, args.seed, threshold, scale);
    else
      dropout_kernel<T, false><<<grid, kThreads, 0, scope.stream()>>>(data, count, args.seed, threshold, scale);
    scope.check_launch();
  });
}

}  // namespace

FLM_REGISTER_KERNEL(Axpy, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline, &supports_axpy,
                    &axpy_fused, "element-wise, 16-byte accesses, any pair of float32 / bfloat16 / float16; fp32 math");
FLM_REGISTER_KERNEL(Dropout, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline, &supports_dropout,
                    &dropout_fused, "in place, one Philox block per 4 elements (the CPU reference's mask bit for bit)");

}  // namespace fast_llm::kernels::cuda
