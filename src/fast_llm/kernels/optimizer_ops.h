// Ops on flat buffers for the optimizer step: squared_norm, optimizer_decision and adam_step. One launch covers a whole
// contiguous range of a stage's shard: every tensor is contiguous.
//
// squared_norm: result += sum(x^2) (fp64 accumulation on the CPU, fp32 partial sums added in fp64 on the GPU), for the
// global gradient norm. A non-finite sum means the step is skipped.
// optimizer_decision: one scalar step on the device that turns the summed squares into the step's decisions
// (OptimizerDecisionArgs). Keeping these on the device is what lets a training step run without the host waiting for
// it: the host reads the state only when it logs.
// adam_step: AdamW (decoupled weight decay, bias correction) element by element (AdamStepArgs), with its learning
// rate, step and gradient scale from the arguments or from an optimizer_decision state.
#pragma once

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

// Fields of the optimizer state: a (optimizer_state::size) fp64 tensor on the device of the shards.
namespace optimizer_state {
inline constexpr int64_t squared_norm = 0;       // sum of squared (loss-scaled) gradients: squared_norm adds into it
inline constexpr int64_t grad_norm = 1;          // sqrt(squared_norm) / loss_scale: before clipping, unscaled
inline constexpr int64_t successful = 2;         // 1: the update goes through; 0: skipped (non-finite norm)
inline constexpr int64_t clip_coefficient = 3;   // min(1, clipping / (norm + 1e-6)); 1 when skipped
inline constexpr int64_t grad_scale = 4;         // clip_coefficient / loss_scale: what Adam multiplies gradients by
inline constexpr int64_t learning_rate = 5;      // schedule rate of the update (of the next update when skipped)
inline constexpr int64_t bias_correction_1 = 6;  // 1 - beta_1^step
inline constexpr int64_t bias_correction_2 = 7;  // 1 - beta_2^step
inline constexpr int64_t step = 8;               // successful updates so far (the bias-correction and schedule step)
inline constexpr int64_t size = 9;
}  // namespace optimizer_state

// norm = sqrt(squared_norm) / loss_scale; a finite norm makes the update go through with step += 1,
// rate = learning_rates[step - 1], grad_scale = min(1, gradient_norm_clipping / (norm + 1e-6)) / loss_scale and the
// bias corrections of the new step; a non-finite one skips it (step unchanged, rate of the next step).
struct OptimizerDecisionArgs {
  Tensor& state;                 // (optimizer_state::size) fp64: reads squared_norm and step, writes the others
  const Tensor& learning_rates;  // (n) fp64, same device: entry k - 1 is the schedule's rate at step k (n > step)
  double loss_scale = 1.0;
  double gradient_norm_clipping = 1.0;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  Stream stream = {};
};

// For each element, with g = gradient * grad_scale:
//   m = beta_1 m + (1 - beta_1) g;  v = beta_2 v + (1 - beta_2) g^2
//   p -= lr * (m / (1 - beta_1^step) / (sqrt(v / (1 - beta_2^step)) + epsilon) + weight_decay * p)
// with lr, step and grad_scale from the arguments, or from an optimizer_decision state (nothing changes when that
// state says the step is skipped). With `compute_weights`, the updated p is also written there in the compute dtype,
// rounded exactly as `cast` (kernels/copy.h) rounds it: the weights the layers read are refreshed in the same pass,
// without reading the master weights again (a separate cast reads 4 and writes 2 bytes per fp32 parameter; this
// writes the 2 only). A skipped step leaves them unchanged too: they already equal the unchanged parameters.
struct AdamStepArgs {
  Tensor& parameters;       // (n) fp32 (or fp64 in tests)
  const Tensor& gradients;  // (n), same dtype
  Tensor& exp_avg;          // (n)
  Tensor& exp_avg_sq;       // (n)
  double learning_rate = 1e-4;  // with `state`: a factor on the state's rate (a parameter group's lr_scale)
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;          // 1-based, for bias correction; not read with `state`
  double grad_scale = 1.0;   // clipping coefficient (and 1 / loss scale); not read with `state`
  // Optional optimizer_decision state on the parameters' device: the update runs only where it says `successful`,
  // with its rate (times learning_rate), bias corrections and grad_scale, so the host never needs to know them.
  const Tensor* state = nullptr;
  // Optional (n) contiguous, any floating dtype (bf16 / fp16 in mixed-precision training): = cast(updated parameters).
  Tensor* compute_weights = nullptr;
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
struct OptimizerDecision {
  static constexpr std::string_view name = "optimizer_decision";
  using Args = OptimizerDecisionArgs;
};

// The contracts above, checked once by each entry function before dispatch: throws `[adam_step] ...`, ...
void check_adam_step(const AdamStepArgs& args);
void check_squared_norm(const SquaredNormArgs& args);
void check_optimizer_decision(const OptimizerDecisionArgs& args);

inline void adam_step(const AdamStepArgs& args) {
  check_adam_step(args);
  dispatch<AdamStep>(args, args.parameters.device());
}
inline void squared_norm(const SquaredNormArgs& args) {
  check_squared_norm(args);
  dispatch<SquaredNorm>(args, args.input.device());
}
inline void optimizer_decision(const OptimizerDecisionArgs& args) {
  check_optimizer_decision(args);
  dispatch<OptimizerDecision>(args, args.state.device());
}

}  // namespace fast_llm::kernels
