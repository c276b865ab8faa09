// CPU reference of rotary_apply (kernels/rotary.h).
//
// tensor (tokens, heads, head_size) of any strides and floating dtype, rotated in place; cos / sin (tokens, half) in
// fp32 (or fp64, for exact fp64 tests), with rotary_dims = 2 half <= head_size. Rotate-half layout: for i < half the
// pair (x[i], x[i + half]) rotates and the columns from rotary_dims on pass through unchanged (Hugging Face's partial
// rotary: rotate_half on the first rotary_dims). Math in fp32 (fp64 for fp64 tensors), rounded on store.
#include "fast_llm/kernels/rotary.h"

#include <vector>

#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/kernels/cpu/reference_helpers.h"

namespace fast_llm::kernels::cpu {
namespace {

void rotary_apply_reference(const RotaryApplyArgs& args) {
  const int64_t tokens = args.tensor.size(0), heads = args.tensor.size(1), half = args.cos.size(1);
  visit_floating_dtype(args.tensor.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const std::vector<Compute> cos = read_values<Compute>(args.cos);  // (tokens, half)
    const std::vector<Compute> sin = read_values<Compute>(args.sin);  // (tokens, half)
    // The inverse rotation (the backward) is the rotation by -theta: same cos, opposite sin.
    const Compute sin_sign = args.inverse ? Compute(-1) : Compute(1);
    T* data = args.tensor.data_as<T>();  // (tokens, heads, head_size)
    const int64_t token_stride = args.tensor.stride(0), head_stride = args.tensor.stride(1);
    const int64_t column_stride = args.tensor.stride(2);
#pragma omp parallel for
    for (int64_t token = 0; token < tokens; ++token) {
      for (int64_t head = 0; head < heads; ++head) {
        T* x = data + token * token_stride + head * head_stride;
        for (int64_t i = 0; i < half; ++i) {
          // x1' = x1 cos - x2 sin,  x2' = x2 cos + x1 sin
          const Compute c = cos[size_t(token * half + i)], s = sin_sign * sin[size_t(token * half + i)];
          const Compute x1 = load_value(x[i * column_stride]), x2 = load_value(x[(i + half) * column_stride]);
          x[i * column_stride] = store_value<T>(x1 * c - x2 * s);
          x[(i + half) * column_stride] = store_value<T>(x2 * c + x1 * s);
        }
      }
    }
  });
}

}  // namespace

FLM_REGISTER_KERNEL(RotaryApply, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &rotary_apply_reference,
                    "plain loops over (token, head, pair), in place; fp32 math (fp64 for fp64 tensors)");

}  // namespace fast_llm::kernels::cpu
