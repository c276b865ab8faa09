// Op: rotary_apply. Rotary position embedding in the "rotate-half" layout (Hugging Face compatible, no weight
// permutation): for each head, the pair (x[i], x[i + rotary_dims/2]), i < rotary_dims/2, is rotated by theta(t, i):
//   x1' = x1 * cos - x2 * sin,   x2' = x2 * cos + x1 * sin
// in place on (tokens, heads, head_size). The backward of a rotation is the rotation by the opposite angle, so the
// same op with `inverse = true` turns the gradient of the output into the gradient of the input.
// cos/sin are precomputed per token (positions are indices in the packed micro-batch: attention never crosses
// documents and rotary is relative, so this equals per-document positions) in fp32, scaled by the attention factor
// of yarn where it applies. rotary_dims = head_size in general; when cos/sin are narrower only the first rotary_dims
// columns rotate (Hugging Face's partial rotary: rotate_half on x[:rotary_dims]) and the rest pass through.
#pragma once

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

struct RotaryApplyArgs {
  Tensor& tensor;     // (tokens, heads, head_size), rotated in place
  const Tensor& cos;  // (tokens, rotary_dims / 2) fp32
  const Tensor& sin;  // (tokens, rotary_dims / 2) fp32
  bool inverse = false;
  Stream stream = {};
};

struct RotaryApply {
  static constexpr std::string_view name = "rotary_apply";
  using Args = RotaryApplyArgs;
};

// The contract above, checked once by the entry function before dispatch: throws `[rotary_apply] ...`.
void check_rotary_apply(const RotaryApplyArgs& args);

inline void rotary_apply(const RotaryApplyArgs& args) {
  check_rotary_apply(args);
  dispatch<RotaryApply>(args, args.tensor.device());
}

}  // namespace fast_llm::kernels
