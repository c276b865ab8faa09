// Field lists and checks of the checkpoint configs.
#include "fast_llm/engine/checkpoint/config.h"

#include <fmt/format.h>

namespace fast_llm::engine {

using config::Hint;
using config::Visitor;
namespace check = config::check;

bool checkpoint_format_is_native(CheckpointFormat format) {
  return format == CheckpointFormat::distributed || format == CheckpointFormat::fast_llm;
}

bool checkpoint_format_supports_optimizer(CheckpointFormat format) { return checkpoint_format_is_native(format); }

std::optional<std::string_view> checkpoint_format_not_supported_reason(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::mtp_llama: return "multi-token prediction models";
    case CheckpointFormat::dream:
    case CheckpointFormat::diffusion_llama: return "diffusion language models";
    case CheckpointFormat::apriel_hybrid_ssm:
    case CheckpointFormat::apriel2_text: return "hybrid SSM models";
    case CheckpointFormat::gemma4: return "Gemma 4 models";
    default: return std::nullopt;
  }
}

namespace {
void check_format_supported(const config::Config& owner, CheckpointFormat format) {
  if (auto reason = checkpoint_format_not_supported_reason(format))
    owner.fail("format", fmt::format("{} is not supported yet ({})", config::enum_name(format), *reason));
}
}  // namespace

void CheckpointLoadConfig::visit(Visitor& v) {
  v(format, "format", "Format of the checkpoint.", Hint::core);
  v(path, "path", "Where the checkpoint is. Unset: nothing is loaded.", Hint::core);
  v(timeout, "timeout", "Timeout of the loading collectives, in seconds. Unset: the default.", Hint::optional,
    check::gt(0.0));
  v(load_config, "load_config",
    "Which configuration sections to take from the checkpoint: none, the base model, or also multi_stage and "
    "distributed (fast_llm). Values set in this run's config take precedence.",
    Hint::core);
  v(model_weights, "model_weights", "Load the model weights.", Hint::feature);
  v(optimizer_state, "optimizer_state", "Load the optimizer state too.", Hint::feature);
}

void CheckpointLoadConfig::check() const {
  check_format_supported(*this, format);
  if (optimizer_state && !checkpoint_format_supports_optimizer(format))
    fail("optimizer_state", fmt::format("format {} holds no optimizer state", config::enum_name(format)));
}

void CheckpointStateSaveOptions::visit_save_options(Visitor& v) {
  v(format, "format", "Format to write.", Hint::core);
  v(model_weights, "model_weights", "Save the model weights.", Hint::feature);
  v(optimizer_state, "optimizer_state", "Save the optimizer state. Unset: when the format can hold it.",
    Hint::feature);
  v(parameters_per_file, "parameters_per_file", "Largest number of parameters in one file.", Hint::feature,
    check::ge(int64_t(1) << 20));
  v(data_type, "data_type", "Data type of the saved weights. Unset: as stored.", Hint::feature);
  v(peft, "peft",
    "A model with PEFT (LoRA) adapters, saved in a Hugging Face format: `merged` writes the model with the adapters "
    "merged into its weights, `adapter` the adapters alone in Hugging Face PEFT's format. Native formats keep the "
    "adapters as they are.",
    Hint::feature);
}

void CheckpointStateSaveOptions::resolve_save_options() {
  if (!optimizer_state) optimizer_state = checkpoint_format_supports_optimizer(format);
}

void CheckpointStateSaveOptions::check_save_options(const config::Config& owner) const {
  check_format_supported(owner, format);
  if (format == CheckpointFormat::auto_)
    owner.fail("format", "auto only applies to loading; name the format to write");
  if (peft == PeftExport::adapter && checkpoint_format_is_native(format))
    owner.fail("peft", fmt::format("adapter applies to Hugging Face formats; format {} keeps the adapters in the model",
                                   config::enum_name(format)));
  if (*optimizer_state && !checkpoint_format_supports_optimizer(format))
    owner.fail("optimizer_state", fmt::format("format {} cannot hold optimizer state", config::enum_name(format)));
}

void CheckpointSaveConfig::visit(Visitor& v) {
  v(path, "path", "Where to write the checkpoint.", Hint::core);
  v(timeout, "timeout", "Timeout of the saving collectives, in seconds. Unset: the default.", Hint::optional,
    check::gt(0.0));
  visit_save_options(v);
}

void CheckpointSaveConfig::derive() { resolve_save_options(); }

void CheckpointSaveConfig::check() const { check_save_options(*this); }

}  // namespace fast_llm::engine
