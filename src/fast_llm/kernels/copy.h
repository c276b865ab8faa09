// Ops: fill, copy and cast, element by element over tensors of any shape and strides (on one device).
//
//   fill: tensor[...] = value            any dtype; the value is converted as cast converts a float64
//   copy: destination[...] = source[...] same shape and dtype. Between devices (host <-> GPU) both tensors must be
//                                        contiguous: the bytes move with Tensor::copy_bytes_from
//   cast: destination[...] = source[...] same shape, any dtypes, one device
//
// Conversions (identical on every device):
//   float -> narrower float: round to nearest, ties to even, in one rounding (float64 -> bfloat16 does not round
//     twice through float32); overflow gives infinity, NaN stays NaN.
//   integer -> float: through float64 (exact below 2^53), then as above.
//   float -> integer: truncation toward zero, saturated to the integer type's range; NaN gives 0.
//   integer -> integer: modulo 2^bits (two's complement), as C++ converts.
#pragma once

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

struct FillArgs {
  Tensor& tensor;
  double value = 0.0;
  Stream stream = {};
};

struct CopyArgs {
  const Tensor& source;
  Tensor& destination;  // same shape and dtype as source
  Stream stream = {};
};

struct CastArgs {
  const Tensor& source;
  Tensor& destination;  // same shape as source, any dtype
  Stream stream = {};
};

struct Fill {
  static constexpr std::string_view name = "fill";
  using Args = FillArgs;
};
struct Copy {
  static constexpr std::string_view name = "copy";
  using Args = CopyArgs;
};
struct Cast {
  static constexpr std::string_view name = "cast";
  using Args = CastArgs;
};

// The contract above, checked once by each entry function before dispatch: throws `[fill] ...`, `[copy] ...`,
// `[cast] ...`.
void check_fill(const FillArgs& args);
void check_copy(const CopyArgs& args);
void check_cast(const CastArgs& args);

inline void fill(const FillArgs& args) {
  check_fill(args);
  dispatch<Fill>(args, args.tensor.device());
}

// Same-device copies are a kernel (any strides); a copy between devices is a byte transfer of contiguous tensors.
void copy(const CopyArgs& args);

inline void cast(const CastArgs& args) {
  check_cast(args);
  dispatch<Cast>(args, args.destination.device());
}

}  // namespace fast_llm::kernels
