// Hugging Face checkpoints of GPT models (reference/fast-llm.md §3 "HF checkpoint formats"): config.json and
// safetensors (one `model.safetensors`, or shards with `model.safetensors.index.json`), read and written through
// per-format tables.
//
// A format is two tables, declared in one file per family (llama.cpp, mistral.cpp, qwen2.cpp, mixtral.cpp):
//   - config entries, each consuming config.json keys and filling base-model config fields (dotted paths of
//     `model.base_model`): `rename` (a key <-> a field, with HF's default when the key is absent), `constant` (a field
//     the format fixes, e.g. rms_norm; exporting another value is an error), `hf_constant` (a key that must have one
//     value, e.g. use_sliding_window: false), `ignored` (keys known not to change the model: token ids, cache, ...),
//     and `custom` (rotary, activation, ...). Importing a config.json with a key no entry consumes is an error naming
//     the key, so a model is never silently read as a different one. Exporting checks that the written config.json
//     reads back as the same architecture (config::compare_architecture), so every architecture field is either
//     represented or refused.
//   - weight entries, each mapping one Fast-LLM parameter (pattern with `{}` for the block index) to Hugging Face
//     tensors: `copy`, `concatenate` (k_proj + v_proj -> key_value, gate_proj + up_proj -> layer_1, along dim 0) and
//     `transpose` (down_proj <-> layer_2, stored transposed), and for mixtures of experts (`{e}` in the Hugging Face
//     names standing for the expert) `expert_concatenate` (w1 + w3 of each expert, experts one after the other ->
//     layer_1) and `expert_transpose` (w2 of each expert, transposed, one after the other -> layer_2). The number of
//     experts is the model's `decoder.block.mlp.experts`; expert tensors are read and written one expert at a time,
//     so converting holds one fused parameter and one expert tensor, never the whole model twice. A format may also
//     read another spelling of its weights (`import_spelling`, chosen when the checkpoint has a tensor matching its
//     marker): transformers 5's fused experts, `expert_stacked` ([E, R, H] -> layer_1 [E * R, H]) and
//     `expert_stacked_transpose` ([E, H, I], each expert transposed -> layer_2 [E * I, H]); exports write `weights`.
//     The model's own parameter list decides what must be there (biases only when enabled, lm_head only when the
//     embeddings are not tied); every parameter needs an entry and every tensor of the checkpoint must be used (or be
//     on the format's list of ignorable tensors).
#pragma once

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/core/dtype.h"
#include "fast_llm/engine/checkpoint/config.h"
#include "fast_llm/engine/checkpoint/external.h"
#include "fast_llm/engine/checkpoint/state.h"
#include "fast_llm/models/gpt/config.h"

