// `fast-llm prepare`: writes datasets in Fast-LLM's `.fast_llm_dataset` format, and tokenizers to make them with.
//   prepare byte_corpus --output DIR [--source PATH ...] [--max-bytes N]
//       text files already on this machine, one document per file, byte-level tokens (vocabulary 258); writes
//       DIR/shard_0_0.fast_llm_dataset and DIR/fast_llm_config.yaml for `data.datasets.<name>: {type: file, path:
//       DIR/fast_llm_config.yaml}`.
//   prepare text_corpus --output FILE.jsonl [--source PATH ...] [--max-bytes N]
//       the same text files as JSON Lines, one {"text": ...} per file: input for gpt_memmap (the quick-start uses it).
//   prepare bpe_tokenizer --output DIR [--source PATH ...] [--vocab-size N] [--max-bytes N] [--model-max-length N]
//       trains a byte-level BPE tokenizer (Llama 3's pipeline) on the same text files (by default those byte_corpus
//       takes) and writes DIR/tokenizer.json and DIR/tokenizer_config.json in Hugging Face's formats; special tokens
//       <|endoftext|> (BOS and EOS) and the FIM tokens <fim_prefix>, <fim_middle>, <fim_suffix>, <fim_pad>.
//   prepare gpt_memmap -c CONFIG [a.b=c ...] [--validate]
//       Fast-LLM's preparation config (preparation/gpt_memmap_config.h): local JSON Lines / text files tokenized with
//       a Hugging Face tokenizer.json (or SentencePiece .model) into shards and fast_llm_config*.yaml. Pre-0.4 forms
//       are migrated with a warning; --validate prints the resolved config and exits.
//   prepare dataset_discovery -c CONFIG [a.b=c ...] [--validate]
//       one blended config of every .fast_llm_dataset file under a folder (preparation/dataset_discovery.h).
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <optional>

#include "fast_llm/cli/commands.h"
#include "fast_llm/cli/config_loading.h"
#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/data/corpus.h"
#include "fast_llm/engine/checkpoint/directory.h"
#include "fast_llm/tokenizer/bpe_tokenizer_json.h"
#include "fast_llm/tokenizer/bpe_trainer.h"
#include "fast_llm/preparation/dataset_discovery.h"
#include "fast_llm/preparation/gpt_memmap_config.h"
#include "fast_llm/preparation/gpt_memmap_preparator.h"
#include "fast_llm/preparation/legacy_prepare_forms.h"

namespace fast_llm::cli {

namespace {
// What the commands reading the machine's text (byte_corpus, text_corpus, bpe_tokenizer) share.
struct CorpusCommandOptions {
  std::string output;
  std::vector<std::string> sources;
  int64_t max_bytes = int64_t(64) << 20;

