// `fast-llm train gpt -c config.yaml [a.b.c=value ...] [--validate] [--nproc-per-node N]` (also `train_gpt`,
// Fast-LLM's flat alias). With --nproc-per-node the command runs itself as N processes (local_launcher.h).
// `fast-llm evaluate gpt` takes the same configuration and runs only its evaluators on the `pretrained` weights: as
// Fast-LLM's command, it is the training run with `training.train_iters=0` appended to the overrides, so the metrics
// are printed and written (runs/<k>/metrics.jsonl) exactly as a training run's evaluations are.
#include <fmt/format.h>

#include <cstdlib>

#include "fast_llm/cli/commands.h"
#include "fast_llm/cli/config_loading.h"
#include "fast_llm/cli/local_launcher.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/engine/training/legacy_forms.h"
#include "fast_llm/models/gpt/model_type.h"
#include "fast_llm/models/gpt/trainer_config.h"
#include "fast_llm/models/gpt/training.h"

namespace fast_llm::cli {

namespace {

// What the command runs: training (with its evaluators) or the evaluators alone.
enum class RunKind { train, evaluate };

struct TrainOptions {
  RunKind kind = RunKind::train;
  std::string config;
  bool validate = false;
  int processes = 0;
  std::vector<std::string> overrides;
};

// The arguments each launched process gets: this command without --nproc-per-node.
std::vector<std::string> process_arguments(const TrainOptions& options) {
  std::vector<std::string> arguments;
  if (log_level() <= LogLevel::debug) arguments.push_back("--debug");
  if (options.kind == RunKind::evaluate)
    arguments.insert(arguments.end(), {"evaluate", "gpt"});
  else
    arguments.insert(arguments.end(), {"train", "gpt"});
  if (!options.config.empty()) arguments.insert(arguments.end(), {"-c", options.config});
  arguments.insert(arguments.end(), options.overrides.begin(), options.overrides.end());
  return arguments;
}

// The overrides the run applies: the user's, then (evaluation) no training steps. With --nproc-per-node the launching
// process checks the config as its first process will see it (the world of N processes), so that a layout that needs
// them (tensor_parallel 2 on 2 processes) passes; the processes themselves get the launcher's variables instead.
std::vector<std::string> run_overrides(const TrainOptions& options) {
  std::vector<std::string> overrides = options.overrides;
  if (options.kind == RunKind::evaluate) overrides.push_back("training.train_iters=0");
  if (options.processes > 0)
    for (const char* field : {"world_size", "local_world_size"})
      overrides.push_back(fmt::format("model.distributed.{}={}", field, options.processes));
  return overrides;
}

void add_gpt_run(CLI::App& command, CommandAction& action, RunKind kind) {
  auto options = std::make_shared<TrainOptions>();
  options->kind = kind;
  command.add_option("-c,--config", options->config, "YAML configuration file (Fast-LLM's schema).");
  command.add_flag("-v,--validate", options->validate,
                   "Print the resolved configuration (every field, defaults included) and exit.");
  command.add_option("--nproc-per-node", options->processes,
                     "Run as this many processes on this machine (data parallel), as torchrun "
                     "--nproc_per_node would; they meet at 127.0.0.1.")
      ->check(CLI::Range(1, 1024));
  command.add_option("overrides", options->overrides,
                     "Overrides `a.b.c=value` (value read as YAML), applied after the file, in order.");
  command.callback([&action, options] {
    action = [options] {
      models::gpt::GPTTrainerConfig config;
      std::optional<std::filesystem::path> file;
      if (!options->config.empty()) file = options->config;
      YAML::Node tree = read_config_tree(file, run_overrides(*options));
      for (const std::string& warning : engine::migrate_legacy_config_forms(tree)) log_warning("{}", warning);
      // The pretrained checkpoint's model config goes under the run's own values.
      engine::load_config_with_pretrained(config, tree, models::gpt::gpt_model_type());
      if (options->validate) {
        print_resolved_config(config);
        return 0;
      }
      require_supported(config);
      if (options->kind == RunKind::evaluate && config.training.evaluators.empty())
        throw ConfigError("training.evaluators", "`evaluate` runs the config's evaluators, and it has none: add one, "
                                                 "e.g. `training.evaluators.validation: {type: loss, interval: 1, "
                                                 "iterations: 10}` with `data.datasets.validation`");
      if (options->processes > 0) {
        if (std::getenv("RANK") != nullptr)
          throw Error("launcher", "--nproc-per-node inside a process that a launcher already started (RANK is set): "
                                  "use one launcher");
        // The configuration was checked once here; each process reads it again.
        return run_local_processes({.processes = options->processes, .arguments = process_arguments(*options)});
      }
      models::gpt::train(config);
      return 0;
    };
  });
}

}  // namespace

void add_train_command(CLI::App& app, CommandAction& action) {
  auto* train = app.add_subcommand("train", "Train a model.");
  train->require_subcommand(0, 1);
  add_gpt_run(*train->add_subcommand("gpt", "Train a GPT-style decoder (Llama, Mistral, Qwen2, ...)."), action,
              RunKind::train);
  add_gpt_run(*app.add_subcommand("train_gpt", "Same as `train gpt`."), action, RunKind::train);
}

void add_evaluate_command(CLI::App& app, CommandAction& action) {
  auto* evaluate = app.add_subcommand("evaluate", "Run the evaluators of a training config on a pretrained model.");
  evaluate->require_subcommand(0, 1);
  add_gpt_run(*evaluate->add_subcommand("gpt", "Evaluate a GPT model: the config's `training.evaluators` on its "
                                               "`pretrained` weights (any format), without training."),
              action, RunKind::evaluate);
}

}  // namespace fast_llm::cli