namespace fast_llm::models::gpt {

// Type of a config.json value, for writing the base model's YAML values back as JSON.
enum class HfValueType { integer, number, boolean, string };

struct HfConfigEntry {
  enum class Kind { rename, constant, hf_constant, ignored, custom };
  Kind kind = Kind::ignored;
  // config.json keys this entry consumes.
  std::vector<std::string> hf_keys;
  // rename: fields receiving the key's value (several must agree when exporting); constant: the field.
  std::vector<std::string> paths;
  HfValueType type = HfValueType::string;
  // rename: Hugging Face's value when the key is absent (null: the key is required); constant: the field's value;
  // hf_constant: the only value accepted.
  nlohmann::json value;
  // hf_constant: write the key when exporting.
  bool write = false;
  // custom: import reads the whole config.json and fills the model YAML; export writes config.json keys from the
  // validated config written out in full. Both throw errors naming the key or field.
  std::function<void(const nlohmann::json& hf, YAML::Node& model)> import;
  std::function<void(const YAML::Node& model, nlohmann::ordered_json& hf)> export_;
};

HfConfigEntry hf_rename(std::string key, std::vector<std::string> paths, HfValueType type,
                        nlohmann::json default_value = nullptr);
HfConfigEntry hf_constant_field(std::string path, nlohmann::json value);
HfConfigEntry hf_fixed_key(std::string key, nlohmann::json value, bool write);
HfConfigEntry hf_ignored(std::vector<std::string> keys);
HfConfigEntry hf_custom(std::vector<std::string> keys, std::function<void(const nlohmann::json&, YAML::Node&)> import,
                        std::function<void(const YAML::Node&, nlohmann::ordered_json&)> export_);

struct HfWeightEntry {
  enum class Kind {
    copy,
    concatenate,
    transpose,
    expert_concatenate,
    expert_transpose,
    expert_stacked,            // import only
    expert_stacked_transpose,  // import only
  };
  Kind kind = Kind::copy;
  std::string parameter;          // Fast-LLM name, `{}` standing for the block index
  // Hugging Face names (two for concatenate and expert_concatenate), same `{}`; expert kinds also have `{e}`.
  std::vector<std::string> hf;
};

struct HfFormat {
  engine::CheckpointFormat format;
  std::string model_type;    // config.json `model_type`
  std::string architecture;  // config.json `architectures[0]`
  std::vector<HfConfigEntry> config;
  std::vector<HfWeightEntry> weights;
  // Checkpoint tensors that carry nothing (patterns with `{}`), e.g. rotary inverse-frequency buffers of old exports.
  std::vector<std::string> ignored_tensors;
  // Another spelling importing reads instead of `weights` when a checkpoint tensor matches `import_spelling_marker`.
  std::vector<HfWeightEntry> import_spelling;
  std::string import_spelling_marker;
};

// The formats (llama, mistral, qwen2, mixtral); each family's file defines its own.
const HfFormat& llama_format();
const HfFormat& mistral_format();
const HfFormat& qwen2_format();
const HfFormat& mixtral_format();
// The table of `format`; Error for formats without one.
const HfFormat& hf_format(engine::CheckpointFormat format);
// The format whose model_type is `model_type`, or nothing.
const HfFormat* hf_format_for_model_type(std::string_view model_type);

// config.json -> the base model config (YAML of `model.base_model`). `where` names the file in errors.
YAML::Node import_hf_config(const HfFormat& format, const nlohmann::json& hf, const std::string& where);
// The base model config -> config.json, writing `data_type` as the weights' dtype. Refuses (NotSupportedError naming
// the fields) a model the format cannot represent.
nlohmann::ordered_json export_hf_config(const HfFormat& format, const GPTBaseModelConfig& config, DType data_type);

// Hugging Face tensors -> `P/weights` of every parameter of the model `config` describes (and the reverse), computed
// when loaded. Errors name the tensor and the checkpoint: missing tensors, wrong shapes, tensors nothing uses.
std::shared_ptr<engine::TensorSource> import_hf_weights(const HfFormat& format,
                                                        std::shared_ptr<const engine::TensorSource> hf,
                                                        const GPTBaseModelConfig& config);
std::shared_ptr<engine::TensorSource> export_hf_weights(const HfFormat& format,
                                                        std::shared_ptr<const engine::TensorSource> state,
                                                        const GPTBaseModelConfig& config);

// The Hugging Face tensors a Fast-LLM parameter (not an expert one) is written as, in the order of its rows (a
// concatenated parameter splits in equal parts along dim 0), and whether they are its transpose. Error for a parameter
// the format has no place for.
struct HfTensorNames {
  std::vector<std::string> names;
  bool transposed = false;
};
HfTensorNames hf_tensor_names(const HfFormat& format, const std::string& parameter);

struct HuggingfaceCheckpoint {
  const HfFormat* format = nullptr;
  nlohmann::json config_json;
  YAML::Node base_model;                         // the imported base-model config
  std::shared_ptr<engine::SafetensorsSet> tensors;  // opened only by read_huggingface_checkpoint(..., true)
};

// Reads `<directory>/config.json` (and with `open_weights` the safetensors). `format` may be `auto` (chosen from
// model_type); otherwise model_type must be the format's.
HuggingfaceCheckpoint read_huggingface_checkpoint(const std::filesystem::path& directory,
                                                  engine::CheckpointFormat format, bool open_weights);

// Writes config.json and the weights (`P/weights` of `state`, converted to `data_type` when set) into `directory`
// (which must exist), shards of at most `parameters_per_file` elements.
void write_huggingface_checkpoint(const std::filesystem::path& directory, engine::CheckpointFormat format,
                                  const GPTBaseModelConfig& config, std::shared_ptr<const engine::TensorSource> state,
                                  std::optional<DType> data_type, int64_t parameters_per_file);

// These formats as the checkpoint engine reaches them (engine/checkpoint/external.h, through the GPT model type):
// llama, mistral, qwen2, mixtral, and auto (read only: the format config.json's model_type names). NotSupportedError
// for others.
const engine::ExternalCheckpointHandler& huggingface_handler(engine::CheckpointFormat format);

// Dotted-path access to YAML trees (the base model's fields).
YAML::Node yaml_at(const YAML::Node& root, std::string_view path);
void yaml_set(YAML::Node& root, std::string_view path, const YAML::Node& value);

}  // namespace fast_llm::models::gpt
