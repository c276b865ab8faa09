// fast-llm: the command line. This is the only place that catches errors: it prints them (with the rank in a
// distributed run) and exits 1. A fast_llm::Error or a std::filesystem error (always about a path) is the user's to
// fix; any other exception is reported as a bug.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <exception>
#include <filesystem>

#include "fast_llm/cli/commands.h"
#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"

namespace {

void set_rank_from_environment() {
  const char* rank = std::getenv("RANK");
  const char* world_size = std::getenv("WORLD_SIZE");
  if (rank && world_size) fast_llm::set_log_rank(std::atoi(rank), std::atoi(world_size));
}

// Command groups (`fast-llm`, `train`, `convert`, ...) take at most one subcommand rather than requiring one, so that a
// misspelt subcommand is reported by name (CLI11 checks a required subcommand before unexpected arguments); a group
// chosen without one is refused here.
void require_leaf_command(CLI::App& app) {
  CLI::App* chosen = &app;
  std::string path = app.get_name();
  while (!chosen->get_subcommands().empty()) {
    chosen = chosen->get_subcommands().front();
    path += " " + chosen->get_name();
  }
  if (!chosen->get_subcommands([](CLI::App*) { return true; }).empty())
    throw CLI::RequiredError(fmt::format("A subcommand of `{}`", path));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fast_llm;
  set_rank_from_environment();
  CLI::App app{"fast-llm: train GPT-style language models from one YAML file, on CPU or CUDA GPUs.", "fast-llm"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "fast-llm 0.1.0");
  bool debug = false;
  app.add_flag("--debug", debug, "Log debug lines (kernel choices, allocator and loader details).");

  cli::CommandAction action;
  cli::add_train_command(app, action);
  cli::add_convert_command(app, action);
  cli::add_prepare_command(app, action);
  cli::add_evaluate_command(app, action);
  cli::add_generate_command(app, action);
  cli::add_kernels_command(app, action);

  try {
    app.parse(argc, argv);
    require_leaf_command(app);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  if (debug) set_log_level(LogLevel::debug);
  try {
    return action ? action() : 0;
  } catch (const Error& error) {
    log_error("{}", error.what());
    if (log_level() <= LogLevel::debug)
      log_error("  thrown at {}:{}", error.location().file_name(), error.location().line());
  } catch (const std::filesystem::filesystem_error& error) {
    // The last resort for a filesystem call that was not checked where it was made: its path is one the user gave or
    // one derived from it (a component too long, a read-only filesystem, a file where a folder belongs), so it is
    // reported as the user's to fix, with the path and the reason.
    const std::string paths = error.path2().empty()
                                  ? error.path1().string()
                                  : fmt::format("{} -> {}", error.path1().string(), error.path2().string());
    log_error("[filesystem] {}: {}", paths, error.code().message());
  } catch (const std::bad_alloc&) {
    log_error("[memory] out of host memory");
  } catch (const std::exception& error) {
    log_error("[internal] {} (this is a bug in fast-llm)", error.what());
  }
  return 1;
}
