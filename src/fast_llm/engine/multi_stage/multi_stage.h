// A model cut into stages: consecutive layers grouped by `model.multi_stage.layers_per_stage`, each stage with its
// own flat buffers (stage.h). This is what the schedule runs and the optimizer updates.
//
// Stages are cut greedily, as Fast-LLM does: a stage closes after the layer that brings it to at least
// layers_per_stage layers, and after the last layer (so a value below 1 puts each layer in its own stage).
// Data parallelism (ZeRO sharding over several ranks) needs the distributed engine: world sizes above one are refused.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fast_llm/core/device.h"
#include "fast_llm/engine/base_model.h"
#include "fast_llm/engine/distributed/config.h"
#include "fast_llm/engine/multi_stage/config.h"
#include "fast_llm/engine/multi_stage/stage.h"

namespace fast_llm::engine {

// The device a run computes on: CUDA device `local_rank` when `use_cuda` and a GPU is visible, else the CPU (an
// explicit `use_cuda: true` without a GPU is an error).
Device resolve_device(const DistributedConfig& distributed);

// The dtype of the full gradient buffers: fp32 with full_precision_gradients (fp64 when computing in fp64), else the
// compute dtype.
DType gradient_dtype(const MultiStageConfig& multi_stage, const DistributedConfig& distributed);

// The settings every stage of a model shares, from the configs (which must be validated).
StageSettings stage_settings(const MultiStageConfig& multi_stage, const DistributedConfig& distributed, Device device,
                             bool training);
// The layers of each stage, cut as described above.
std::vector<std::vector<layers::Layer*>> split_into_stages(const std::vector<layers::Layer*>& layers,
                                                           double layers_per_stage);

class MultiStage {
 public:
  // `training` false builds weights only (no gradient buffers, no optimizer state). Both configs must be validated.
  MultiStage(BaseModel& model, const MultiStageConfig& multi_stage, const DistributedConfig& distributed,
             Device device, bool training = true);
  MultiStage(const MultiStage&) = delete;
  MultiStage& operator=(const MultiStage&) = delete;

  BaseModel& model() { return model_; }
  Device device() const { return settings_.device; }
  const StageSettings& settings() const { return settings_; }
  // Every layer, in forward order.
  const std::vector<layers::Layer*>& layers() const { return layers_; }
  std::vector<std::unique_ptr<Stage>>& stages() { return stages_; }
  const std::vector<std::unique_ptr<Stage>>& stages() const { return stages_; }

  // Parameters (trainable + frozen) and the trainable ones, counted without padding.
  int64_t num_parameters() const;
  int64_t num_trainable_parameters() const;
  // The parameter named `name` (Fast-LLM's dotted name), or nullptr.
  layers::Parameter* find_parameter(const std::string& name) const;

  // Fresh initialisation of every stage (Stage::initialize_weights).
  void initialize_weights();
  void zero_gradients(Stream stream = {});
  // Stage::begin_gradients / finish_gradients over every stage.
  void begin_gradients(Stream stream = {});
  void finish_gradients(Stream stream = {});
  void copy_gradients_to_shards(Stream stream = {});
  void copy_weights_from_shards(Stream stream = {});

 private:
  BaseModel& model_;
  StageSettings settings_;
  std::vector<layers::Layer*> layers_;
  std::vector<std::unique_ptr<Stage>> stages_;
};

}  // namespace fast_llm::engine
