// Commands of Fast-LLM's command line that fast-llm accepts but cannot run yet. Each parses its arguments as Fast-LLM
// does (`-c config.yaml`, `a.b.c=value` overrides) and stops with a clear error, so scripts fail loudly instead of
// doing something else.
#include "fast_llm/cli/commands.h"
#include "fast_llm/core/error.h"

namespace fast_llm::cli {

namespace {

struct CommonOptions {
  std::string config;
  std::vector<std::string> overrides;
};

}  // namespace

void add_refused_command(CLI::App& parent, CommandAction& action, const std::string& name,
                         const std::string& description, const std::string& component, const std::string& reason) {
  auto* command = parent.add_subcommand(name, description);
  auto options = std::make_shared<CommonOptions>();
  command->add_option("-c,--config", options->config, "YAML configuration file.");
  command->add_option("overrides", options->overrides, "Overrides `a.b.c=value`.");
  // The callback owns the options: CLI11 writes into them while parsing, after this function has returned.
  command->callback([&action, options, component, reason] {
    action = [component, reason]() -> int { throw NotSupportedError(component, reason); };
  });
}

}  // namespace fast_llm::cli
