// Fused CUDA rotary_apply (kernels/rotary.h), variant "fused".
//
// In place on (tokens, heads, head_size) with any token and head strides (e.g. the query or key part of a fused qkv
// tensor); the last dimension is contiguous. A thread's step is one vector of kVec pairs of the rotate-half layout,
// i.e. columns [i, i + kVec) and [i + half, i + half + kVec), for up to kHeadsPerThread heads; it keeps its steps
// (one, or several when a token has more than a block's threads) and walks the tokens with each (token_step_grid:
// no index division in the loop, faster than a flat index split per step, docs/benchmarks.md). Per token it loads its
// cos / sin once (fp32, (tokens, half) with any row stride) and applies them to every head it owns, with all the heads'
// loads issued before the first store. kVec is 16 bytes of the element type when every row start and `half` allow it, 1
// otherwise. Columns from rotary_dims = 2 half to head_size are left untouched. Math in fp32.
#include "fast_llm/kernels/cuda/common.cuh"
#include "fast_llm/kernels/rotary.h"

namespace fast_llm::kernels::cuda {
namespace {

constexpr int kHeadsPerThread = 4;
constexpr int kThreads = 256;

struct RotaryParams {
  void* data;  // (tokens, heads, head_size) T
  int64_t token_stride;
  int64_t head_stride;
  const float* cos;  // (tokens, half)
  const float* sin;  // (tokens, half)
  int64_t table_stride;
  int64_t tokens;
  int heads;
  int half;
  float sin_sign;  // -1 for the inverse rotation
};

// x1' = x1 cos - x2 sin,  x2' = x2 cos + x1 sin  on the pairs (x[i], x[i + half]). A thread keeps its (head group,
// vector) steps and walks the tokens (token_step_grid), so that no index is divided in the loop.
template <class T, int kVec>
__global__ void __launch_bounds__(kThreads) rotary_kernel(const RotaryParams p) {
  const int vectors = p.half / kVec;
  const int head_groups = (p.heads + kHeadsPerThread - 1) / kHeadsPerThread;
  for (int step = int(threadIdx.x); step < head_groups * vectors; step += int(blockDim.x)) {
    const int head_group = step / vectors, column = (step % vectors) * kVec;
    const int first_head = head_group * kHeadsPerThread;
    for (int64_t token = first_token_of_thread(); token < p.tokens; token += token_loop_stride()) {
      float c[kVec], s[kVec];
      load_floats<kVec>(p.cos + token * p.table_stride + column, c);
      load_floats<kVec>(p.sin + token * p.table_stride + column, s);
#pragma unroll
      for (int i = 0; i < kVec; ++i) s[i] *= p.sin_sign;

      T* base = static_cast<T*>(p.data) + token * p.token_stride + column;
      Vector<T, kVec> first_halves[kHeadsPerThread], second_halves[kHeadsPerThread];
#pragma unroll
      for (int h = 0; h < kHeadsPerThread; ++h) {
        if (first_head + h >= p.heads) continue;
        const T* x = base + int64_t(first_head + h) * p.head_stride;
        first_halves[h] = load_pack<kVec>(x);
        second_halves[h] = load_pack<kVec>(x + p.half);
      }
#pragma unroll
      for (int h = 0; h < kHeadsPerThread; ++h) {
        if (first_head + h >= p.heads) continue;
        float x1[kVec], x2[kVec];
        unpack_floats(first_halves[h], x1);
        unpack_floats(second_halves[h], x2);
#pragma unroll
        for (int i = 0; i < kVec; ++i) rotate_pair(x1[i], x2[i], c[i], s[i]);
        T* x = base + int64_t(first_head + h) * p.head_stride;
        store_floats<kVec>(x, x1);
        store_floats<kVec>(x + p.half, x2);
      }
    }
  }
}

std::optional<std::string> supports_rotary_apply(const RotaryApplyArgs& args) {
  if (auto reason = cuda_floating_reason("tensor", args.tensor)) return reason;
  if (auto reason = inner_contiguous_reason("tensor", args.tensor)) return reason;
  if (auto reason = float32_reason("cos", args.cos)) return reason;
  if (auto reason = inner_contiguous_reason("cos", args.cos)) return reason;
  if (auto reason = float32_reason("sin", args.sin)) return reason;
  if (auto reason = inner_contiguous_reason("sin", args.sin)) return reason;
  if (args.cos.size(0) > 1 && args.cos.stride(0) != args.sin.stride(0))
    return fmt::format("cos and sin have row strides {} and {}; they must match", args.cos.stride(0),
                       args.sin.stride(0));
  return std::nullopt;
}

void rotary_apply_fused(const RotaryApplyArgs& args) {
  const int64_t tokens = args.tensor.size(0), heads = args.tensor.size(1), half = args.cos.size(1);
  if (tokens == 0 || heads == 0 || half == 0) return;

  LaunchScope scope("rotary_apply", args.tensor.device(), args.stream);
  visit_floating(args.tensor.dtype(), [&]<class T>(std::type_identity<T>) {
    constexpr int kVec = kVectorElements<T>;
    const int64_t token_stride = tokens > 1 ? args.tensor.stride(0) : 0;
    const int64_t head_stride = heads > 1 ? args.tensor.stride(1) : 0;
    const int64_t table_stride = tokens > 1 ? args.cos.stride(0) : 0;
    // 16-byte accesses to the tensor, and 16-byte aligned groups of kVec (>= 4) floats of cos / sin.
    const bool vectorized = half % kVec == 0 && is_aligned(args.tensor.data(), 16) && token_stride % kVec == 0 &&
                            head_stride % kVec == 0 && is_aligned(args.cos.data(), 16) &&
                            is_aligned(args.sin.data(), 16) && table_stride % 4 == 0;
    const RotaryParams params{.data = args.tensor.data(),
                              .token_stride = token_stride,
                              .head_stride = head_stride,
                              .cos = args.cos.data_as<float>(),
                              .sin = args.sin.data_as<float>(),
                              .table_stride = table_stride,
                              .tokens = tokens,
                              .heads = int(heads),
                              .half = int(half),
                              .sin_sign = args.inverse ? -1.0f : 1.0f};
    const int64_t head_groups = ceil_div(heads, kHeadsPerThread);
    const TokenStepGrid grid = token_step_grid(tokens, head_groups * (vectorized ? half / kVec : half), scope, kThreads);
    if (vectorized)
      rotary_kernel<T, kVec><<<grid.grid, grid.block, 0, scope.stream()>>>(params);
    else
      rotary_kernel<T, 1><<<grid.grid, grid.block, 0, scope.stream()>>>(params);
    scope.check_launch();
  });
}

}  // namespace

FLM_REGISTER_KERNEL(RotaryApply, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_rotary_apply, &rotary_apply_fused,
                    "in place, 16-byte accesses, cos / sin loaded once per token for 4 heads; fp32 math");

}  // namespace fast_llm::kernels::cuda
