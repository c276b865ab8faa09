// Writing checkpoints (reference/fast-llm.md §3, §6.6): a model's state in any format, what exports and `convert`
// write, and a training run's own saves under its experiment directory:
//
//   <experiment_dir>/checkpoint/<step>/        `training.checkpoint`: distributed format (distributed.h) with the run's
//                                              resolved config; what a restarted run resumes from (loading.h)
//   <experiment_dir>/export/<format>/<step>/   `training.export`: any format
//
// A save of a run is written atomically (metadata.h) and followed by pruning its folder (distributed.h).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>

#include "fast_llm/engine/checkpoint/config.h"
#include "fast_llm/engine/checkpoint/state.h"
#include "fast_llm/engine/checkpoint/training_state.h"
#include "fast_llm/engine/distributed/process_groups.h"
#include "fast_llm/engine/model_type.h"
#include "fast_llm/engine/multi_stage/multi_stage.h"

namespace fast_llm::engine {

// The model config as checkpoint metadata stores it: the fields set explicitly.
YAML::Node stored_model_config(const ModelConfig& model);

// Throws when `options.format` cannot hold the model `model` describes (checked before training, not at the first
// export): an external format refuses a model it has no place for.
void check_exportable(const CheckpointStateSaveOptions& options, const ModelConfig& model);

// Writes `state` of the model `model` into `directory` (which must exist) in `options.format`, converted to
// `options.data_type` when set. `training` goes into native formats' metadata (fast_llm: with the optimizer state
// only); the distributed format also needs the stage layout, built here from `model` on the CPU. `base_model_path`, when
// known, is the base model that PEFT adapter files (options.peft: adapter) name.
void export_checkpoint(const std::filesystem::path& directory, const CheckpointStateSaveOptions& options,
                       const ModelConfig& model, std::shared_ptr<const TensorSource> state,
                       const std::optional<TrainingState>& training, int64_t consumed_samples,
                       const std::optional<std::filesystem::path>& base_model_path = std::nullopt);

// What a save of a training run holds besides its stages.
struct TrainingSave {
  const ModelConfig& model;
  TrainingState state;
  int64_t consumed_samples = 0;
  std::string_view trainer_config;  // the run's resolved config (YAML text); empty: not stored
  // The pretrained checkpoint the run started from (`pretrained.path`), named in PEFT adapter exports.
  std::optional<std::filesystem::path> base_model_path;
};

// `training.checkpoint` at `step`: `<experiment_dir>/checkpoint/<step>`, then pruned by `retention`. Returns the
// directory written. Every process of `groups` calls it: each writes its shard, rank 0 the metadata, and the folder
// is published once all are complete (directory.h).
std::filesystem::path save_training_checkpoint(const std::filesystem::path& experiment_dir, int64_t step,
                                               MultiStage& multi_stage, const TrainingSave& save,
                                               const CheckpointRetention& retention, const ProcessGroups& groups);

// `training.export` at `step`: `<experiment_dir>/export/<format>/<step>` in `options`, with the optimizer state when
// asked for and `multi_stage` has one, then pruned by `retention`. Returns the directory written.
std::filesystem::path save_training_export(const std::filesystem::path& experiment_dir, int64_t step,
                                           MultiStage& multi_stage, const TrainingSave& save,
                                           const CheckpointStateSaveOptions& options,
                                           const CheckpointRetention& retention, const ProcessGroups& groups);

}  // namespace fast_llm::engine
