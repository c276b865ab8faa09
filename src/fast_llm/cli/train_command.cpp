// `fast-llm train gpt -c config.yaml [a.b.c=value ...] [--validate]` (also `train_gpt`, Fast-LLM's flat alias).
#include "fast_llm/cli/commands.h"
#include "fast_llm/cli/config_loading.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/models/gpt/model_type.h"
#include "fast_llm/models/gpt/trainer_config.h"
#include "fast_llm/models/gpt/training.h"

namespace fast_llm::cli {

namespace {

struct TrainOptions {
  std::string config;
  bool validate = false;
  std::vector<std::string> overrides;
};

void add_gpt_training(CLI::App& command, CommandAction& action) {
  auto options = std::make_shared<TrainOptions>();
  command.add_option("-c,--config", options->config, "YAML configuration file (Fast-LLM's schema).");
  command.add_flag("-v,--validate", options->validate,
                   "Print the resolved configuration (every field, defaults included) and exit.");
  command.add_option("overrides", options->overrides,
                     "Overrides `a.b.c=value` (value read as YAML), applied after the file, in order.");
  command.callback([&action, options] {
    action = [options] {
      models::gpt::GPTTrainerConfig config;
      std::optional<std::filesystem::path> file;
      if (!options->config.empty()) file = options->config;
      // The pretrained checkpoint's model config goes under the run's own values.
      engine::load_config_with_pretrained(config, read_config_tree(file, options->overrides),
                                          models::gpt::gpt_model_type());
      if (options->validate) {
        print_resolved_config(config);
        return 0;
      }
      require_supported(config);
      models::gpt::train(config);
      return 0;
    };
  });
}

}  // namespace

void add_train_command(CLI::App& app, CommandAction& action) {
  auto* train = app.add_subcommand("train", "Train a model.");
  train->require_subcommand(0, 1);
  add_gpt_training(*train->add_subcommand("gpt", "Train a GPT-style decoder (Llama, Mistral, Qwen2, ...)."), action);
  add_gpt_training(*app.add_subcommand("train_gpt", "Same as `train gpt`."), action);
}

}  // namespace fast_llm::cli
