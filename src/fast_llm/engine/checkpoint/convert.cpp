#include "fast_llm/engine/checkpoint/convert.h"

#include <fmt/format.h>

#include <filesystem>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/engine/checkpoint/directory.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/engine/checkpoint/saving.h"

namespace fast_llm::engine {

namespace {
constexpr std::string_view kComponent = "checkpoint";

// The input's model config without the parallel layout it was trained in (pipeline and tensor parallelism, the
// processes): the conversion runs in this one process, and the formats it writes do not depend on a layout (the
// tensor-parallel parts are put together when the checkpoint is read).
YAML::Node without_parallel_layout(YAML::Node model) {
  YAML::Node distributed = model["distributed"];
  if (distributed && distributed.IsMap())
    for (const char* field : {"pipeline_parallel", "pipeline_first", "tensor_parallel", "sequence_tensor_parallel",
                              "world_size", "rank", "local_world_size"})
      distributed.remove(field);
  return model;
}
}  // namespace

void ConvertConfig::visit(config::Visitor& v) {
  using config::Hint;
  v(input, "input", "The checkpoint to read.", Hint::core);
  v(output, "output", "The checkpoint to write.", Hint::core);
  v(use_cpu, "use_cpu", "Convert on the CPU. Conversion here always runs on the CPU, tensor by tensor.",
    Hint::optional);
  v(exist_ok, "exist_ok", "Allow writing into an existing, non-empty output folder: once the conversion is complete, "
                          "the checkpoint it held (safetensors files, their index, config.json, metadata.yaml) is "
                          "replaced; other files are kept.",
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

void convert(const ConvertConfig& config, const ModelType& model_type) {
  const CheckpointLoadConfig& input = config.input;
  const CheckpointSaveConfig& output = config.output;
  const std::filesystem::path& destination = *output.path;
  check_separate_folders(destination, output.field_path("path"), *input.path, input.field_path("path"));
  switch (file_type_of(destination, kComponent)) {
    case std::filesystem::file_type::not_found: break;
    case std::filesystem::file_type::directory:
      if (!config.exist_ok && !folder_entries(destination, kComponent).empty())
        throw Error(kComponent, fmt::format("{} {} exists and is not empty (set exist_ok=true to replace the "
                                            "checkpoint in it)",
                                            output.field_path("path"), destination.string()));
      break;
    default:
      throw Error(kComponent, fmt::format("{} {} exists and is not a folder", output.field_path("path"),
                                          destination.string()));
  }

  // The whole model config of the input (multi_stage and distributed too when it has them).
  CheckpointLoadConfig whole = input;
  whole.load_config = checkpoint_format_is_native(input.format) ? ModelConfigType::fast_llm : ModelConfigType::model;
  std::unique_ptr<ModelConfig> model = model_type.make_config();
  const YAML::Node model_yaml = without_parallel_layout(YAML::Clone(load_pretrained_model_config(whole, model_type)));
  try {
    model->load(model_yaml, "model");
    model->validate("model");
  } catch (const ConfigError& error) {
    throw Error(kComponent, fmt::format("{}: its model config is invalid: {}", input.path->string(), error.what()));
  }
  PretrainedState state = open_pretrained_state(input, *model);

  CheckpointStateSaveOptions options = output;
  options.optimizer_state = output.optimizer_state.value_or(false) && input.optimizer_state;
  log_main("Converting {} ({}) to {} ({})", input.path->string(), config::enum_name(input.format),
           destination.string(), config::enum_name(output.format));
  write_checkpoint_directory(
      destination,
      [&](const std::filesystem::path& temporary) {
        export_checkpoint(temporary, options, *model, state.state, state.training, state.consumed_samples);
      },
      /*sync=*/true);
  log_main("Done: {}", destination.string());
}

}  // namespace fast_llm::engine
