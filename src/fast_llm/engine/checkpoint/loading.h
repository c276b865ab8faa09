// Where a run's starting state comes from (reference/fast-llm.md §3, §6.6): its own newest complete checkpoint when it
// is restarted, else `pretrained` (Fast-LLM's CheckpointLoadConfig), a checkpoint in any format:
//
//   format        reads
//   distributed   <path> = checkpoint/<step> (or the checkpoint folder: its newest complete one)
//   fast_llm      metadata.yaml + model_<i>.safetensors
//   others        through the model type's handler (external.h): Hugging Face's config.json + safetensors
//
// `pretrained.load_config` decides what of a checkpoint's configuration the run takes: none, the base model (`model`),
// or also multi_stage and distributed (`fast_llm`, native formats only). The run's own YAML overrides it field by
// field: the checkpoint's config tree is merged under the keys the user wrote (with_pretrained_model_config), before
// the run's config is read.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>

#include "fast_llm/config/config.h"
#include "fast_llm/engine/checkpoint/config.h"
#include "fast_llm/engine/checkpoint/state.h"
#include "fast_llm/engine/checkpoint/training_state.h"
#include "fast_llm/engine/model_type.h"
#include "fast_llm/engine/multi_stage/multi_stage.h"

namespace fast_llm::engine {

// The configuration `pretrained` holds, as a YAML tree of `model` ({base_model} or {base_model, multi_stage,
// distributed}, as load_config says; empty for none).
YAML::Node load_pretrained_model_config(const CheckpointLoadConfig& pretrained, const ModelType& model_type);

// `tree` (a config with `pretrained` and `model` sections) with the pretrained checkpoint's model config merged under
// its `model`, as `pretrained.load_config` says; the same for each entry of its `reference_models` map, if any.
YAML::Node with_pretrained_model_config(const YAML::Node& tree, const ModelType& model_type);

// Loads `config` (a config with `pretrained` and `model` sections: the trainer's, model_outputs') from `tree` (file +
// overrides) with the pretrained checkpoint's model config merged under it, then validates it.
void load_config_with_pretrained(config::Config& config, const YAML::Node& tree, const ModelType& model_type);

struct PretrainedState {
  std::shared_ptr<TensorSource> state;  // `P/weights` (+ Adam's moments when the checkpoint has them)
  std::optional<TrainingState> training;
  int64_t consumed_samples = 0;
  bool has_optimizer_state = false;
};
// The tensors of `pretrained` for the model `model` describes (external formats are mapped to it).
PretrainedState open_pretrained_state(const CheckpointLoadConfig& pretrained, const ModelConfig& model);

// Loads the weights of `pretrained` (which must name a checkpoint and ask for its weights) into `multi_stage`, and with
// `optimizer_state` (and `pretrained.optimizer_state`) Adam's moments. Returns the stored optimizer state to continue
// from when Adam's moments were loaded and the checkpoint has one; nothing else of its training state carries over
// (the run counts its own steps from 0).
std::optional<OptimizerState> load_pretrained(const CheckpointLoadConfig& pretrained, const ModelConfig& model,
                                              MultiStage& multi_stage, bool optimizer_state);

// Logs a warning per architecture field where `model` differs from the model of `pretrained` (when it loads weights,
// and the run in `experiment_dir` does not resume from its own checkpoint instead).
void warn_pretrained_architecture(const ModelConfig& model, const CheckpointLoadConfig& pretrained,
                                  const std::optional<std::filesystem::path>& experiment_dir);

struct ResumedCheckpoint {
  std::filesystem::path directory;
  TrainingState state;
  int64_t consumed_samples = 0;
};
// Loads the newest complete checkpoint of the run in `experiment_dir` (training_checkpoint_folder) into `multi_stage`,
// with `optimizer_state` Adam's moments too, after checking it holds the architecture of `model`; nothing when the run
// has none.
std::optional<ResumedCheckpoint> resume_training(const std::filesystem::path& experiment_dir, const ModelConfig& model,
                                                 MultiStage& multi_stage, bool optimizer_state);

}  // namespace fast_llm::engine
