// AdamW over flat shards.
#include "fast_llm/engine/optimizer/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/optimizer_ops.h"

namespace fast_llm::engine {

double clipping_coefficient(double gradient_norm, double gradient_norm_clipping) {
  return std::min(1.0, gradient_norm_clipping / (gradient_norm + 1e-6));
}

OptimizerStepResult step_result_from_state(std::span<const double> state) {
  namespace field = kernels::optimizer_state;
  FLM_ASSERT(int64_t(state.size()) == field::size, "optimizer state of {} values", state.size());
  return {.successful = state[field::successful] != 0.0,
          .grad_norm = state[field::grad_norm],
          .learning_rate = state[field::learning_rate],
          .clip_coefficient = state[field::clip_coefficient]};
}

Optimizer::Optimizer(const OptimizerConfig& config, MultiStage& multi_stage)
    : config_(config),
      multi_stage_(multi_stage),
      schedule_(config.learning_rate),
      grad_scaler_(config.gradient_scaler, multi_stage.settings().compute_dtype) {
  FLM_CHECK(config.validated(), "optimizer", "the optimizer config must be validated first");
  FLM_CHECK(multi_stage.settings().training, "optimizer", "the model was built without gradient buffers");
  // Parameters carry the product of their lr_scale settings, not whether they set one, so the default scale for those
  // that set none cannot be told apart.
  if (config.default_learning_rate_scale != 1.0)
    throw NotSupportedError(
        "optimizer", fmt::format("{}: a default learning-rate scale other than 1 ({}) is not supported; set lr_scale "
                                 "on the layers instead",
                                 config.field_path("default_learning_rate_scale"), config.default_learning_rate_scale));
  set_state(0);
}

void Optimizer::load(const OptimizerState& state) {
  set_state(state.step);
  grad_scaler_.load(state.grad_scaler);
}

void Optimizer::set_state(int64_t step) {
  // The whole state from the host: zeros but the step counter. A pageable host -> device copy returns once the bytes
  // are staged, so the host tensor may go at once.
  Tensor host = Tensor::empty(Shape{kernels::optimizer_state::size}, DType::float64);
  std::fill_n(host.data_as<double>(), host.numel(), 0.0);
  host.data_as<double>()[kernels::optimizer_state::step] = double(step);
  const Device device = multi_stage_.device();
  state_ = device.is_cpu() ? host : host.to(device);
  step_bound_ = step;
}

void Optimizer::reserve_steps(int64_t last_step, Stream stream) {
  const int64_t count = last_step + 1;
  if (learning_rates_.defined() && learning_rates_.numel() >= count) return;
  Tensor host = Tensor::empty(Shape{count}, DType::float64);
  double* rates = host.data_as<double>();
  for (int64_t step = 1; step <= count; ++step) rates[step - 1] = schedule_(step);
  const Device device = multi_stage_.device();
  // The old table may still be read by queued steps: the allocator reuses its memory only after them (same stream).
  learning_rates_ = device.is_cpu() ? host : host.to(device, stream);
}

std::vector<double> Optimizer::read_state(Stream stream) const {
  Tensor host = state_.to(Device::cpu(), stream);
  const double* values = host.data_as<double>();
  return std::vector<double>(values, values + host.numel());
}

OptimizerStepResult Optimizer::last_step_result(Stream stream) const {
  return step_result_from_state(read_state(stream));
}

int64_t Optimizer::optimizer_step(Stream stream) const {
  return int64_t(read_state(stream)[kernels::optimizer_state::step]);
}

OptimizerState Optimizer::state() const {
  return {.step = optimizer_step(), .grad_scaler = grad_scaler_.state()};
}

void Optimizer::step(Stream stream) {
  prepare_step(stream);
  queue_update(stream);
  // Dynamic loss scaling (fp16 only) needs the outcome on the host before the next step's loss gradients: the one
  // per-step read left, as in Fast-LLM.
  if (grad_scaler_.dynamic()) grad_scaler_.update(last_step_result(stream).successful);
}

void Optimizer::prepare_step(Stream stream) {
  // The device counter reaches at most step_bound_ now; the rate of the step after it must be in the table. Growing
  // it geometrically keeps the uploads rare when the trainer did not reserve the run's steps.
  ++step_bound_;
  if (!learning_rates_.defined() || learning_rates_.numel() < step_bound_ + 1)
    reserve_steps(std::max(step_bound_, 2 * (learning_rates_.defined() ? learning_rates_.numel() : 0)), stream);
}

void Optimizer::queue_update(Stream stream) {
  namespace field = kernels::optimizer_state;
  multi_stage_.copy_gradients_to_shards(stream);
  const Device device = multi_stage_.device();
  set_bytes(state_.data(), device, 0, sizeof(double), stream);  // the squared_norm field
  Tensor squared_norm = state_.slice(0, field::squared_norm, field::squared_norm + 1);
  const StageSettings& settings = multi_stage_.settings();
  // This rank's stages only (a copy of tied weights held for another pipeline rank's stage counts on its owner).
  for (size_t index = 0; index < multi_stage_.stages().size(); ++index) {
    Stage& stage = *multi_stage_.stages()[index];
    if (!multi_stage_.runs(index) || stage.trainable_shard_size() == 0) continue;
    if (settings.tensor_parallel == 1) {
      kernels::squared_norm({.input = stage.grad_shard(), .result = squared_norm, .stream = stream});
      continue;
    }
    // Tensor parallelism: each rank adds its part of the split parameters, and tensor rank 0 alone the parameters
    // every tensor rank holds whole, so that the sum over the tensor group counts every element once.
    for (const ParameterGroup& group : stage.shard_groups(settings.data_rank))
      if (group.tensor_role == TensorRole::split || settings.tensor_group->rank() == 0)
        kernels::squared_norm({.input = stage.grad_shard().slice(0, group.begin, group.end),
                               .result = squared_norm,
                               .stream = stream});
  }
  // The global norm is the sum over the tensor, data-parallel and pipeline groups (each rank summed its own shards of
  // its own stages), so every rank takes the same clipping and skip decisions (on the device, without the host
  // waiting).
  if (settings.tensor_parallel > 1)
    settings.tensor_group->all_reduce(squared_norm, distributed::ReduceOp::sum, stream)->wait(stream);
  if (distributed::Communicator* group = settings.data_group; group && group->size() > 1)
    group->all_reduce(squared_norm, distributed::ReduceOp::sum, stream)->wait(stream);
  if (distributed::Communicator* group = multi_stage_.pipeline_group(); group && group->size() > 1)
    group->all_reduce(squared_norm, distributed::ReduceOp::sum, stream)->wait(stream);
  kernels::optimizer_decision({.state = state_,
                               .learning_rates = learning_rates_,
                               .loss_scale = grad_scaler_.scale(),
                               .gradient_norm_clipping = config_.gradient_norm_clipping,
                               .beta_1 = config_.beta_1,
                               .beta_2 = config_.beta_2,
                               .stream = stream});
  const int rank = multi_stage_.settings().data_rank;
  for (size_t index = 0; index < multi_stage_.stages().size(); ++index) {
    Stage* stage = multi_stage_.stages()[index].get();
    if (!stage->allocated()) continue;
    Tensor weights = stage->trainable_weight_shard();
    // Where the compute-dtype weights line up with the shard, Adam writes them in its own pass; else a cast follows.
    Tensor compute_weights = stage->trainable_compute_weight_shard();
    for (const ParameterGroup& group : stage->shard_groups(rank)) {
      Tensor parameters = weights.slice(0, group.begin, group.end);
      Tensor group_compute_weights =
          compute_weights.defined() ? compute_weights.slice(0, group.begin, group.end) : Tensor();
      Tensor gradients = stage->grad_shard().slice(0, group.begin, group.end);
      Tensor exp_avg = stage->exp_avg().slice(0, group.begin, group.end);
      Tensor exp_avg_sq = stage->exp_avg_sq().slice(0, group.begin, group.end);
      kernels::adam_step({.parameters = parameters,
                          .gradients = gradients,
                          .exp_avg = exp_avg,
                          .exp_avg_sq = exp_avg_sq,
                          .learning_rate = group.lr_scale,
                          .beta_1 = config_.beta_1,
                          .beta_2 = config_.beta_2,
                          .epsilon = config_.epsilon,
                          .weight_decay = group.weight_decay ? config_.weight_decay : 0.0,
                          .state = &state_,
                          .compute_weights = compute_weights.defined() ? &group_compute_weights : nullptr,
                          .stream = stream});
    }
    if (!compute_weights.defined()) multi_stage_.refresh_weights(index, stream);
  }
  multi_stage_.invalidate_gathered_weights();
}

}  // namespace fast_llm::engine
