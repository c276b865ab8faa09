// GPT checkpoints in every format: what `pretrained`, `training.checkpoint`, `training.export` and `fast-llm convert
// gpt` use (reference/fast-llm.md §3, §6.6).
//
//   format        reads                                   writes
//   distributed   <path> = checkpoint/<step> (or the       training checkpoints; convert output
//                 checkpoint folder: its newest complete)
//   fast_llm      metadata.yaml + model_<i>.safetensors    exports, convert output
//   llama, mistral, qwen2 (auto: by model_type)
//                 config.json + safetensors (index)        exports, convert output
//
// `pretrained.load_config` decides what of a checkpoint's configuration the run takes: none, the base model (`model`),
// or also multi_stage and distributed (`fast_llm`, native formats only). The run's own YAML overrides it field by
// field: the checkpoint's config tree is merged with the keys the user wrote (load_trainer_config).
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <memory>
#include <optional>

#include "fast_llm/config/config.h"
#include "fast_llm/engine/checkpoint/config.h"
#include "fast_llm/engine/checkpoint/state.h"
#include "fast_llm/engine/training/trainer.h"
#include "fast_llm/models/gpt/config.h"
#include "fast_llm/models/gpt/trainer_config.h"

namespace fast_llm::models::gpt {

// `fast-llm convert gpt` (Fast-LLM's ConvertConfig).
struct ConvertConfig : config::Config {
  engine::CheckpointLoadConfig input;
  engine::CheckpointSaveConfig output;
  bool use_cpu = false;
  bool exist_ok = false;
  std::optional<int> layers_per_step;
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

// The configuration `pretrained` holds, as a YAML tree of `model` ({base_model} or {base_model, multi_stage,
// distributed}, as load_config says; empty for none).
YAML::Node load_pretrained_model_config(const engine::CheckpointLoadConfig& pretrained);

struct PretrainedState {
  std::shared_ptr<engine::TensorSource> state;  // `P/weights` (+ Adam shards when the checkpoint has them)
  std::optional<engine::TrainingState> training;
  int64_t consumed_samples = 0;
  bool has_optimizer_state = false;
};
// The tensors of `pretrained` for the model `base_model` describes (Hugging Face weights are mapped to it).
PretrainedState open_pretrained_state(const engine::CheckpointLoadConfig& pretrained,
                                      const GPTBaseModelConfig& base_model);

// Writes `state` of the model `model` into `directory` (which must exist) in `options.format`. `training` goes into
// native formats' metadata; the distributed format also needs the multi-stage layout, built here on the CPU.
void save_model(const std::filesystem::path& directory, const engine::CheckpointStateSaveOptions& options,
                const GPTModelConfig& model, std::shared_ptr<const engine::TensorSource> state,
                const std::optional<engine::TrainingState>& training, int64_t consumed_samples);

// `base` with `overrides` applied key by key (mappings merge recursively; a mapping whose `type` differs from the
// base's replaces it whole, since the fields of another type do not apply).
YAML::Node merge_config_trees(const YAML::Node& base, const YAML::Node& overrides);

// `tree` (a config with a `pretrained` section) with the pretrained checkpoint's model config merged under its `model`
// (as `pretrained.load_config` says).
YAML::Node with_pretrained_model_config(const YAML::Node& tree);

// Loads the trainer config from `tree` (file + overrides) after merging the pretrained checkpoint's model config
// under it, then validates.
void load_trainer_config(GPTTrainerConfig& config, const YAML::Node& tree);

// Logs a warning per architecture field where `config` differs from the model of `pretrained` (set, with a path).
void warn_pretrained_architecture(const GPTTrainerConfig& config);

// The checkpoint engine's hooks of a `train gpt` run: resume from the newest complete checkpoint of
// `<run.experiment_dir>/checkpoint`, else load `pretrained`; save checkpoints and exports (with pruning).
engine::TrainerHooks trainer_hooks(const GPTTrainerConfig& config);

// `fast-llm convert gpt`.
void convert(const ConvertConfig& config);

}  // namespace fast_llm::models::gpt
