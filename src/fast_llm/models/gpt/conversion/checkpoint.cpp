#include "fast_llm/models/gpt/conversion/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/engine/checkpoint/distributed.h"
#include "fast_llm/engine/checkpoint/fast_llm_format.h"
#include "fast_llm/engine/checkpoint/metadata.h"
#include "fast_llm/models/gpt/conversion/huggingface.h"
#include "fast_llm/models/gpt/model.h"

namespace fast_llm::models::gpt {

namespace {

constexpr std::string_view kComponent = "checkpoint";
using engine::CheckpointFormat;

bool is_huggingface(CheckpointFormat format) {
  return format == CheckpointFormat::llama || format == CheckpointFormat::mistral ||
         format == CheckpointFormat::qwen2 || format == CheckpointFormat::auto_;
}

const std::filesystem::path& require_path(const engine::CheckpointLoadConfig& pretrained) {
  if (!pretrained.path) throw ConfigError(pretrained.field_path("path"), "is required to load a checkpoint");
  if (!std::filesystem::exists(*pretrained.path))
    throw Error(kComponent, fmt::format("{}: {} does not exist", pretrained.field_path("path"),
                                        pretrained.path->string()));
  return *pretrained.path;
}

// A distributed checkpoint: the directory itself, or the newest complete step of a checkpoint folder.
std::filesystem::path distributed_directory(const std::filesystem::path& path) {
  if (std::filesystem::exists(path / engine::kMetadataFile)) {
    if (!engine::checkpoint_complete(path))
      throw Error(kComponent, fmt::format("{}: the checkpoint is incomplete (no `ok`: its write was interrupted)",
                                          path.string()));
    return path;
  }
  if (auto latest = engine::latest_checkpoint(path)) return *latest;
  throw Error(kComponent, fmt::format("{}: neither a distributed checkpoint (metadata.yaml) nor a folder of complete "
                                      "ones",
                                      path.string()));
}

YAML::Node select_sections(const YAML::Node& model, engine::ModelConfigType load_config, const std::string& where) {
  YAML::Node result(YAML::NodeType::Map);
  if (load_config == engine::ModelConfigType::none) return result;
  if (!model["base_model"]) throw Error(kComponent, fmt::format("{}: the stored config has no base_model", where));
  result["base_model"] = YAML::Clone(model["base_model"]);
  if (load_config == engine::ModelConfigType::fast_llm) {
    for (const char* section : {"multi_stage", "distributed"})
      if (model[section]) result[section] = YAML::Clone(model[section]);
  }
  return result;
}

GPTBaseModelConfig validate_base_model(const YAML::Node& node, const std::string& where) {
  GPTBaseModelConfig config;
  try {
    config.load(node, "model.base_model");
    config.validate("model.base_model");
  } catch (const ConfigError& error) {
    throw Error(kComponent, fmt::format("{}: its model config is invalid: {}", where, error.what()));
  }
  return config;
}

YAML::Node model_config_yaml(const GPTModelConfig& model) {
  return model.to_yaml(config::WriteOptions{.explicit_only = true});
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// ConvertConfig

void ConvertConfig::visit(config::Visitor& v) {
  using config::Hint;
  v(input, "input", "The checkpoint to read.", Hint::core);
  v(output, "output", "The checkpoint to write.", Hint::core);
  v(use_cpu, "use_cpu", "Convert on the CPU. Conversion here always runs on the CPU, tensor by tensor.",
    Hint::optional);
  v(exist_ok, "exist_ok", "Allow writing into an existing, non-empty output directory (files of the same name are "
                          "replaced).",
    Hint::optional);
  v(layers_per_step, "layers_per_step",
    "Fast-LLM converts this many layers at a time to bound memory; here every conversion streams one tensor (or one "
    "output file) at a time, so the value changes nothing.",
    Hint::optional, config::check::gt(0));
}

void ConvertConfig::check() const {
  if (!input.path) fail("input", "input.path is required");
  if (!output.path) fail("output", "output.path is required");
  if (output.is_explicit("optimizer_state") && *output.optimizer_state && !input.optimizer_state)
    fail("output", "output.optimizer_state is true but input.optimizer_state is false: nothing to write");
}

// ---------------------------------------------------------------------------------------------------------------
// Reading

YAML::Node load_pretrained_model_config(const engine::CheckpointLoadConfig& pretrained) {
  const std::filesystem::path& path = require_path(pretrained);
  if (pretrained.load_config == engine::ModelConfigType::fast_llm && is_huggingface(pretrained.format))
    throw ConfigError(pretrained.field_path("load_config"),
                      "fast_llm (multi_stage and distributed sections) needs a distributed or fast_llm checkpoint; "
                      "use model");
  switch (pretrained.format) {
    case CheckpointFormat::distributed: {
      const std::filesystem::path directory = distributed_directory(path);
      return select_sections(engine::read_checkpoint_metadata(directory, CheckpointFormat::distributed).config,
                             pretrained.load_config, directory.string());
    }
    case CheckpointFormat::fast_llm:
      return select_sections(engine::read_checkpoint_metadata(path, CheckpointFormat::fast_llm).config,
                             pretrained.load_config, path.string());
    default: {
      if (!is_huggingface(pretrained.format))
        throw NotSupportedError(kComponent, fmt::format("{}: format {} cannot be read", pretrained.field_path("format"),
                                                        config::enum_name(pretrained.format)));
      HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(path, pretrained.format, false);
      YAML::Node model(YAML::NodeType::Map);
      model["base_model"] = checkpoint.base_model;
      return select_sections(model, pretrained.load_config, path.string());
    }
  }
}

PretrainedState open_pretrained_state(const engine::CheckpointLoadConfig& pretrained,
                                      const GPTBaseModelConfig& base_model) {
  const std::filesystem::path& path = require_path(pretrained);
  PretrainedState result;
  switch (pretrained.format) {
    case CheckpointFormat::distributed: {
      const std::filesystem::path directory = distributed_directory(path);
      engine::CheckpointMetadata metadata = engine::read_checkpoint_metadata(directory, CheckpointFormat::distributed);
      result.state = engine::distributed_checkpoint_source(directory, metadata);
      result.training = metadata.state;
      result.consumed_samples = metadata.consumed_samples;
      result.has_optimizer_state = metadata.shards.size() > 1;
      break;
    }
    case CheckpointFormat::fast_llm: {
      engine::FastLLMCheckpoint checkpoint = engine::open_fast_llm_checkpoint(path);
      result.state = checkpoint.state;
      result.training = checkpoint.metadata.state;
      result.consumed_samples = checkpoint.metadata.consumed_samples;
      result.has_optimizer_state = checkpoint.metadata.shards.size() > 1;
      break;
    }
    default: {
      HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(path, pretrained.format, true);
      result.state = import_hf_weights(*checkpoint.format, checkpoint.tensors, base_model);
      break;
    }
  }
  if (pretrained.optimizer_state && !result.has_optimizer_state)
    throw Error(kComponent, fmt::format("{} is true but {} holds no optimizer state",
                                        pretrained.field_path("optimizer_state"), path.string()));
  return result;
}

// ---------------------------------------------------------------------------------------------------------------
// Writing

void save_model(const std::filesystem::path& directory, const engine::CheckpointStateSaveOptions& options,
                const GPTModelConfig& model, std::shared_ptr<const engine::TensorSource> state,
                const std::optional<engine::TrainingState>& training, int64_t consumed_samples) {
  const bool optimizer_state = options.optimizer_state.value_or(false);
  if (options.data_type) state = engine::convert_source(state, *options.data_type);
  switch (options.format) {
    case CheckpointFormat::fast_llm: {
      engine::CheckpointMetadata metadata{.format = CheckpointFormat::fast_llm,
                                          .config = model_config_yaml(model),
                                          .shards = engine::state_shards(optimizer_state),
                                          .state = optimizer_state ? training : std::nullopt,
                                          .consumed_samples = consumed_samples};
      if (!options.model_weights)
        throw NotSupportedError(kComponent, "a fast_llm checkpoint without weights is not written; set "
                                            "model_weights: true");
      engine::write_fast_llm_checkpoint(directory, *state, metadata, options.parameters_per_file);
      return;
    }
    case CheckpointFormat::distributed: {
      // The stage layout comes from the model config: build the model and its stages on the CPU.
      GPTModel gpt(model.base_model);
      engine::MultiStage multi_stage(gpt, model.multi_stage, model.distributed, Device::cpu(), /*training=*/true);
      engine::load_multi_stage_state(multi_stage, *state, optimizer_state);
      const engine::TrainingState stored = training.value_or(engine::TrainingState{});
      engine::write_distributed_checkpoint(directory, multi_stage,
                                           {.state = stored,
                                            .consumed_samples = consumed_samples,
                                            .model_config = model_config_yaml(model),
                                            .trainer_config = {}});
      return;
    }
    default: {
      if (!options.model_weights)
        throw NotSupportedError(kComponent, "a Hugging Face checkpoint without weights is not written; set "
                                            "model_weights: true");
      write_huggingface_checkpoint(directory, options.format, model.base_model, state, std::nullopt,
                                   options.parameters_per_file);
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Config merge

YAML::Node merge_config_trees(const YAML::Node& base, const YAML::Node& overrides) {
  if (!overrides || overrides.IsNull()) return YAML::Clone(base);
  if (!base || base.IsNull() || !base.IsMap() || !overrides.IsMap()) return YAML::Clone(overrides);
  const YAML::Node base_type = base["type"], override_type = overrides["type"];
  if (base_type && override_type && base_type.IsScalar() && override_type.IsScalar() &&
      base_type.Scalar() != override_type.Scalar())
    return YAML::Clone(overrides);
  YAML::Node result = YAML::Clone(base);
  for (const auto& entry : overrides) {
    const std::string key = entry.first.Scalar();
    const YAML::Node existing = base[key];
    result[key] = existing ? merge_config_trees(existing, entry.second) : YAML::Clone(entry.second);
  }
  return result;
}

YAML::Node with_pretrained_model_config(const YAML::Node& tree) {
  YAML::Node merged = YAML::Clone(tree);
  if (const YAML::Node section = tree["pretrained"]; section && section.IsMap()) {
    engine::CheckpointLoadConfig pretrained;
    pretrained.load(section, "pretrained");
    pretrained.validate("pretrained");
    if (pretrained.path && pretrained.load_config != engine::ModelConfigType::none) {
      YAML::Node loaded = load_pretrained_model_config(pretrained);
      merged["model"] = merge_config_trees(loaded, tree["model"]);
      log_main("Model config taken from {} ({}), with this run's values on top", pretrained.path->string(),
               config::enum_name(pretrained.format));
    }
  }
  return merged;
}

void load_trainer_config(GPTTrainerConfig& config, const YAML::Node& tree) {
  config.load(with_pretrained_model_config(tree));
  config.validate();
}

void warn_pretrained_architecture(const GPTTrainerConfig& config) {
  const engine::CheckpointLoadConfig& pretrained = config.pretrained;
  if (!pretrained.path || !pretrained.model_weights) return;
  // A run that resumes from its own checkpoint does not read `pretrained`.
  if (config.run.experiment_dir && engine::latest_checkpoint(*config.run.experiment_dir / "checkpoint")) return;
  engine::CheckpointLoadConfig load_model = pretrained;
  load_model.load_config = engine::ModelConfigType::model;
  const YAML::Node stored = load_pretrained_model_config(load_model);
  const GPTBaseModelConfig theirs = validate_base_model(stored["base_model"], pretrained.path->string());
  for (const std::string& difference : config::compare_architecture(config.model.base_model, theirs))
    log_warning("The model differs from the pretrained checkpoint's (this run != checkpoint): {}", difference);
}

// ---------------------------------------------------------------------------------------------------------------
// Training hooks

engine::TrainerHooks trainer_hooks(const GPTTrainerConfig& config) {
  const std::optional<std::filesystem::path>& experiment = config.run.experiment_dir;
  const engine::TrainingConfig& training = config.training;
  if (!experiment && training.checkpoint.enabled())
    throw ConfigError(config.run.field_path("experiment_dir"),
                      fmt::format("is needed to save checkpoints ({} is set)", training.checkpoint.field_path("interval")));
  if (!experiment && training.export_.enabled())
    throw ConfigError(config.run.field_path("experiment_dir"),
                      fmt::format("is needed to save exports ({} is set)", training.export_.field_path("interval")));
  if (training.export_.enabled() && !training.export_.model_weights)
    throw ConfigError(training.export_.field_path("model_weights"),
                      "exports without weights are not written: set model_weights: true");
  // A model the export format cannot hold is refused now, not at the first export after hours of training.
  if (training.export_.enabled() && is_huggingface(training.export_.format))
    export_hf_config(hf_format(training.export_.format), config.model.base_model,
                     training.export_.data_type.value_or(config.model.distributed.optimization_dtype));

  engine::TrainerHooks hooks;
  hooks.load = [&config](engine::Trainer& trainer) -> bool {
    const bool training_run = trainer.optimizer() != nullptr;
    if (config.run.experiment_dir) {
      const std::filesystem::path root = *config.run.experiment_dir / "checkpoint";
      if (auto latest = engine::latest_checkpoint(root)) {
        const engine::CheckpointMetadata metadata =
            engine::read_checkpoint_metadata(*latest, CheckpointFormat::distributed);
        if (!metadata.config["base_model"])
          throw Error(kComponent, fmt::format("{}: metadata.yaml has no config.base_model", latest->string()));
        const GPTBaseModelConfig stored = validate_base_model(metadata.config["base_model"], latest->string());
        const std::vector<std::string> differences =
            config::compare_architecture(config.model.base_model, stored);
        if (!differences.empty())
          throw Error(kComponent, fmt::format("the model of this run differs from its last checkpoint {} (this run "
                                              "!= checkpoint):\n  {}\nresume with the same model, or use another "
                                              "run.experiment_dir",
                                              latest->string(), fmt::join(differences, "\n  ")));
        log_main("Resuming from checkpoint {}", latest->string());
        const engine::TrainingState state =
            engine::load_distributed_checkpoint(*latest, metadata, trainer.multi_stage(), training_run);
        if (training_run) trainer.restore(state);
        const int64_t expected = state.completed_steps * trainer.samples_per_step();
        if (metadata.consumed_samples != expected)
          log_warning("Checkpoint {} consumed {} samples; {} steps of {} samples now resume the data at sample {} "
                      "(the batch size changed)",
                      latest->string(), metadata.consumed_samples, state.completed_steps, trainer.samples_per_step(),
                      expected);
        return true;
      }
    }
    const engine::CheckpointLoadConfig& pretrained = config.pretrained;
    if (!pretrained.path || !pretrained.model_weights) return false;
    log_main("Loading pretrained weights from {} ({})", pretrained.path->string(),
             config::enum_name(pretrained.format));
    PretrainedState state = open_pretrained_state(pretrained, config.model.base_model);
    const bool optimizer_state = pretrained.optimizer_state && training_run;
    engine::load_multi_stage_state(trainer.multi_stage(), *state.state, optimizer_state);
    if (optimizer_state && state.training) {
      // The optimizer continues (Adam step, learning-rate schedule, loss scale); the run's own step count starts at 0.
      engine::TrainingState restored{.completed_steps = 0, .optimizer = state.training->optimizer};
      trainer.restore(restored);
    }
    return true;
  };
  hooks.save_checkpoint = [&config](engine::Trainer& trainer, int64_t step) {
    const std::filesystem::path root = *config.run.experiment_dir / "checkpoint";
    const std::filesystem::path directory = root / std::to_string(step);
    const engine::TrainingState state = trainer.state();
    engine::save_distributed_checkpoint(directory, trainer.multi_stage(),
                                        {.state = state,
                                         .consumed_samples = step * trainer.samples_per_step(),
                                         .model_config = model_config_yaml(config.model),
                                         .trainer_config = config.to_yaml_string()});
    engine::prune_checkpoints(root, config.training.checkpoint);
    return directory;
  };
  hooks.save_export = [&config](engine::Trainer& trainer, int64_t step) {
    const engine::TrainingExportConfig& export_config = config.training.export_;
    const std::filesystem::path root =
        *config.run.experiment_dir / "export" / std::string(config::enum_name(export_config.format));
    const std::filesystem::path directory = root / std::to_string(step);
    const bool optimizer_state = export_config.optimizer_state.value_or(false) && trainer.optimizer() != nullptr;
    const engine::TrainingState state = trainer.state();
    engine::write_checkpoint_directory(
        directory,
        [&](const std::filesystem::path& temporary) {
          if (export_config.format == CheckpointFormat::distributed) {
            engine::write_distributed_checkpoint(temporary, trainer.multi_stage(),
                                                 {.state = state,
                                                  .consumed_samples = step * trainer.samples_per_step(),
                                                  .model_config = model_config_yaml(config.model),
                                                  .trainer_config = config.to_yaml_string()});
            return;
          }
          save_model(temporary, export_config, config.model,
                     engine::multi_stage_source(trainer.multi_stage(), optimizer_state), state,
                     step * trainer.samples_per_step());
        },
        /*sync=*/true);
    engine::prune_checkpoints(root, export_config);
    return directory;
  };
  return hooks;
}

// ---------------------------------------------------------------------------------------------------------------
// convert

void convert(const ConvertConfig& config) {
  const engine::CheckpointLoadConfig& input = config.input;
  const engine::CheckpointSaveConfig& output = config.output;
  const std::filesystem::path& destination = *output.path;
  if (std::filesystem::exists(destination) && !std::filesystem::is_directory(destination))
    throw Error(kComponent, fmt::format("output.path {} exists and is not a directory", destination.string()));
  if (std::filesystem::exists(destination) && !std::filesystem::is_empty(destination) && !config.exist_ok)
    throw Error(kComponent, fmt::format("output.path {} exists and is not empty (set exist_ok=true to write into it)",
                                        destination.string()));

  // The whole model config of the input (multi_stage and distributed too when it has them).
  engine::CheckpointLoadConfig whole = input;
  whole.load_config = is_huggingface(input.format) ? engine::ModelConfigType::model : engine::ModelConfigType::fast_llm;
  GPTModelConfig model;
  const YAML::Node model_yaml = load_pretrained_model_config(whole);
  try {
    model.load(model_yaml, "model");
    model.validate("model");
  } catch (const ConfigError& error) {
    throw Error(kComponent, fmt::format("{}: its model config is invalid: {}", input.path->string(), error.what()));
  }
  PretrainedState state = open_pretrained_state(input, model.base_model);

  engine::CheckpointStateSaveOptions options = output;
  options.optimizer_state = output.optimizer_state.value_or(false) && input.optimizer_state;
  log_main("Converting {} ({}) to {} ({})", input.path->string(), config::enum_name(input.format),
           destination.string(), config::enum_name(output.format));
  std::filesystem::create_directories(destination);
  std::filesystem::remove(destination / engine::kCompleteMarker);
  save_model(destination, options, model, state.state, state.training, state.consumed_samples);
  std::ofstream(destination / engine::kCompleteMarker).close();
  log_main("Done: {}", destination.string());
}

}  // namespace fast_llm::models::gpt
