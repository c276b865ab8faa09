// The subcommands of `fast-llm`. Each adds itself to the CLI11 app and sets the action it runs when chosen.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace fast_llm::cli {

// The action of the chosen subcommand; returns the process exit code.
using CommandAction = std::function<int()>;

void add_train_command(CLI::App& app, CommandAction& action);
void add_kernels_command(CLI::App& app, CommandAction& action);
void add_convert_command(CLI::App& app, CommandAction& action);
void add_prepare_command(CLI::App& app, CommandAction& action);
void add_evaluate_command(CLI::App& app, CommandAction& action);
void add_generate_command(CLI::App& app, CommandAction& action);

}  // namespace fast_llm::cli
