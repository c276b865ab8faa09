#include "fast_llm/engine/checkpoint/loading.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fast_llm/config/merge.h"
#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/engine/checkpoint/directory.h"
#include "fast_llm/engine/checkpoint/distributed.h"
#include "fast_llm/engine/checkpoint/external.h"
#include "fast_llm/engine/checkpoint/fast_llm_format.h"
#include "fast_llm/engine/checkpoint/metadata.h"

namespace fast_llm::engine {

namespace {

constexpr std::string_view kComponent = "checkpoint";

const std::filesystem::path& require_path(const CheckpointLoadConfig& pretrained) {
  if (!pretrained.path) throw ConfigError(pretrained.field_path("path"), "is required to load a checkpoint");
  if (file_type_of(*pretrained.path, kComponent) == std::filesystem::file_type::not_found)
    throw Error(kComponent, fmt::format("{}: {} does not exist", pretrained.field_path("path"),
                                        pretrained.path->string()));
  return *pretrained.path;
}

// A distributed checkpoint: the directory itself, or the newest complete step of a checkpoint folder.
std::filesystem::path distributed_directory(const std::filesystem::path& path) {
  if (file_type_of(path / kMetadataFile, kComponent) != std::filesystem::file_type::not_found) {
    if (!checkpoint_complete(path))
      throw Error(kComponent, fmt::format("{}: the checkpoint is incomplete (no `ok`: its write was interrupted)",
                                          path.string()));
    return path;
  }
  if (auto latest = latest_checkpoint(path)) return *latest;
  throw Error(kComponent, fmt::format("{}: neither a distributed checkpoint (metadata.yaml) nor a folder of complete "
                                      "ones",
                                      path.string()));
}

CheckpointMetadata read_model_metadata(const std::filesystem::path& directory, CheckpointFormat format,
                                       const ModelType& model_type) {
  CheckpointMetadata metadata = read_checkpoint_metadata(directory, format);
  check_checkpoint_model(directory, metadata, model_type.name());
  return metadata;
}

YAML::Node select_sections(const YAML::Node& model, ModelConfigType load_config, const std::string& where) {
  YAML::Node result(YAML::NodeType::Map);
  if (load_config == ModelConfigType::none) return result;
  if (!model["base_model"]) throw Error(kComponent, fmt::format("{}: the stored config has no base_model", where));
  result["base_model"] = YAML::Clone(model["base_model"]);
  if (load_config == ModelConfigType::fast_llm) {
    for (const char* section : {"multi_stage", "distributed"})
      if (model[section]) result[section] = YAML::Clone(model[section]);
  }
  return result;
}

// The architecture fields where `model` differs from the stored base-model config `stored` (read as `model`'s type, so
// an invalid one is an error naming `where`), as "path: this run != stored" lines.
std::vector<std::string> architecture_differences(const ModelConfig& model, const YAML::Node& stored,
                                                  const std::string& where) {
  std::unique_ptr<ModelConfig> theirs = model.model_type().make_config();
  try {
    theirs->base_model_config().load(stored, "model.base_model");
    theirs->base_model_config().validate("model.base_model");
  } catch (const ConfigError& error) {
    throw Error(kComponent, fmt::format("{}: its model config is invalid: {}", where, error.what()));
  }
  return config::compare_architecture(model.base_model_config(), theirs->base_model_config());
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Configs

YAML::Node load_pretrained_model_config(const CheckpointLoadConfig& pretrained, const ModelType& model_type) {
  const std::filesystem::path& path = require_path(pretrained);
  if (pretrained.load_config == ModelConfigType::fast_llm && !checkpoint_format_is_native(pretrained.format))
    throw ConfigError(pretrained.field_path("load_config"),
                      "fast_llm (multi_stage and distributed sections) needs a distributed or fast_llm checkpoint; "
                      "use model");
  switch (pretrained.format) {
    case CheckpointFormat::distributed: {
      const std::filesystem::path directory = distributed_directory(path);
      return select_sections(read_model_metadata(directory, CheckpointFormat::distributed, model_type).config,
                             pretrained.load_config, directory.string());
    }
    case CheckpointFormat::fast_llm:
      return select_sections(read_model_metadata(path, CheckpointFormat::fast_llm, model_type).config,
                             pretrained.load_config, path.string());
    default: {
      YAML::Node model(YAML::NodeType::Map);
      model["base_model"] = model_type.external_handler(pretrained.format).read_base_model_config(path);
      return select_sections(model, pretrained.load_config, path.string());
    }
  }
}

YAML::Node with_pretrained_model_config(const YAML::Node& tree, const ModelType& model_type) {
  YAML::Node merged = YAML::Clone(tree);
  if (const YAML::Node section = tree["pretrained"]; section && section.IsMap()) {
    CheckpointLoadConfig pretrained;
    pretrained.load(section, "pretrained");
    pretrained.validate("pretrained");
    if (pretrained.path && pretrained.load_config != ModelConfigType::none) {
      YAML::Node loaded = load_pretrained_model_config(pretrained, model_type);
      merged["model"] = config::merge_config_trees(loaded, tree["model"]);
      log_main("Model config taken from {} ({}), with this run's values on top", pretrained.path->string(),
               config::enum_name(pretrained.format));
    }
  }
  // A trainer's reference models (`reference_models.<name>: {model, pretrained}`) take their checkpoints' model configs
  // the same way.
  if (const YAML::Node references = tree["reference_models"]; references && references.IsMap())
    for (const auto& entry : references)
      if (entry.second.IsMap())
        merged["reference_models"][entry.first.as<std::string>()] =
            with_pretrained_model_config(entry.second, model_type);
  return merged;
}

void load_config_with_pretrained(config::Config& config, const YAML::Node& tree, const ModelType& model_type) {
  config.load(with_pretrained_model_config(tree, model_type));
  config.validate();
}

void warn_pretrained_architecture(const ModelConfig& model, const CheckpointLoadConfig& pretrained,
                                  const std::optional<std::filesystem::path>& experiment_dir) {
  if (!pretrained.path || !pretrained.model_weights) return;
  // A run that resumes from its own checkpoint does not read `pretrained`.
  if (experiment_dir && latest_checkpoint(training_checkpoint_folder(*experiment_dir))) return;
  CheckpointLoadConfig load_model = pretrained;
  load_model.load_config = ModelConfigType::model;
  const YAML::Node stored = load_pretrained_model_config(load_model, model.model_type());
  for (const std::string& difference : architecture_differences(model, stored["base_model"], pretrained.path->string()))
    log_warning("The model differs from the pretrained checkpoint's (this run != checkpoint): {}", difference);
}

// ---------------------------------------------------------------------------------------------------------------
// States

PretrainedState open_pretrained_state(const CheckpointLoadConfig& pretrained, const ModelConfig& model) {
  const std::filesystem::path& path = require_path(pretrained);
  PretrainedState result;
  switch (pretrained.format) {
    case CheckpointFormat::distributed: {
      const std::filesystem::path directory = distributed_directory(path);
      CheckpointMetadata metadata = read_model_metadata(directory, CheckpointFormat::distributed, model.model_type());
      result.state = distributed_checkpoint_source(directory, metadata);
      result.training = metadata.state;
      result.consumed_samples = metadata.consumed_samples;
      result.has_optimizer_state = metadata.shards.size() > 1;
      break;
    }
    case CheckpointFormat::fast_llm: {
      FastLLMCheckpoint checkpoint = open_fast_llm_checkpoint(path);
      check_checkpoint_model(path, checkpoint.metadata, model.model_type().name());
      result.state = checkpoint.state;
      result.training = checkpoint.metadata.state;
      result.consumed_samples = checkpoint.metadata.consumed_samples;
      result.has_optimizer_state = checkpoint.metadata.shards.size() > 1;
      break;
    }
    default: {
      const ExternalCheckpointHandler& handler = model.model_type().external_handler(pretrained.format);
      result.state = handler.open_weights(path, model.base_model_config());
      break;
    }
  }
  if (pretrained.optimizer_state && !result.has_optimizer_state)
    throw Error(kComponent, fmt::format("{} is true but {} holds no optimizer state",
                                        pretrained.field_path("optimizer_state"), path.string()));
  return result;
}

std::optional<OptimizerState> load_pretrained(const CheckpointLoadConfig& pretrained, const ModelConfig& model,
                                              MultiStage& multi_stage, bool optimizer_state) {
  FLM_ASSERT(pretrained.path && pretrained.model_weights, "pretrained: no weights to load");
  log_main("Loading pretrained weights from {} ({})", pretrained.path->string(), config::enum_name(pretrained.format));
  const PretrainedState state = open_pretrained_state(pretrained, model);
  const bool with_optimizer = pretrained.optimizer_state && optimizer_state;
  load_multi_stage_state(multi_stage, *state.state, with_optimizer);
  if (!with_optimizer || !state.training) return std::nullopt;
  return state.training->optimizer;
}

std::optional<ResumedCheckpoint> resume_training(const std::filesystem::path& experiment_dir, const ModelConfig& model,
                                                 MultiStage& multi_stage, bool optimizer_state) {
  const std::optional<std::filesystem::path> latest = latest_checkpoint(training_checkpoint_folder(experiment_dir));
  if (!latest) return std::nullopt;
  const CheckpointMetadata metadata = read_model_metadata(*latest, CheckpointFormat::distributed, model.model_type());
  if (!metadata.config["base_model"])
    throw Error(kComponent, fmt::format("{}: metadata.yaml has no config.base_model", latest->string()));
  const std::vector<std::string> differences =
      architecture_differences(model, metadata.config["base_model"], latest->string());
  if (!differences.empty())
    throw Error(kComponent, fmt::format("the model of this run differs from its last checkpoint {} (this run != "
                                        "checkpoint):\n  {}\nresume with the same model, or use another "
                                        "run.experiment_dir",
                                        latest->string(), fmt::join(differences, "\n  ")));
  log_main("Resuming from checkpoint {}", latest->string());
  return ResumedCheckpoint{.directory = *latest,
                           .state = load_distributed_checkpoint(*latest, metadata, multi_stage, optimizer_state),
                           .consumed_samples = metadata.consumed_samples};
}

}  // namespace fast_llm::engine
