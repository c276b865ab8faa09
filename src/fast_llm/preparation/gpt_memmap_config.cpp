#include "fast_llm/preparation/gpt_memmap_config.h"

#include <fmt/format.h>

#include <cstdlib>

#include "fast_llm/config/checks.h"
#include "fast_llm/data/token_data_type.h"

namespace fast_llm::config {

void Codec<preparation::PathList>::read(preparation::PathList& value, const YAML::Node& node,
                                        const std::string& path) {
  if (!node || node.IsNull()) {
    value.entries.clear();
    return;
  }
  if (node.IsScalar()) {
    value.entries = {node.Scalar()};
    return;
  }
  if (!node.IsSequence()) throw ConfigError(path, "expected a path or a list of paths");
  std::vector<std::string> entries;
  for (size_t index = 0; index < node.size(); ++index)
    entries.push_back(detail::require_scalar(node[index], path + "[" + std::to_string(index) + "]", "a path"));
  value.entries = std::move(entries);
}

YAML::Node Codec<preparation::PathList>::write(const preparation::PathList& value, const WriteOptions&) {
  if (value.entries.empty()) return YAML::Node(YAML::NodeType::Null);
  if (value.entries.size() == 1) return YAML::Node(value.entries.front());
  YAML::Node node(YAML::NodeType::Sequence);
  for (const auto& entry : value.entries) node.push_back(entry);
  return node;
}

void Codec<preparation::SplitRatios>::read(preparation::SplitRatios& value, const YAML::Node& node,
                                           const std::string& path) {
  if (!node || node.IsNull()) {
    value.entries.clear();
    return;
  }
  if (!node.IsMap()) throw ConfigError(path, "expected a mapping of split names to ratios, e.g. {training: 0.99, "
                                             "validation: 0.01}");
  std::vector<std::pair<std::string, double>> entries;
  for (const auto& entry : node) {
    const std::string name = detail::require_scalar(entry.first, path, "a split name");
    entries.emplace_back(name, detail::parse_double(entry.second, path + "." + name));
  }
  value.entries = std::move(entries);
}

YAML::Node Codec<preparation::SplitRatios>::write(const preparation::SplitRatios& value, const WriteOptions&) {
  if (value.entries.empty()) return YAML::Node(YAML::NodeType::Null);
  YAML::Node node(YAML::NodeType::Map);
  for (const auto& [name, ratio] : value.entries) node[name] = detail::write_double(ratio);
  return node;
}

}  // namespace fast_llm::config

