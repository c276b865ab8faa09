// Cutting a model into stages.
#include "fast_llm/engine/multi_stage/multi_stage.h"

#include <fmt/format.h>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"

namespace fast_llm::engine {

Device resolve_device(const DistributedConfig& distributed) {
  if (distributed.use_cuda && !cuda_devices().empty())
    return Device::cuda(distributed.local_rank() % int(cuda_devices().size()));
  if (distributed.use_cuda && distributed.is_explicit("use_cuda"))
    throw ConfigError(distributed.field_path("use_cuda"),
                      cuda_compiled() ? "is true but no CUDA device is visible"
                                      : "is true but this fast-llm was built without CUDA");
  return Device::cpu();
}

DType gradient_dtype(const MultiStageConfig& multi_stage, const DistributedConfig& distributed) {
  if (distributed.compute_dtype == DType::float64) return DType::float64;
  return multi_stage.full_precision_gradients ? DType::float32 : distributed.compute_dtype;
}

StageSettings stage_settings(const MultiStageConfig& multi_stage, const DistributedConfig& distributed, Device device,
                             bool training) {
  return StageSettings{.device = device,
                       .compute_dtype = distributed.compute_dtype,
                       .gradient_dtype = gradient_dtype(multi_stage, distributed),
                       .optimization_dtype = distributed.optimization_dtype,
                       .data_parallel = distributed.data_parallel(),
                       .data_rank = distributed.data_rank(),
                       .seed = uint64_t(distributed.seed),
                       .training = training,
                       .store_frozen_weights_in_optimization_precision =
                           multi_stage.store_frozen_weights_in_optimization_precision};
}

std::vector<std::vector<layers::Layer*>> split_into_stages(const std::vector<layers::Layer*>& layers,
                                                           double layers_per_stage) {
  // Greedy split, as Fast-LLM's: a stage closes once it holds at least layers_per_stage layers since the last one
  // closed (each layer counts 1), and at the last layer.
  std::vector<std::vector<layers::Layer*>> stages;
  double last_count = 0;
  size_t begin = 0;
  for (size_t layer = 0; layer < layers.size(); ++layer) {
    const double count = double(layer + 1);
    if (count >= last_count + layers_per_stage || layer + 1 == layers.size()) {
      stages.emplace_back(layers.begin() + int64_t(begin), layers.begin() + int64_t(layer + 1));
      begin = layer + 1;
      last_count = count;
    }
  }
  return stages;
}

MultiStage::MultiStage(BaseModel& model, const MultiStageConfig& multi_stage, const DistributedConfig& distributed,
                       Device device, bool training)
    : model_(model), layers_(model.layers()) {
  FLM_CHECK(multi_stage.validated() && distributed.validated(), "multi_stage",
            "the multi-stage and distributed configs must be validated first");
  if (*distributed.world_size > 1)
    throw NotSupportedError("multi_stage",
                            fmt::format("world size {}: data-parallel training (sharded stages, gradient reduction) "
                                        "needs the distributed engine, which is not built yet; run one process",
                                        *distributed.world_size));
  FLM_CHECK(!layers_.empty(), "multi_stage", "the model has no layers");

  settings_ = stage_settings(multi_stage, distributed, device, training);
  for (std::vector<layers::Layer*>& stage_layers : split_into_stages(layers_, multi_stage.layers_per_stage))
    stages_.push_back(std::make_unique<Stage>(int(stages_.size()), std::move(stage_layers), settings_));
  log_main("Model: {} layers in {} stages, {} parameters ({} trainable) on {}", layers_.size(), stages_.size(),
           num_parameters(), num_trainable_parameters(), device.str());
}

int64_t MultiStage::num_parameters() const {
  int64_t count = 0;
  for (const auto& stage : stages_)
    for (const ParameterSlot& slot : stage->parameters()) count += slot.numel;
  return count;
}

int64_t MultiStage::num_trainable_parameters() const {
  int64_t count = 0;
  for (const auto& stage : stages_)
    for (const ParameterSlot& slot : stage->parameters())
      if (!slot.parameter->meta.frozen) count += slot.numel;
  return count;
}

layers::Parameter* MultiStage::find_parameter(const std::string& name) const {
  for (const auto& stage : stages_)
    if (const ParameterSlot* slot = stage->find(name)) return slot->parameter;
  return nullptr;
}

void MultiStage::initialize_weights() {
  for (auto& stage : stages_) stage->initialize_weights();
}

void MultiStage::zero_gradients(Stream stream) {
  for (auto& stage : stages_) stage->zero_gradients(stream);
}

void MultiStage::begin_gradients(Stream stream) {
  for (auto& stage : stages_) stage->begin_gradients(stream);
}

void MultiStage::finish_gradients(Stream stream) {
  for (auto& stage : stages_) stage->finish_gradients(stream);
}

void MultiStage::copy_gradients_to_shards(Stream stream) {
  for (auto& stage : stages_) stage->copy_gradients_to_shard(stream);
}

void MultiStage::copy_weights_from_shards(Stream stream) {
  for (auto& stage : stages_) stage->copy_weights_from_shard(stream);
}

}  // namespace fast_llm::engine