  data::CorpusOptions corpus() const {
    data::CorpusOptions options;
    if (!sources.empty()) options.sources = sources;
    options.max_bytes = max_bytes;
    return options;
  }
};

void add_corpus_options(CLI::App& command, CorpusCommandOptions& options, const std::string& output_description) {
  command.add_option("-o,--output", options.output, output_description)->required();
  command.add_option("-s,--source", options.sources,
                     "File, folder or wildcard path to read (repeatable; default: licenses, package copyright "
                     "notices and C++ headers found on this machine).");
  command.add_option("--max-bytes", options.max_bytes, "Stop after this many bytes of text.")
      ->check(CLI::PositiveNumber);
}

struct BpeTokenizerOptions {
  CorpusCommandOptions text;
  int64_t vocab_size = 4096;
  int64_t model_max_length = 2048;
};

// BOS/EOS first (id 0), then the fill-in-the-middle tokens as StarCoder names them (ids 1 to 4).
const std::vector<std::string> kSpecialTokens = {"<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>",
                                                 "<fim_pad>"};

void check_output_folder(const std::string& output) {
  const std::filesystem::file_type output_type = engine::file_type_of(output, "prepare");
  if (output_type != std::filesystem::file_type::not_found && output_type != std::filesystem::file_type::directory)
    throw Error("prepare", fmt::format("--output {}: is a file, not a folder", output));
}

int train_bpe_tokenizer(const BpeTokenizerOptions& options) {
  using Clock = std::chrono::steady_clock;
  check_output_folder(options.text.output);
  const auto start = Clock::now();
  const data::CorpusOptions corpus_options = options.text.corpus();
  data::CorpusStats stats;
  std::vector<std::string> texts;
  int64_t text_bytes = 0;
  data::for_each_corpus_text(corpus_options, stats, [&](std::string&& text) {
    text_bytes += static_cast<int64_t>(text.size());
    texts.push_back(std::move(text));
  });
  log_main("read {} text files, {:.1f} MB ({} binary, {} empty or oversized and {} duplicates skipped)",
           stats.documents, double(text_bytes) / 1e6, stats.skipped_binary, stats.skipped_size,
           stats.skipped_duplicate);

  // The progress line is redrawn in place on a terminal, at most ten times a second.
  const bool on_terminal = isatty(STDERR_FILENO) == 1;
  auto last_shown = Clock::now() - std::chrono::seconds(1);
  tokenizer::BpeTrainerOptions trainer_options{.vocab_size = options.vocab_size, .special_tokens = kSpecialTokens};
  const auto read_end = Clock::now();
  std::optional<Clock::time_point> merging_start;
  trainer_options.progress = [&](const tokenizer::BpeTrainingProgress& progress) {
    const auto now = Clock::now();
    const bool counting = progress.stage == tokenizer::BpeTrainingProgress::Stage::counting_words;
    if (!counting && !merging_start) merging_start = now;
    if (!on_terminal || now - last_shown < std::chrono::milliseconds(100)) return;
    last_shown = now;
    write_to_terminal(fmt::format("\r\033[K{}: {}/{} {} ({:.0f} s)", counting ? "counting words" : "merging",
                                  progress.done, progress.total, counting ? "files" : "tokens",
                                  std::chrono::duration<double>(now - start).count()));
  };
  const std::vector<std::string_view> documents(texts.begin(), texts.end());
  const tokenizer::TrainedBpe trained = tokenizer::train_byte_level_bpe(documents, trainer_options);
  if (on_terminal) write_to_terminal("\r\033[K");
  const auto end = Clock::now();
  auto seconds = [](Clock::duration duration) { return std::chrono::duration<double>(duration).count(); };
  log_main("{} words ({} distinct) -> {} tokens, {} merges in {:.1f} s (reading {:.1f} s, counting {:.1f} s, merging "
           "{:.1f} s)",
           trained.words, trained.distinct_words, trained.vocabulary.size(), trained.merges.size(), seconds(end - start),
           seconds(read_end - start), seconds(merging_start.value_or(end) - read_end),
           seconds(end - merging_start.value_or(end)));
  if (static_cast<int64_t>(trained.vocabulary.size()) < options.vocab_size)
    log_warning("the text has no pair left to merge: the vocabulary has {} tokens, not the {} asked for",
                trained.vocabulary.size(), options.vocab_size);
  tokenizer::write_byte_level_bpe_tokenizer(options.text.output, trained,
                                            {.special_tokens = kSpecialTokens,
                                             .model_max_length = options.model_max_length});
  log_main("tokenizer: {}", (std::filesystem::path(options.text.output) / "tokenizer.json").string());
  return 0;
}

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
  auto* prepare = app.add_subcommand("prepare", "Prepare a dataset in Fast-LLM's memory-mapped format, or a tokenizer.");
  prepare->require_subcommand(0, 1);

  auto* corpus = prepare->add_subcommand("byte_corpus", "Byte-level dataset from text files on this machine.");
  auto options = std::make_shared<CorpusCommandOptions>();
  add_corpus_options(*corpus, *options, "Output folder.");
  corpus->callback([&action, options] {
    action = [options] {
      check_output_folder(options->output);
      data::CorpusStats stats = data::build_byte_corpus(options->output, options->corpus());
      FLM_CHECK(stats.documents > 0, "prepare", "no text file found in the sources ({} files considered)",
                stats.files_considered);
      log_main("wrote {} documents, {} tokens from {} files ({} binary, {} empty or oversized and {} duplicates "
               "skipped)",
               stats.documents, stats.tokens, stats.files_considered, stats.skipped_binary, stats.skipped_size,
               stats.skipped_duplicate);
      log_main("dataset: {}", stats.dataset_path.string());
      log_main("config:  {}", stats.config_path.string());
      return 0;
    };
  });

  auto* text = prepare->add_subcommand(
      "text_corpus", "Text files on this machine as JSON Lines ({\"text\": ...}), input for gpt_memmap.");
  auto text_options = std::make_shared<CorpusCommandOptions>();
  add_corpus_options(*text, *text_options, "Output file (.jsonl).");
  text->callback([&action, text_options] {
    action = [text_options] {
      FLM_CHECK(engine::file_type_of(text_options->output, "prepare") != std::filesystem::file_type::directory,
                "prepare", "--output {}: is a folder; text_corpus writes one .jsonl file", text_options->output);
      data::write_text_corpus(text_options->output, text_options->corpus());
      return 0;
    };
  });

  auto* bpe = prepare->add_subcommand(
      "bpe_tokenizer", "Train a byte-level BPE tokenizer (Hugging Face tokenizer.json) on text files on this machine.");
  auto bpe_options = std::make_shared<BpeTokenizerOptions>();
  add_corpus_options(*bpe, bpe_options->text, "Output folder (tokenizer.json, tokenizer_config.json).");
  bpe->add_option("--vocab-size", bpe_options->vocab_size,
                  "Tokens in the vocabulary, the 5 special tokens and the 256 bytes included.")
      ->check(CLI::Range(int64_t(261), int64_t(INT32_MAX)));
  bpe->add_option("--model-max-length", bpe_options->model_max_length,
                  "model_max_length written to tokenizer_config.json.")
      ->check(CLI::PositiveNumber);
  bpe->callback([&action, bpe_options] { action = [bpe_options] { return train_bpe_tokenizer(*bpe_options); }; });

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
