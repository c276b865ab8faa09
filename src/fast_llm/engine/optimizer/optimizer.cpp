// AdamW over flat shards.
#include "fast_llm/engine/optimizer/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/optimizer_ops.h"

namespace fast_llm::engine {

double clipping_coefficient(double gradient_norm, double gradient_norm_clipping) {
  return std::min(1.0, gradient_norm_clipping / (gradient_norm + 1e-6));
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
  const Device device = multi_stage.device();
  norm_accumulator_ = Tensor::empty(Shape{1}, device.is_cpu() ? DType::float64 : DType::float32, device);
}

void Optimizer::load(const OptimizerState& state) {
  step_ = state.step;
  grad_scaler_.load(state.grad_scaler);
}

double Optimizer::squared_gradient_norm(Stream stream) {
  const Device device = multi_stage_.device();
  set_bytes(norm_accumulator_.data(), device, 0, norm_accumulator_.nbytes(), stream);
  for (auto& stage : multi_stage_.stages()) {
    if (stage->trainable_shard_size() == 0) continue;
    kernels::squared_norm({.input = stage->grad_shard(), .result = norm_accumulator_, .stream = stream});
  }
  // The host decides whether to skip the step: one device -> host read per step.
  return norm_accumulator_.to(Device::cpu(), stream).item();
}

OptimizerStepResult Optimizer::step(Stream stream) {
  multi_stage_.copy_gradients_to_shards(stream);
  const double loss_scale = grad_scaler_.scale();
  OptimizerStepResult result;
  result.grad_norm = std::sqrt(squared_gradient_norm(stream)) / loss_scale;
  result.successful = std::isfinite(result.grad_norm);
  grad_scaler_.update(result.successful);
  if (!result.successful) {
    result.learning_rate = schedule_(step_ + 1);
    return result;
  }
  ++step_;
  result.learning_rate = schedule_(step_);
  result.clip_coefficient = clipping_coefficient(result.grad_norm, config_.gradient_norm_clipping);
  const double grad_scale = result.clip_coefficient / loss_scale;
  const int rank = multi_stage_.settings().data_rank;
  for (auto& stage : multi_stage_.stages()) {
    Tensor weights = stage->trainable_weight_shard();
    for (const ParameterGroup& group : stage->shard_groups(rank)) {
      Tensor parameters = weights.slice(0, group.begin, group.end);
      Tensor gradients = stage->grad_shard().slice(0, group.begin, group.end);
      Tensor exp_avg = stage->exp_avg().slice(0, group.begin, group.end);
      Tensor exp_avg_sq = stage->exp_avg_sq().slice(0, group.begin, group.end);
      kernels::adam_step({.parameters = parameters,
                          .gradients = gradients,
                          .exp_avg = exp_avg,
                          .exp_avg_sq = exp_avg_sq,
                          .learning_rate = result.learning_rate * group.lr_scale,
                          .beta_1 = config_.beta_1,
                          .beta_2 = config_.beta_2,
                          .epsilon = config_.epsilon,
                          .weight_decay = group.weight_decay ? config_.weight_decay : 0.0,
                          .step = step_,
                          .grad_scale = grad_scale,
                          .stream = stream});
    }
  }
  multi_stage_.copy_weights_from_shards(stream);
  return result;
}

}  // namespace fast_llm::engine
