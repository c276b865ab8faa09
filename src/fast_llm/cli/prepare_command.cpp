// `fast-llm prepare`: writes datasets in Fast-LLM's `.fast_llm_dataset` format.
//   prepare byte_corpus --output DIR [--source PATH ...] [--max-bytes N]
//       text files already on this machine, one document per file, byte-level tokens (vocabulary 258); writes
//       DIR/shard_0_0.fast_llm_dataset and DIR/fast_llm_config.yaml for `data.datasets.<name>: {type: file, path:
//       DIR/fast_llm_config.yaml}`.
//   prepare gpt_memmap -c CONFIG [a.b=c ...] [--validate]
//       Fast-LLM's preparation config (preparation/gpt_memmap_config.h): local JSON Lines / text files tokenized with
//       a Hugging Face tokenizer.json (or SentencePiece .model) into shards and fast_llm_config*.yaml. Pre-0.4 forms
//       are migrated with a warning; --validate prints the resolved config and exits.
//   prepare dataset_discovery -c CONFIG [a.b=c ...] [--validate]
//       one blended config of every .fast_llm_dataset file under a folder (preparation/dataset_discovery.h).
#include <fmt/format.h>

#include "fast_llm/cli/commands.h"
#include "fast_llm/cli/config_loading.h"
#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/data/corpus.h"
#include "fast_llm/engine/checkpoint/directory.h"
#include "fast_llm/preparation/dataset_discovery.h"
#include "fast_llm/preparation/gpt_memmap_config.h"
#include "fast_llm/preparation/gpt_memmap_preparator.h"
#include "fast_llm/preparation/legacy_prepare_forms.h"

namespace fast_llm::cli {

namespace {
struct ByteCorpusOptions {
  std::string output;
  std::vector<std::string> sources;
  int64_t max_bytes = int64_t(64) << 20;
};

struct ConfigOptions {
  std::string config;
  bool validate = false;
  bool trust_remote_code = false;
  std::vector<std::string> overrides;
};

// `-c file`, overrides and --validate, as `train gpt` takes them (the file is optional, as there).
std::shared_ptr<ConfigOptions> add_config_options(CLI::App& command) {
  auto options = std::make_shared<ConfigOptions>();
  command.add_option("-c,--config", options->config, "YAML configuration file (Fast-LLM's schema).");
  command.add_flag("-v,--validate", options->validate,
                   "Print the resolved configuration (every field, defaults included) and exit.");
  command.add_option("overrides", options->overrides,
                     "Overrides `a.b.c=value` (value read as YAML), applied after the file, in order.");
  return options;
}

std::optional<std::filesystem::path> config_file(const ConfigOptions& options) {
  if (options.config.empty()) return std::nullopt;
  return std::filesystem::path(options.config);
}
}  // namespace

void add_prepare_command(CLI::App& app, CommandAction& action) {
  auto* prepare = app.add_subcommand("prepare", "Prepare a dataset in Fast-LLM's memory-mapped format.");
  prepare->require_subcommand(0, 1);

  auto* corpus = prepare->add_subcommand("byte_corpus", "Byte-level dataset from text files on this machine.");
  auto options = std::make_shared<ByteCorpusOptions>();
  corpus->add_option("-o,--output", options->output, "Output folder.")->required();
  corpus->add_option("-s,--source", options->sources,
                     "File, folder or wildcard path to read (repeatable; default: licenses, package copyright "
                     "notices and C++ headers found on this machine).");
  corpus->add_option("--max-bytes", options->max_bytes, "Stop after this many bytes of text.")
      ->check(CLI::PositiveNumber);
  corpus->callback([&action, options] {
    action = [options] {
      const std::filesystem::file_type output_type = engine::file_type_of(options->output, "prepare");
      if (output_type != std::filesystem::file_type::not_found && output_type != std::filesystem::file_type::directory)
        throw Error("prepare", fmt::format("--output {}: is a file, not a folder", options->output));
      data::CorpusOptions corpus_options;
      if (!options->sources.empty()) corpus_options.sources = options->sources;
      corpus_options.max_bytes = options->max_bytes;
      data::CorpusStats stats = data::build_byte_corpus(options->output, corpus_options);
      FLM_CHECK(stats.documents > 0, "prepare", "no text file found in the sources ({} files considered)",
                stats.files_considered);
      log_main("wrote {} documents, {} tokens from {} files ({} binary and {} empty or oversized skipped)",
               stats.documents, stats.tokens, stats.files_considered, stats.skipped_binary, stats.skipped_size);
      log_main("dataset: {}", stats.dataset_path.string());
      log_main("config:  {}", stats.config_path.string());
      return 0;
    };
  });

  auto* gpt_memmap = prepare->add_subcommand(
      "gpt_memmap", "Tokenize JSON Lines or text files into memmap shards (Fast-LLM's preparation config).");
  auto gpt_options = add_config_options(*gpt_memmap);
  gpt_memmap->add_flag("--trust-remote-code", gpt_options->trust_remote_code,
                       "Accepted as Fast-LLM's flag; no effect: fast-llm runs no dataset or tokenizer code.");
  gpt_memmap->callback([&action, gpt_options] {
    action = [gpt_options] {
      YAML::Node tree = read_config_tree(config_file(*gpt_options), gpt_options->overrides);
      for (const std::string& warning : preparation::migrate_legacy_preparation_forms(tree))
        log_warning("{}", warning);
      preparation::GPTMemmapPreparatorConfig config;
      config.load(tree);
      config.validate();
      if (gpt_options->validate) {
        print_resolved_config(config);
        return 0;
      }
      preparation::prepare_gpt_memmap(config);
      return 0;
    };
  });

  auto* discovery = prepare->add_subcommand(
      "dataset_discovery", "Blend every .fast_llm_dataset file under a folder into one config, weighted by tokens.");
  auto discovery_options = add_config_options(*discovery);
  discovery->callback([&action, discovery_options] {
    action = [discovery_options] {
      preparation::DatasetDiscoveryConfig config;
      load_config(config, config_file(*discovery_options), discovery_options->overrides);
      if (discovery_options->validate) {
        print_resolved_config(config);
        return 0;
      }
      preparation::run_dataset_discovery(config);
      return 0;
    };
  });
}

}  // namespace fast_llm::cli
