// Native checkpoints (format `distributed`): what `training.checkpoint` writes and a restarted run resumes from.
//
//   <experiment_dir>/checkpoint/<step>/
//     metadata.yaml         format distributed, the model config, the run's resolved config, the training state
//                           (completed steps, consumed samples, optimizer step, grad scaler) and the stage layout
//     rank_<r>.safetensors  this rank's shard of every stage: `stage_<s>/weights` (master weights, trainable then
//                           frozen), `stage_<s>/exp_avg`, `stage_<s>/exp_avg_sq` (Adam), in the optimization dtype
//     ok                    written last (metadata.h): a directory without it is ignored
//
// Loading copies the shards as they are when the layout is the same (stages, parameter offsets, data-parallel size,
// dtype), and otherwise parameter by parameter through the recorded layout, gathering each from the rank files that
// hold its pieces (so `layers_per_stage`, the optimization dtype or the number of data-parallel ranks may change
// between runs).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "fast_llm/engine/checkpoint/metadata.h"
#include "fast_llm/engine/checkpoint/state.h"
#include "fast_llm/engine/multi_stage/multi_stage.h"

namespace fast_llm::engine {

struct DistributedCheckpointContents {
  const TrainingState& state;
  int64_t consumed_samples = 0;
  std::string model;           // the model type's name
  YAML::Node model_config;     // base_model, multi_stage, distributed
  std::string trainer_config;  // the run's resolved config (YAML text)
};

// Writes the checkpoint files of `multi_stage` (weights and optimizer state) into `directory`, which must exist: this
// data-parallel rank's shards, and on rank 0 the metadata.
void write_distributed_checkpoint(const std::filesystem::path& directory, MultiStage& multi_stage,
                                  const DistributedCheckpointContents& contents);
// The same, atomically (metadata.h): a temporary directory renamed to `directory`, then `ok`.
void save_distributed_checkpoint(const std::filesystem::path& directory, MultiStage& multi_stage,
                                 const DistributedCheckpointContents& contents, bool sync = true);

// Loads `directory` (read with read_checkpoint_metadata) into `multi_stage`: weights, and with `optimizer_state`
// Adam's moments; returns the stored training state (zero counts when the checkpoint has none).
TrainingState load_distributed_checkpoint(const std::filesystem::path& directory, const CheckpointMetadata& metadata,
                                          MultiStage& multi_stage, bool optimizer_state);

// The state of every parameter of a distributed checkpoint (state.h names), read through its recorded layout from
// the shards of every rank that wrote it (so a checkpoint of N data-parallel ranks loads on M, and converts).
std::shared_ptr<TensorSource> distributed_checkpoint_source(const std::filesystem::path& directory,
                                                            const CheckpointMetadata& metadata);

// Where the training run of `experiment_dir` keeps its checkpoints: `<experiment_dir>/checkpoint`.
std::filesystem::path training_checkpoint_folder(const std::filesystem::path& experiment_dir);

// Saves under `root` (`<experiment_dir>/checkpoint` or `<experiment_dir>/export/<format>`) are directories named by
// their step. The newest complete one, or nothing.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& root);
// Deletes what `retention` no longer keeps: complete saves beyond the newest `keep` (not counting those kept for ever
// by `keep_every` nor the one kept by `keep_newest_before`), and leftovers of interrupted writes (directories without
// `ok`, temporary directories).
void prune_checkpoints(const std::filesystem::path& root, const CheckpointRetention& retention);

}  // namespace fast_llm::engine
