// AdamW over the stages' flat shards (reference/fast-llm.md §6.4).
//
// One step, after every micro-batch's backward has accumulated into the gradient buffers:
//   1. gradients -> optimization-dtype shards (a cast, or nothing when they are the same memory);
//   2. global norm = sqrt(sum over stages of squared_norm(grad shard)) / loss scale (one host read: the only sync);
//   3. non-finite norm: the step is skipped (weights, Adam state and the step counter unchanged);
//   4. clipping coefficient = min(1, gradient_norm_clipping / (norm + 1e-6));
//   5. per stage and parameter group, one adam_step launch over the group's range with lr = schedule(step) *
//      lr_scale, weight decay only on groups with weight_decay, gradients multiplied by coefficient / loss scale;
//   6. master shards -> compute-dtype weights.
// The step counter (for the schedule and Adam's bias correction) counts successful updates from 1, as Fast-LLM's.
#pragma once

#include <cstdint>

#include "fast_llm/engine/multi_stage/multi_stage.h"
#include "fast_llm/engine/optimizer/config.h"
#include "fast_llm/engine/optimizer/grad_scaler.h"
#include "fast_llm/engine/optimizer/learning_rate.h"

namespace fast_llm::engine {

struct OptimizerStepResult {
  bool successful = false;    // false: skipped (non-finite gradients)
  double grad_norm = 0.0;     // before clipping, unscaled; NaN or inf when skipped
  double learning_rate = 0.0;  // of the update (base rate of groups with lr_scale 1); the next rate when skipped
  double clip_coefficient = 1.0;
};

// What a checkpoint keeps of the optimizer besides the Adam shards.
struct OptimizerState {
  int64_t step = 0;  // successful updates so far
  GradScalerState grad_scaler;
};

// min(1, clip / (norm + 1e-6)).
double clipping_coefficient(double gradient_norm, double gradient_norm_clipping);

class Optimizer {
 public:
  // `config` must be validated and outlive the optimizer.
  Optimizer(const OptimizerConfig& config, MultiStage& multi_stage);

  // The multiplier of label-loss gradients for the next step (the loss scale; 1 unless scaling is on).
  double loss_scale() const { return grad_scaler_.scale(); }
  // Updates the weights from the accumulated gradients (steps 1-6 above).
  OptimizerStepResult step(Stream stream = {});
  // The rate the next successful update will use.
  double next_learning_rate() const { return schedule_(step_ + 1); }
  int64_t optimizer_step() const { return step_; }
  const LearningRateSchedule& schedule() const { return schedule_; }

  OptimizerState state() const { return {.step = step_, .grad_scaler = grad_scaler_.state()}; }
  void load(const OptimizerState& state);

 private:
  // sum over stages of the squared gradient shards, read on the host.
  double squared_gradient_norm(Stream stream);

  const OptimizerConfig& config_;
  MultiStage& multi_stage_;
  LearningRateSchedule schedule_;
  GradScaler grad_scaler_;
  int64_t step_ = 0;
  Tensor norm_accumulator_;  // (1) fp64 on the CPU, fp32 on CUDA
};

}  // namespace fast_llm::engine
