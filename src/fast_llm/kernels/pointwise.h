// Ops: axpy (residual stream and gradient accumulation) and dropout.
//   axpy:    output += alpha * input           (any float dtypes, same shape; math in fp32/fp64)
//   dropout: x = x * mask / (1 - p) in place, mask[i] = uniform(seed, i) >= float(p)   (core/random.h Philox,
//            compared in fp32, so the same seed regenerates the same mask in backward, on any device); 0 <= p < 1
#pragma once

#include <cstdint>

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

struct AxpyArgs {
  const Tensor& input;
  Tensor& output;  // +=
  double alpha = 1.0;
  Stream stream = {};
};

struct DropoutArgs {
  Tensor& tensor;  // in place, contiguous
  double probability = 0.0;
  uint64_t seed = 0;
  Stream stream = {};
};

struct Axpy {
  static constexpr std::string_view name = "axpy";
  using Args = AxpyArgs;
};
struct Dropout {
  static constexpr std::string_view name = "dropout";
  using Args = DropoutArgs;
};

// The contracts above, checked once by each entry function before dispatch: throws `[axpy] ...`, `[dropout] ...`.
void check_axpy(const AxpyArgs& args);
void check_dropout(const DropoutArgs& args);

inline void axpy(const AxpyArgs& args) {
  check_axpy(args);
  dispatch<Axpy>(args, args.output.device());
}
inline void dropout(const DropoutArgs& args) {
  check_dropout(args);
  dispatch<Dropout>(args, args.tensor.device());
}

}  // namespace fast_llm::kernels