namespace fast_llm::preparation {

using config::Hint;

void SourceSchemaConfig::visit(config::Visitor& v) {
  v(type, "type", "Schema of the records: `document` (text and optional spans) or `conversation` (chat messages).",
    Hint::core);
  v(text, "text", "Field containing the document text.", Hint::optional, config::check::non_empty());
  v(loss_masking_spans, "loss_masking_spans",
    "Field containing character spans [begin, last] (inclusive) to mask from the loss.", Hint::optional);
  v(chosen_span, "chosen_span", "Field containing chosen text for preference optimization.", Hint::optional);
  v(rejected_span, "rejected_span", "Field containing rejected text for preference optimization.", Hint::optional);
  v(images, "images", "Field containing images.", Hint::optional);
  v(image_positions, "image_positions", "Field containing image positions in the text.", Hint::optional);
  v(advantages, "advantages",
    "Field containing the document's advantage (a number) for policy optimization; every token gets it, with old "
    "log-probabilities 0 (Fast-LLM's debugging data: real rollouts bring theirs at run time).",
    Hint::optional);
  v(messages, "messages", "Field containing the conversation messages list (`type: conversation`).", Hint::core);
  v(train_on_eos, "train_on_eos", "Include the final EOS token of a conversation in the loss.", Hint::optional);
}

void SourceSchemaConfig::check() const {
  if (type == "conversation")
    throw NotSupportedError(field_path("type"), "conversation sources need the tokenizer's Jinja chat template, "
                                                "which fast-llm does not render; prepare the text with its spans "
                                                "(`type: document` with `loss_masking_spans`)");
  if (type != "document")
    fail("type", fmt::format("unknown source schema `{}`: expected `document` or `conversation`", type));
  if (chosen_span.has_value() != rejected_span.has_value())
    fail(chosen_span ? "rejected_span" : "chosen_span", "chosen_span and rejected_span are set together");
  if (chosen_span && loss_masking_spans)
    fail("loss_masking_spans", "cannot enable both loss masking and preference spans");
  if (images || image_positions)
    throw NotSupportedError(field_path("images"), "image datasets are not built in fast-llm (no vision encoder)");
  if (advantages && chosen_span) fail("advantages", "cannot enable both advantages and preference spans");
}

void DatasetSourceConfig::visit(config::Visitor& v) {
  v(path, "path",
    "Input: a file, a folder (its JSON Lines and text files, recursively), a wildcard pattern, or a list of them.",
    Hint::core);
  v(config_name, "config_name", "Hugging Face dataset configuration name (hub datasets only: refused).",
    Hint::optional);
  v(data_directory, "data_directory", "data_dir of Hugging Face's load_dataset (hub datasets only: refused).",
    Hint::optional);
  v(data_files, "data_files", "Files (or wildcard patterns) to read, relative to `path` when it is a folder.",
    Hint::optional);
  v(split, "split", "Split of the dataset to use; local files form the single split `train`.", Hint::optional);
  v(source_schema, "source_schema", "Configuration for the data source.", Hint::optional);
  v(data_type, "data_type",
    "Integer type of the stored tokens; if not provided, the smallest unsigned type holding the vocabulary.",
    Hint::optional);
  v(trust_remote_code, "trust_remote_code",
    "Allow the dataset's own Python code (no effect: fast-llm reads data files and runs no dataset code).",
    Hint::optional);
  v(disable_disk_space_check, "disable_disk_space_check",
    "Disable Hugging Face's disk space check (no effect: a full disk is an error naming the file).", Hint::optional);
  v(load_from_disk, "load_from_disk", "Read a dataset saved with `save_to_disk` (Arrow files: refused).",
    Hint::feature);
}

void DatasetSourceConfig::check() const {
  if (path.entries.empty()) fail("path", "required: the input file, folder, wildcard pattern or list of them");
  if (config_name)
    throw NotSupportedError(field_path("config_name"),
                            "dataset configurations belong to Hugging Face hub datasets; give local files in `path`");
  if (data_directory)
    throw NotSupportedError(field_path("data_directory"),
                            "give the folder in `path` (or files relative to it in `data_files`)");
  if (load_from_disk)
    throw NotSupportedError(field_path("load_from_disk"),
                            "datasets saved with `save_to_disk` are Arrow files, which fast-llm does not read; "
                            "export them as JSON Lines (`dataset.to_json(...)`)");
  if (split != "train")
    fail("split", fmt::format("`{}`: local files form a single split, `train` (slicing such as `train[:10%]` is "
                              "the hub loader's); give the files of the split you want in `path`",
                              split));
  if (data_type) {
    const auto parsed = data::parse_token_data_type(*data_type);
    if (!parsed)
      fail("data_type", fmt::format("`{}` is not an integer token type (uint8, int8, uint16, int16, uint32, int32, "
                                    "int64, uint64)",
                                    *data_type));
  }
}

void PreparationDistributedConfig::visit(config::Visitor& v) {
  v(world_size, "world_size", "Number of processes sharing the preparation (torchrun's WORLD_SIZE).", Hint::expert);
  v(rank, "rank", "Rank of this process (torchrun's RANK).", Hint::expert);
  v(backend, "backend", "Distributed backend to use.", Hint::optional);
  v(timeout, "timeout", "Timeout in seconds for distributed operations.", Hint::optional, config::check::gt(0));
}

void PreparationDistributedConfig::check() const {
  // Fast-LLM reads WORLD_SIZE when the field is unset; a launcher that sets it expects ranks to share the work.
  int size = world_size.value_or(1);
  if (!world_size) {
    if (const char* environment = std::getenv("WORLD_SIZE")) size = std::atoi(environment);
  }
  if (size != 1)
    throw NotSupportedError(field_path("world_size"),
                            fmt::format("{} processes: prepare runs as one process using every core (num_workers "
                                        "threads); start it once, without a launcher",
                                        size));
  if (rank.value_or(0) != 0) fail("rank", "must be 0 for a single process");
}

void GPTMemmapPreparatorConfig::visit(config::Visitor& v) {
  v(output_path, "output_path", "Output directory for the processed dataset.", Hint::core);
  v(distributed, "distributed", "Configuration for distributed processing.", Hint::feature);
  v(documents_per_shard, "documents_per_shard", "Target number of documents per shard.", Hint::feature,
    config::check::gt<int64_t>(0));
  v(num_workers, "num_workers", "Number of parallel workers (threads); unset: every core.", Hint::optional,
    config::check::ge(1));
  v(dataset, "dataset", "Configuration for the dataset.", Hint::feature);
  v(tokenizer, "tokenizer", "Configuration for the tokenizer.", Hint::feature);
  v(add_bos, "add_bos", "Prepend the tokenizer's BOS token to each document.", Hint::optional);
  v(add_eos, "add_eos", "Append the tokenizer's EOS token to each document.", Hint::optional);
  v(splits, "splits",
    "Split the output dataset into several (e.g. training/validation) with these ratios, in document order.",
    Hint::optional);
}

void GPTMemmapPreparatorConfig::check() const {
  if (output_path.empty()) fail("output_path", "required: the folder to write the dataset to");
  if (!tokenizer.path) fail("tokenizer", "`tokenizer.path` is required (a tokenizer.json, a .model file or a folder)");
  for (const auto& [name, ratio] : splits.entries)
    if (!(ratio >= 0) || ratio > 1e300) fail("splits", fmt::format("{}: ratio {} is not a finite non-negative number",
                                                                    name, ratio));
  if (!splits.entries.empty()) {
    double total = 0;
    for (const auto& entry : splits.entries) total += entry.second;
    if (total <= 0) fail("splits", "the ratios sum to zero");
  }
}

void DatasetDiscoveryConfig::visit(config::Visitor& v) {
  v(directory, "directory", "Directory to search for datasets recursively.", Hint::core);
  v(output, "output", "Output path for the generated config YAML file.", Hint::core);
  v(ignore_paths, "ignore_paths",
    "Paths to ignore during dataset discovery (absolute or relative to directory).", Hint::optional);
}

void DatasetDiscoveryConfig::check() const {
  if (directory.empty()) fail("directory", "required: the folder to search for .fast_llm_dataset files");
  if (output.empty()) fail("output", "required: the YAML file to write");
}

}  // namespace fast_llm::preparation
