// Ops on flat fp32 buffers for the optimizer step: adam_step, squared_norm, and the pointwise ops of the residual
// stream and dropout (pointwise.h). One launch covers a whole contiguous range of a stage's shard.
//
// adam_step (AdamW, decoupled weight decay, bias correction), for each element, with g = gradient * grad_scale:
//   m = beta_1 m + (1 - beta_1) g;  v = beta_2 v + (1 - beta_2) g^2
//   p -= lr * (m / (1 - beta_1^step) / (sqrt(v / (1 - beta_2^step)) + epsilon) + weight_decay * p)
// squared_norm: result += sum(x^2) in fp64 (CPU) / fp32 (GPU), for the global gradient norm. A non-finite sum means
// the step is skipped.
#pragma once

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

struct AdamStepArgs {
  Tensor& parameters;       // (n) fp32 (or fp64 in tests)
  const Tensor& gradients;  // (n), same dtype
  Tensor& exp_avg;          // (n)
  Tensor& exp_avg_sq;       // (n)
  double learning_rate = 1e-4;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;          // 1-based, for bias correction
  double grad_scale = 1.0;   // clipping coefficient (and 1 / loss scale)
  Stream stream = {};
};

struct SquaredNormArgs {
  const Tensor& input;  // any shape, contiguous
  Tensor& result;       // (1) fp32 or fp64, +=
  Stream stream = {};
};

struct AdamStep {
  static constexpr std::string_view name = "adam_step";
  using Args = AdamStepArgs;
};
struct SquaredNorm {
  static constexpr std::string_view name = "squared_norm";
  using Args = SquaredNormArgs;
};

inline void adam_step(const AdamStepArgs& args) { dispatch<AdamStep>(args, args.parameters.device()); }
inline void squared_norm(const SquaredNormArgs& args) { dispatch<SquaredNorm>(args, args.input.device()); }

}  // namespace fast_llm::kernels
