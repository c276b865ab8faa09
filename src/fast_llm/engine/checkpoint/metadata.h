// `metadata.yaml` of the native checkpoint formats (`distributed` and `fast_llm`), as Fast-LLM's CheckpointMetadata,
// and the `ok` marker of complete checkpoint folders.
//
//   fast_llm_version: 0.1.0
//   format: distributed                # or fast_llm
//   model: gpt                         # the model type (model_type.h)
//   config: {base_model: ..., multi_stage: ..., distributed: ...}   # the model config (fields set explicitly)
//   shards: [weights, exp_avg, exp_avg_sq]                         # what the files hold for each parameter
//   state:                              # the training loop's state (checkpoints with optimizer state)
//     completed_steps: 12
//     consumed_samples: 96
//     optimizer: {step: 12, grad_scaler: {scale: 1.0, growth_tracker: 0, hysteresis_tracker: 0}}
//   layout: ...                         # format-specific (stage layout / file of each tensor)
//   trainer_config: ...                 # distributed checkpoints: the run's whole resolved config
//
// A checkpoint folder is complete when it holds an empty `ok` file, written last (directory.h): a folder without it (a
// write killed half-way) is never read as a checkpoint.
//
// Reading checks what loading relies on: a `distributed` checkpoint, or one holding Adam's moments, must record the
// training `state` (a run resumed without it would restart its counts and its optimizer's bias corrections).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/engine/checkpoint/config.h"
#include "fast_llm/engine/checkpoint/state.h"
#include "fast_llm/engine/checkpoint/training_state.h"

namespace fast_llm::engine {

inline constexpr std::string_view kFastLLMVersion = "0.1.0";
inline constexpr std::string_view kMetadataFile = "metadata.yaml";
inline constexpr std::string_view kCompleteMarker = "ok";

struct CheckpointMetadata {
  CheckpointFormat format = CheckpointFormat::fast_llm;
  std::string fast_llm_version = std::string(kFastLLMVersion);
  std::string model;  // the model type's name
  YAML::Node config;  // the model config: base_model, multi_stage, distributed
  std::vector<std::string> shards;
  std::optional<TrainingState> state;
  int64_t consumed_samples = 0;  // with `state`
  YAML::Node layout;
  std::string trainer_config;  // empty: not stored
};

// Writes `<directory>/metadata.yaml` (checked: an Error names the file when it cannot be written whole).
void write_checkpoint_metadata(const std::filesystem::path& directory, const CheckpointMetadata& metadata);
// Reads and checks `<directory>/metadata.yaml`; errors name the file and the key. `expected` (if given) must match
// the stored format.
CheckpointMetadata read_checkpoint_metadata(const std::filesystem::path& directory,
                                            std::optional<CheckpointFormat> expected = std::nullopt);
// Throws (naming the file) unless `metadata`, read from `directory`, is of a model of type `model`.
void check_checkpoint_model(const std::filesystem::path& directory, const CheckpointMetadata& metadata,
                            std::string_view model);

// Whether `directory` holds a complete checkpoint (its `ok` marker).
bool checkpoint_complete(const std::filesystem::path& directory);

}  // namespace fast_llm::engine
