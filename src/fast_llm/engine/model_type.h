// What the engine knows of a kind of model (`gpt`) beyond its layers (base_model.h): its config and a descriptor, which
// the model type implements once (models/gpt/model_type.h). The engine includes nothing from models/.
//
// ModelConfig is the `model` section (Fast-LLM's FastLLMModelConfig): base_model, multi_stage, distributed. The engine
// reads multi_stage and distributed, and sees the base model only as a generic config (YAML, architecture comparison).
//
// ModelType is what the checkpoint engine needs where a checkpoint is more than flat buffers and YAML trees: a fresh
// config to load a stored one into (comparing a stored architecture with the run's, `convert`), the model a config
// describes (laying out a `distributed` checkpoint during `convert`), and the handlers of the formats only the model
// type can read and write (checkpoint/external.h: Hugging Face's, per model family).
#pragma once

#include <memory>
#include <string_view>

#include "fast_llm/config/config.h"
#include "fast_llm/engine/checkpoint/config.h"
#include "fast_llm/engine/distributed/config.h"
#include "fast_llm/engine/multi_stage/config.h"

namespace fast_llm::engine {

// Defined in base_model.h and checkpoint/external.h; declared only here, so that this header, which model configs
// include, stays a config header (no layers, no tensors).
class BaseModel;
class ExternalCheckpointHandler;

class ModelType;

struct ModelConfig : config::Config {
  MultiStageConfig multi_stage;
  DistributedConfig distributed;

  virtual const ModelType& model_type() const = 0;
  virtual config::Config& base_model_config() = 0;
  virtual const config::Config& base_model_config() const = 0;
};

class ModelType {
 public:
  virtual ~ModelType() = default;
  // The name commands (`train gpt`) and checkpoint metadata (`model: gpt`) use.
  virtual std::string_view name() const = 0;
  // A config of this type holding the defaults.
  virtual std::unique_ptr<ModelConfig> make_config() const = 0;
  // The model a validated config of this type describes.
  virtual std::unique_ptr<BaseModel> make_model(const ModelConfig& config) const = 0;
  // The handler of `format`, a format that is not native (checkpoint/config.h); NotSupportedError when this model type
  // has none.
  virtual const ExternalCheckpointHandler& external_handler(CheckpointFormat format) const = 0;
};

}  // namespace fast_llm::engine
