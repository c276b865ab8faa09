#include "fast_llm/engine/checkpoint/convert.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/engine/checkpoint/metadata.h"
#include "fast_llm/engine/checkpoint/saving.h"

namespace fast_llm::engine {

namespace {
constexpr std::string_view kComponent = "checkpoint";
}  // namespace

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

void convert(const ConvertConfig& config, const ModelType& model_type) {
  const CheckpointLoadConfig& input = config.input;
  const CheckpointSaveConfig& output = config.output;
  const std::filesystem::path& destination = *output.path;
  if (std::filesystem::exists(destination) && !std::filesystem::is_directory(destination))
    throw Error(kComponent, fmt::format("output.path {} exists and is not a directory", destination.string()));
  if (std::filesystem::exists(destination) && !std::filesystem::is_empty(destination) && !config.exist_ok)
    throw Error(kComponent, fmt::format("output.path {} exists and is not empty (set exist_ok=true to write into it)",
                                        destination.string()));

  // The whole model config of the input (multi_stage and distributed too when it has them).
  CheckpointLoadConfig whole = input;
  whole.load_config = checkpoint_format_is_native(input.format) ? ModelConfigType::fast_llm : ModelConfigType::model;
  std::unique_ptr<ModelConfig> model = model_type.make_config();
  const YAML::Node model_yaml = load_pretrained_model_config(whole, model_type);
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
  std::filesystem::create_directories(destination);
  std::filesystem::remove(destination / kCompleteMarker);
  export_checkpoint(destination, options, *model, state.state, state.training, state.consumed_samples);
  std::ofstream(destination / kCompleteMarker).close();
  log_main("Done: {}", destination.string());
}

}  // namespace fast_llm::engine
