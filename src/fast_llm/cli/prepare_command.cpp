// `fast-llm prepare`: writes datasets in Fast-LLM's `.fast_llm_dataset` format.
//   prepare byte_corpus --output DIR [--source PATH ...] [--max-bytes N]
//       text files already on this machine, one document per file, byte-level tokens (vocabulary 258); writes
//       DIR/shard_0_0.fast_llm_dataset and DIR/fast_llm_config.yaml for `data.datasets.<name>: {type: file, path:
//       DIR/fast_llm_config.yaml}`.
//   prepare gpt_memmap -c CONFIG   (Fast-LLM's: Hugging Face datasets and tokenizers; not available yet)
#include <fmt/format.h>

#include "fast_llm/cli/commands.h"
#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/data/corpus.h"
#include "fast_llm/engine/checkpoint/directory.h"

namespace fast_llm::cli {

namespace {
struct ByteCorpusOptions {
  std::string output;
  std::vector<std::string> sources;
  int64_t max_bytes = int64_t(64) << 20;
};
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

  add_refused_command(*prepare, action, "gpt_memmap", "Tokenize a Hugging Face dataset into memmap shards.", "prepare",
                      "gpt_memmap needs Hugging Face datasets and tokenizers, which are not available yet; "
                      "`prepare byte_corpus` makes a byte-level dataset");
}

}  // namespace fast_llm::cli
