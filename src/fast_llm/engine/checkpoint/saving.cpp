#include "fast_llm/engine/checkpoint/saving.h"

#include <fmt/format.h>

#include <string>

#include "fast_llm/core/error.h"
#include "fast_llm/engine/checkpoint/directory.h"
#include "fast_llm/engine/checkpoint/distributed.h"
#include "fast_llm/engine/checkpoint/external.h"
#include "fast_llm/engine/checkpoint/fast_llm_format.h"
#include "fast_llm/engine/checkpoint/metadata.h"

namespace fast_llm::engine {

namespace {

constexpr std::string_view kComponent = "checkpoint";

[[noreturn]] void refuse_without_weights(std::string_view description) {
  throw NotSupportedError(kComponent, fmt::format("a {} checkpoint without weights is not written; set model_weights: "
                                                  "true",
                                                  description));
}

DistributedCheckpointContents distributed_contents(const TrainingSave& save) {
  return {.state = save.state,
          .consumed_samples = save.consumed_samples,
          .model = std::string(save.model.model_type().name()),
          .model_config = stored_model_config(save.model),
          .trainer_config = std::string(save.trainer_config)};
}

}  // namespace

YAML::Node stored_model_config(const ModelConfig& model) {
  return model.to_yaml(config::WriteOptions{.explicit_only = true});
}

void check_exportable(const CheckpointStateSaveOptions& options, const ModelConfig& model) {
  if (checkpoint_format_is_native(options.format)) return;
  const ExternalCheckpointHandler& handler = model.model_type().external_handler(options.format);
  if (options.peft == PeftExport::adapter)
    handler.check_adapter_writable(model.base_model_config());
  else
    handler.check_writable(model.base_model_config(), options.data_type.value_or(model.distributed.optimization_dtype));
}

void export_checkpoint(const std::filesystem::path& directory, const CheckpointStateSaveOptions& options,
                       const ModelConfig& model, std::shared_ptr<const TensorSource> state,
                       const std::optional<TrainingState>& training, int64_t consumed_samples,
                       const std::optional<std::filesystem::path>& base_model_path) {
  const bool optimizer_state = options.optimizer_state.value_or(false);
  if (options.data_type) state = convert_source(state, *options.data_type);
  switch (options.format) {
    case CheckpointFormat::fast_llm: {
      const CheckpointMetadata metadata{.format = CheckpointFormat::fast_llm,
                                        .model = std::string(model.model_type().name()),
                                        .config = stored_model_config(model),
                                        .shards = state_shards(optimizer_state),
                                        .state = optimizer_state ? training : std::nullopt,
                                        .consumed_samples = consumed_samples,
                                        .layout = YAML::Node(),
                                        .trainer_config = ""};
      if (!options.model_weights) refuse_without_weights("fast_llm");
      write_fast_llm_checkpoint(directory, *state, metadata, options.parameters_per_file);
      return;
    }
    case CheckpointFormat::distributed: {
      // The stage layout comes from the model config: build the model and its stages on the CPU.
      const std::unique_ptr<BaseModel> built = model.model_type().make_model(model);
      MultiStage multi_stage(*built, model.multi_stage, model.distributed, Device::cpu(), /*training=*/true);
      load_multi_stage_state(multi_stage, *state, optimizer_state);
      const TrainingSave save{.model = model,
                              .state = training.value_or(TrainingState{}),
                              .consumed_samples = consumed_samples,
                              .trainer_config = ""};
      write_distributed_checkpoint(directory, multi_stage, distributed_contents(save));
      return;
    }
    default: {
      const ExternalCheckpointHandler& handler = model.model_type().external_handler(options.format);
      if (!options.model_weights) refuse_without_weights(handler.description());
      if (options.peft == PeftExport::adapter)
        handler.write_adapter(directory, model.base_model_config(), state, base_model_path);
      else
        handler.write(directory, model.base_model_config(), state, options.parameters_per_file);
      return;
    }
  }
}

std::filesystem::path save_training_checkpoint(const std::filesystem::path& experiment_dir, int64_t step,
                                               MultiStage& multi_stage, const TrainingSave& save,
                                               const CheckpointRetention& retention, const ProcessGroups& groups) {
  const std::filesystem::path root = training_checkpoint_folder(experiment_dir);
  const std::filesystem::path directory = root / std::to_string(step);
  write_checkpoint_directory(
      directory,
      [&](const std::filesystem::path& temporary) {
        write_distributed_checkpoint(temporary, multi_stage, distributed_contents(save));
      },
      /*sync=*/true, groups);
  if (groups.is_main()) prune_checkpoints(root, retention);
  return directory;
}

std::filesystem::path save_training_export(const std::filesystem::path& experiment_dir, int64_t step,
                                           MultiStage& multi_stage, const TrainingSave& save,
                                           const CheckpointStateSaveOptions& options,
                                           const CheckpointRetention& retention, const ProcessGroups& groups) {
  const std::filesystem::path root = experiment_dir / "export" / std::string(config::enum_name(options.format));
  const std::filesystem::path directory = root / std::to_string(step);
  const bool optimizer_state = options.optimizer_state.value_or(false) && multi_stage.settings().training;
  write_checkpoint_directory(
      directory,
      [&](const std::filesystem::path& temporary) {
        if (options.format == CheckpointFormat::distributed) {
          write_distributed_checkpoint(temporary, multi_stage, distributed_contents(save));
          return;
        }
        // Every rank takes part in gathering the state; rank 0 writes the export.
        std::shared_ptr<TensorSource> state = multi_stage_source(multi_stage, optimizer_state);
        if (groups.is_main())
          export_checkpoint(temporary, options, save.model, state, save.state, save.consumed_samples,
                            save.base_model_path);
      },
      /*sync=*/true, groups);
  if (groups.is_main()) prune_checkpoints(root, retention);
  return directory;
}

}  // namespace fast_llm::engine
