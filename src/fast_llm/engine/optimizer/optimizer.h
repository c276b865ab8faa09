// AdamW over the stages' flat shards (reference/fast-llm.md §6.4).
//
// One step, after every micro-batch's backward has accumulated into the gradient buffers, all queued on the device
// without the host waiting (kernels/optimizer_ops.h):
//   1. gradients -> optimization-dtype shards (a cast, or nothing when they are the same memory; with several
//      data-parallel ranks a reduce-scatter, Stage::copy_gradients_to_shard);
//   2. sum over this rank's stages of squared_norm(grad shard) into the device state (then over the data-parallel
//      group, and the pipeline group);
//   3. optimizer_decision: global norm = sqrt(sum) / loss scale; a non-finite norm skips the step (weights, Adam state
//      and the step counter unchanged); clipping coefficient = min(1, gradient_norm_clipping / (norm + 1e-6)); the
//      step counter, the rate schedule(step) (from a table of rates uploaded ahead) and the bias corrections;
//   4. per stage and parameter group, one adam_step launch over the group's range reading that state, with lr =
//      rate * lr_scale, weight decay only on groups with weight_decay, gradients multiplied by coefficient / loss scale;
//      where the stage's compute-dtype weights line up with its shard (one data-parallel rank, distinct dtypes), the
//      same launch writes the updated weights in the compute dtype (bit for bit the cast of step 5, without reading
//      the master weights again; frozen weights never change, so they need nothing);
//   5. otherwise master shards -> compute-dtype weights (one cast per stage, nothing when they are the same memory;
//      with several data-parallel ranks the cast of this rank's part and an all-gather).
// A skipped step changes neither the master nor the compute-dtype weights.
// The step counter (for the schedule and Adam's bias correction) counts successful updates from 1, as Fast-LLM's, and
// lives on the device: reading it (`optimizer_step`, `state`, `last_step_result`) waits for the device, which the
// trainer does only when it logs or saves. The one exception is dynamic fp16 loss scaling: the next step's loss scale
// depends on whether this one was skipped, and the host passes it to the loss kernels, so `step` reads the outcome
// (as Fast-LLM's dynamic grad scaler does).
//
// CUDA graphs (engine/training/cuda_graph_step.h) capture `queue_update` with the rest of the training step. What it
// queues depends on the host only through values fixed for the run (hyper-parameters, group ranges, the loss scale
// when it is not dynamic) and the addresses of the state and rate table; the step counter, the rate and the bias
// corrections are read on the device. The host's own per-step bookkeeping (the counter's bound, growing the rate
// table) is `prepare_step`, which runs outside the graph every step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "fast_llm/engine/multi_stage/multi_stage.h"
#include "fast_llm/engine/optimizer/config.h"
#include "fast_llm/engine/optimizer/grad_scaler.h"
#include "fast_llm/engine/optimizer/learning_rate.h"
#include "fast_llm/tensor/tensor.h"

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

// The result of a step from the values of its optimizer state (kernels::optimizer_state fields, read on the host).
OptimizerStepResult step_result_from_state(std::span<const double> state);

class Optimizer {
 public:
  // `config` must be validated and outlive the optimizer.
  Optimizer(const OptimizerConfig& config, MultiStage& multi_stage);

  // The multiplier of label-loss gradients for the next step (the loss scale; 1 unless scaling is on).
  double loss_scale() const { return grad_scaler_.scale(); }
  // Queues the update of the weights from the accumulated gradients (steps 1-5 above) on `stream`: prepare_step,
  // queue_update, then, with dynamic loss scaling, the read of the outcome for the next step's scale.
  void step(Stream stream = {});
  // The host part of a step: the device counter may reach one more step, and the rate table is grown (a new upload,
  // at a new address) when it would not cover the step after that.
  void prepare_step(Stream stream = {});
  // The device part of a step (steps 1-5), with no host read: what a CUDA graph of the training step replays. Once per
  // step, after prepare_step.
  void queue_update(Stream stream = {});
  // Whether `step` reads the outcome of each step on the host (dynamic fp16 loss scaling).
  bool dynamic_loss_scaling() const { return grad_scaler_.dynamic(); }
  // Whether a skip of the next step may be the fp16 loss scaler lowering its scale (GradScaler::can_lower).
  bool loss_scale_can_lower() const { return grad_scaler_.can_lower(); }
  // (capacity) fp64 on the model's device: the rate table `queue_update` reads (its address moves when it grows).
  const Tensor& learning_rates() const { return learning_rates_; }
  // The decisions of the last `step` (waits for the device).
  OptimizerStepResult last_step_result(Stream stream = {}) const;
  // (kernels::optimizer_state::size) fp64 on the model's device: the last step's decisions, for copying them aside
  // without reading them (the trainer's step records).
  const Tensor& step_state() const { return state_; }
  // Successful updates so far (waits for the device).
  int64_t optimizer_step(Stream stream = {}) const;
  // Makes the rates of steps up to `last_step` available to the device at once (the trainer calls it with the number
  // of steps of the run before it starts); `step` extends the table itself otherwise.
  void reserve_steps(int64_t last_step, Stream stream = {});
  const LearningRateSchedule& schedule() const { return schedule_; }

  // Waits for the device (the step counter).
  OptimizerState state() const;
  void load(const OptimizerState& state);

 private:
  // A fresh decision state on the device with the step counter at `step`.
  void set_state(int64_t step);
  // Reads the state on the host.
  std::vector<double> read_state(Stream stream) const;

  const OptimizerConfig& config_;
  MultiStage& multi_stage_;
  LearningRateSchedule schedule_;
  GradScaler grad_scaler_;
  Tensor state_;           // (kernels::optimizer_state::size) fp64 on the model's device
  Tensor learning_rates_;  // (capacity) fp64 on the model's device: entry k - 1 is schedule(k)
  // The most steps the device counter can have reached: the loaded step plus the steps queued since. The rate table
  // must cover one more.
  int64_t step_bound_ = 0;
};

}  // namespace fast_llm::engine
