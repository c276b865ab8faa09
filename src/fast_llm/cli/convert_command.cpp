// `fast-llm convert gpt [-c config.yaml] input.format=... input.path=... output.format=... output.path=... [-v]`:
// converts a GPT checkpoint between formats (distributed, fast_llm, llama, mistral, qwen2, mixtral; `auto` reads the
// Hugging Face format from config.json), with Fast-LLM's ConvertConfig fields (input, output, use_cpu, exist_ok,
// layers_per_step). `<output.path>/ok` is written last.
//
// Also the hidden `fast-llm model_outputs gpt pretrained.format=... pretrained.path=... tokens=... output=...`: logits,
// loss and gradients of a checkpoint's model on given tokens, for checks against other implementations
// (tools/hf_check.py; models/gpt/conversion/reference_outputs.h).
#include "fast_llm/cli/commands.h"
#include "fast_llm/cli/config_loading.h"
#include "fast_llm/engine/checkpoint/convert.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/models/gpt/conversion/reference_outputs.h"
#include "fast_llm/models/gpt/model_type.h"

namespace fast_llm::cli {

namespace {

struct ConvertOptions {
  std::string config;
  bool validate = false;
  std::vector<std::string> overrides;
};

void add_gpt_conversion(CLI::App& command, CommandAction& action) {
  auto options = std::make_shared<ConvertOptions>();
  command.add_option("-c,--config", options->config, "YAML configuration file (ConvertConfig: input, output, ...).");
  command.add_flag("-v,--validate", options->validate, "Print the resolved configuration and exit.");
  command.add_option("overrides", options->overrides,
                     "Overrides `a.b.c=value` (value read as YAML), e.g. input.format=llama input.path=/m "
                     "output.format=fast_llm output.path=/out.");
  command.callback([&action, options] {
    action = [options] {
      engine::ConvertConfig config;
      std::optional<std::filesystem::path> file;
      if (!options->config.empty()) file = options->config;
      load_config(config, file, options->overrides);
      if (options->validate) {
        print_resolved_config(config);
        return 0;
      }
      require_supported(config);
      engine::convert(config, models::gpt::gpt_model_type());
      return 0;
    };
  });
}

void add_model_outputs(CLI::App& command, CommandAction& action) {
  auto options = std::make_shared<ConvertOptions>();
  command.add_option("-c,--config", options->config, "YAML configuration file (pretrained, model, tokens, output).");
  command.add_flag("-v,--validate", options->validate, "Print the resolved configuration and exit.");
  command.add_option("overrides", options->overrides, "Overrides `a.b.c=value`.");
  command.callback([&action, options] {
    action = [options] {
      models::gpt::ModelOutputsConfig config;
      std::optional<std::filesystem::path> file;
      if (!options->config.empty()) file = options->config;
      engine::load_config_with_pretrained(config, read_config_tree(file, options->overrides),
                                          models::gpt::gpt_model_type());
      if (options->validate) {
        print_resolved_config(config);
        return 0;
      }
      require_supported(config);
      models::gpt::write_model_outputs(config);
      return 0;
    };
  });
}

}  // namespace

void add_convert_command(CLI::App& app, CommandAction& action) {
  auto* convert = app.add_subcommand("convert", "Convert checkpoints between formats (distributed, fast_llm, llama, "
                                                "mistral, qwen2, mixtral).");
  convert->require_subcommand(0, 1);
  add_gpt_conversion(*convert->add_subcommand("gpt", "Convert a GPT checkpoint."), action);
  // Hidden (an empty group): a debugging tool for reference checks, not part of the user contract.
  auto* outputs = app.add_subcommand("model_outputs", "Logits, loss and gradients of a checkpoint's model on given "
                                                      "tokens (reference checks).");
  outputs->group("");
  outputs->require_subcommand(0, 1);
  add_model_outputs(*outputs->add_subcommand("gpt", "A GPT checkpoint."), action);
}

}  // namespace fast_llm::cli
