#include "fast_llm/preparation/gpt_memmap_preparator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <fstream>
#include <iterator>
#include <thread>

#include "fast_llm/core/error.h"
#include "fast_llm/core/file_writer.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/data/memmap.h"
#include "fast_llm/preparation/dataset_configs.h"
#include "fast_llm/preparation/document_preparer.h"
#include "fast_llm/preparation/input_files.h"
#include "fast_llm/preparation/progress.h"

namespace fast_llm::preparation {

namespace fs = std::filesystem;

namespace {
constexpr std::string_view kComponent = "prepare";

DocumentOptions document_options(const GPTMemmapPreparatorConfig& config) {
  const SourceSchemaConfig& schema = config.dataset.source_schema;
  return {.text_field = schema.text,
          .loss_masking_spans_field = schema.loss_masking_spans,
          .chosen_field = schema.chosen_span,
          .rejected_field = schema.rejected_span,
          .advantages_field = schema.advantages,
          .add_bos = config.add_bos,
          .add_eos = config.add_eos,
          .max_vocab_size = config.tokenizer.max_vocab_size,
          .bos_token = config.tokenizer.bos_token};
}

// Appends `count` to a cumulative-sum vector.
void push_count(std::optional<std::vector<int64_t>>& cumsum, size_t count) {
  if (cumsum) cumsum->push_back(cumsum->back() + int64_t(count));
}

// One shard being written: the file and what the configs need to know of it.
struct OpenShard {
  OpenShard(const fs::path& path, const data::MemmapWriter::Options& options, ShardSummary summary_, int64_t target)
      : writer(path, options), summary(std::move(summary_)), target_documents(target) {}
  data::MemmapWriter writer;
  ShardSummary summary;
  int64_t target_documents;
};

}  // namespace

PreparationSummary prepare_gpt_memmap(const GPTMemmapPreparatorConfig& config, const tokenizer::Tokenizer& tokenizer) {
  const auto start = std::chrono::steady_clock::now();
  PreparationSummary summary;
  const DocumentPreparer preparer(tokenizer, document_options(config));
  const SourceSchemaConfig& schema = config.dataset.source_schema;

  const int64_t vocab_size = config.tokenizer.max_vocab_size
                                 ? std::min(tokenizer.vocab_size(), *config.tokenizer.max_vocab_size)
                                 : tokenizer.vocab_size();
  summary.data_type = config.dataset.data_type ? *data::parse_token_data_type(*config.dataset.data_type)
                                               : data::token_data_type_for_vocab(vocab_size);

  const std::vector<InputFile> files =
      resolve_input_files(config.dataset.path.entries, config.dataset.data_files.entries);
  summary.files = int64_t(files.size());
  log_main("Counting the records of {} file{} ...", files.size(), files.size() == 1 ? "" : "s");
  const std::vector<int64_t> counts = count_records(files);
  int64_t total = 0;
  for (int64_t count : counts) total += count;
  FLM_CHECK(total > 0, kComponent, "dataset.path: no record in the {} input file(s) (all empty)", files.size());

  // Hugging Face's contiguous sharding: the first `total % shards` shards hold one more document.
  const int64_t num_shards = (total + config.documents_per_shard - 1) / config.documents_per_shard;
  std::vector<int64_t> shard_documents;
  for (int64_t index = 0; index < num_shards; ++index)
    shard_documents.push_back(total / num_shards + (index < total % num_shards ? 1 : 0));
  summary.shards = num_shards;

  const fs::path& output = config.output_path;
  std::error_code error;
  if (fs::exists(output, error) && !fs::is_directory(output, error))
    throw Error(kComponent, fmt::format("output_path {}: is a file, not a folder", output.string()));
  fs::create_directories(output, error);
  FLM_CHECK(!error, kComponent, "output_path {}: cannot create the folder: {}", output.string(), error.message());

  summary.threads = config.num_workers.value_or(int(std::max(1u, std::thread::hardware_concurrency())));
  log_main("Preparing {} documents into {} shard{} on {} thread{} (tokens as {}) ...", total, num_shards,
           num_shards == 1 ? "" : "s", summary.threads, summary.threads == 1 ? "" : "s",
           data::token_data_type_name(summary.data_type));

  const data::MemmapWriter::Options writer_options{.data_type = summary.data_type,
                                                   .loss_masking_spans = schema.loss_masking_spans.has_value(),
                                                   .preference_spans = schema.has_preference_spans(),
                                                   .token_data = schema.advantages.has_value()};
  std::vector<ShardSummary> shards;
  std::unique_ptr<OpenShard> shard;
  auto open_shard = [&] {
    ShardSummary shard_summary;
    shard_summary.path = fmt::format("shard_0_{}.fast_llm_dataset", shards.size());
    shard_summary.data_type = std::string(data::token_data_type_name(summary.data_type));
    if (writer_options.loss_masking_spans) shard_summary.loss_masking_cumsum.emplace(1, 0);
    shard_summary.token_data = writer_options.token_data;
    if (writer_options.preference_spans) {
      shard_summary.chosen_cumsum.emplace(1, 0);
      shard_summary.rejected_cumsum.emplace(1, 0);
    }
    const fs::path path = output / shard_summary.path;
    shard = std::make_unique<OpenShard>(path, writer_options, std::move(shard_summary), shard_documents[shards.size()]);
  };

  ProgressReporter progress("prepare", total);
  RecordReader reader(files);
  const size_t batch_size = size_t(std::max(256, 64 * summary.threads));
  auto read_batch = [&](std::vector<Record>& records) {
    size_t count = 0;
    while (count < batch_size && reader.next(records[count])) ++count;
    return count;
  };
  std::vector<Record> batch(batch_size), next_batch(batch_size);
  std::vector<data::Document> documents(batch_size);
  std::vector<std::exception_ptr> errors(batch_size);
  for (size_t count = read_batch(batch); count > 0;) {
    // The next batch is read (and decompressed) on its own thread while this one is tokenized. Errors keep the input's
    // order: this batch's are raised first, then a read error of the next.
    size_t next_count = 0;
    std::exception_ptr read_error;
    std::thread prefetch([&] {
      try {
        next_count = read_batch(next_batch);
      } catch (...) {
        read_error = std::current_exception();
      }
    });
    // Tokenize the batch in parallel; each document lands at its record's place.
#pragma omp parallel for schedule(dynamic, 4) num_threads(summary.threads)
    for (size_t index = 0; index < count; ++index) {
      errors[index] = nullptr;
      try {
        const Record& record = batch[index];
        documents[index] = record.file->format == RecordFormat::text_file
                               ? preparer.from_text(record.text, record.location())
                               : preparer.from_json(record.text, record.location());
      } catch (...) {
        errors[index] = std::current_exception();
      }
    }
    prefetch.join();
    for (size_t index = 0; index < count; ++index) {
      if (errors[index]) {
        progress.finish();
        std::rethrow_exception(errors[index]);
      }
      if (!shard) open_shard();
      const data::Document& document = documents[index];
      shard->writer.add_document(document);
      ShardSummary& shard_summary = shard->summary;
      shard_summary.size_cumsum.push_back(shard_summary.size_cumsum.back() + document.size());
      push_count(shard_summary.loss_masking_cumsum, document.loss_masking_spans.size());
      push_count(shard_summary.chosen_cumsum, document.chosen_spans.size());
      push_count(shard_summary.rejected_cumsum, document.rejected_spans.size());
      ++summary.documents;
      summary.tokens += document.size();
      if (shard_summary.num_documents() == shard->target_documents) {
        shard->writer.finish();
        shards.push_back(std::move(shard_summary));
        shard.reset();
      }
    }
    progress.update(summary.documents, summary.tokens);
    if (read_error) {
      progress.finish();
      std::rethrow_exception(read_error);
    }
    std::swap(batch, next_batch);
    count = next_count;
  }
  progress.finish();
  // The counting pass and this one read the same files; a file changed in between is caught here.
  FLM_CHECK(summary.documents == total && !shard, kComponent,
            "the input files changed while being prepared ({} records counted, {} read)", total, summary.documents);
  summary.empty_files = reader.empty_files();

  // The dataset configs, as Fast-LLM writes them.
  const FileWriter::Options write_options{.component = kComponent, .sync = true};
  if (config.splits.entries.empty()) {
    const fs::path path = output / "fast_llm_config.yaml";
    write_file(path, dataset_config_yaml(describe_shards(shards)), write_options);
    summary.config_files.push_back(path);
  } else {
    for (const auto& [name, description] : split_shards(shards, config.splits.entries, summary.empty_splits)) {
      const fs::path path = output / fmt::format("fast_llm_config_{}.yaml", name);
      write_file(path, dataset_config_yaml(description), write_options);
      summary.config_files.push_back(path);
    }
  }
  // Fast-LLM keeps the dataset's Croissant metadata beside the shards when the input folder has one.
  if (config.dataset.path.entries.size() == 1) {
    const fs::path croissant = fs::path(config.dataset.path.entries.front()) / "croissant.json";
    if (std::error_code croissant_error; fs::is_regular_file(croissant, croissant_error)) {
      std::ifstream in(croissant, std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      FLM_CHECK(!in.bad(), kComponent, "{}: cannot read", croissant.string());
      write_file(output / "croissant.json", text, write_options);
    }
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  log_main("Prepared {} documents, {} tokens from {} file{} into {} shard{} in {:.1f} s ({} tokens/s)",
           summary.documents, summary.tokens, summary.files, summary.files == 1 ? "" : "s", summary.shards,
           summary.shards == 1 ? "" : "s", summary.seconds,
           human_count(summary.seconds > 0 ? double(summary.tokens) / summary.seconds : 0.0));
  if (!summary.empty_files.empty()) {
    std::vector<std::string> names;
    for (const auto& path : summary.empty_files) names.push_back(path.string());
    log_warning("skipped {} file{} without any record: {}", names.size(), names.size() == 1 ? "" : "s",
                fmt::join(names, ", "));
  }
  for (const std::string& name : summary.empty_splits)
    log_error("split `{}` got no document (its ratio is too small for {} documents): no config written for it", name,
              summary.documents);
  for (const auto& path : summary.config_files) log_main("config: {}", path.string());
  return summary;
}

PreparationSummary prepare_gpt_memmap(const GPTMemmapPreparatorConfig& config) {
  FLM_CHECK(config.tokenizer.path.has_value(), kComponent, "tokenizer.path is required");
  log_main("Loading the tokenizer {} ...", config.tokenizer.path->string());
  const std::unique_ptr<tokenizer::Tokenizer> tokenizer = tokenizer::Tokenizer::load(*config.tokenizer.path);
  return prepare_gpt_memmap(config, *tokenizer);
}

}  // namespace fast_llm::preparation
