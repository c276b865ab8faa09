// A checkpoint format only a model type can read and write: Hugging Face's, one per model family (GPT's are in
// models/gpt/conversion/huggingface.h). The checkpoint engine reaches it through ModelType::external_handler and sees
// what it needs of any format: the stored model config as a YAML tree, the weights as a TensorSource of `P/weights`
// (state.h), and a writer. Such formats hold no optimizer state and no training state.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>

#include "fast_llm/config/config.h"
#include "fast_llm/core/dtype.h"
#include "fast_llm/engine/checkpoint/state.h"

namespace fast_llm::engine {

class ExternalCheckpointHandler {
 public:
  virtual ~ExternalCheckpointHandler() = default;
  // What it reads and writes, for messages ("Hugging Face").
  virtual std::string_view description() const = 0;
  // The base-model config the checkpoint in `directory` describes, as a YAML tree of `model.base_model`.
  virtual YAML::Node read_base_model_config(const std::filesystem::path& directory) const = 0;
  // The weights of the checkpoint in `directory` as `P/weights` of the model `base_model` (validated) describes, read
  // on demand.
  virtual std::shared_ptr<TensorSource> open_weights(const std::filesystem::path& directory,
                                                     const config::Config& base_model) const = 0;
  // Throws NotSupportedError naming the fields when the format cannot hold the model `base_model` describes with
  // weights in `data_type` (checked before training, not at the first export).
  virtual void check_writable(const config::Config& base_model, DType data_type) const = 0;
  // Writes the config and `P/weights` of `state` (in their dtype) into `directory`, which must exist, in files of at
  // most `parameters_per_file` elements.
  // A model with PEFT adapters is written with the adapters merged into its weights.
  virtual void write(const std::filesystem::path& directory, const config::Config& base_model,
                     std::shared_ptr<const TensorSource> state, int64_t parameters_per_file) const = 0;
  // Throws NotSupportedError naming the fields when `base_model` has no PEFT adapters the format's PEFT files can hold.
  virtual void check_adapter_writable(const config::Config& base_model) const = 0;
  // Writes the PEFT adapters of `state` alone into `directory` (Hugging Face PEFT's adapter files), naming
  // `base_model_path` as their base model when given.
  virtual void write_adapter(const std::filesystem::path& directory, const config::Config& base_model,
                             std::shared_ptr<const TensorSource> state,
                             const std::optional<std::filesystem::path>& base_model_path) const = 0;
};

}  // namespace fast_llm::engine
