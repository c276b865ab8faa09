// The configuration of `fast-llm prepare gpt_memmap`: Fast-LLM 0.4's GPTMemmapDatasetPreparatorConfig, field for field
// (names, defaults, nesting), so a preparation config written for Fast-LLM reads here unchanged.
//
// What differs is what the fields can point at: there is no Hugging Face `datasets` library and no hub here, so
// `dataset.path` names local files (a file, a folder, a wildcard pattern, or a list of them) in JSON Lines (plain, .gz
// or .zst) or plain text. Fields whose only purpose is the hub or Python code are accepted where they leave the
// result unchanged (`trust_remote_code`, `disable_disk_space_check`) and refused with the reason otherwise
// (`config_name`, `data_directory`, `load_from_disk`, a split other than `train`, conversation and image sources,
// several ranks).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fast_llm/config/config.h"
#include "fast_llm/data/config.h"

namespace fast_llm::preparation {

// A path or a list of paths (Fast-LLM's `str | list[str]`): one string reads as a list of one.
struct PathList {
  std::vector<std::string> entries;
  bool operator==(const PathList&) const = default;
};

// `splits: {name: ratio, ...}` in the order written (the order decides which documents go to which split).
struct SplitRatios {
  std::vector<std::pair<std::string, double>> entries;
  bool operator==(const SplitRatios&) const = default;
};

}  // namespace fast_llm::preparation

namespace fast_llm::config {
template <>
struct Codec<preparation::PathList> {
  static constexpr bool holds_configs = false;
  static void read(preparation::PathList& value, const YAML::Node& node, const std::string& path);
  static YAML::Node write(const preparation::PathList& value, const WriteOptions& options);
  template <class Function>
  static void for_each_config(preparation::PathList&, const std::string&, const Function&) {}
};
template <>
struct Codec<preparation::SplitRatios> {
  static constexpr bool holds_configs = false;
  static void read(preparation::SplitRatios& value, const YAML::Node& node, const std::string& path);
  static YAML::Node write(const preparation::SplitRatios& value, const WriteOptions& options);
  template <class Function>
  static void for_each_config(preparation::SplitRatios&, const std::string&, const Function&) {}
};
}  // namespace fast_llm::config

namespace fast_llm::preparation {

// `dataset.source_schema`: which fields of each record hold what. `type: document` (the default) is built;
// `type: conversation` needs the tokenizer's Jinja chat template and is refused.
struct SourceSchemaConfig : config::Config {
  std::string type = "document";
  std::string text = "text";
  std::optional<std::string> loss_masking_spans;
  std::optional<std::string> chosen_span;
  std::optional<std::string> rejected_span;
  std::optional<std::string> images;
  std::optional<std::string> image_positions;
  std::optional<std::string> advantages;
  std::string messages = "messages";
  bool train_on_eos = false;
  void visit(config::Visitor& v) override;
  void check() const override;
  bool has_preference_spans() const { return chosen_span.has_value(); }
};

// `dataset`: Fast-LLM's GPTHuggingfaceDatasetConfig, read as local files.
struct DatasetSourceConfig : config::Config {
  PathList path;
  std::optional<std::string> config_name;
  std::optional<std::string> data_directory;
  PathList data_files;
  std::string split = "train";
  SourceSchemaConfig source_schema;
  std::optional<std::string> data_type;
  bool trust_remote_code = false;
  bool disable_disk_space_check = false;
  bool load_from_disk = false;
  void visit(config::Visitor& v) override;
  void check() const override;
};

// `distributed`: Fast-LLM shards the input over torchrun ranks; one process here (it uses every core itself).
struct PreparationDistributedConfig : config::Config {
  std::optional<int> world_size;
  std::optional<int> rank;
  std::string backend = "gloo";
  int timeout = 3600;
  void visit(config::Visitor& v) override;
  void check() const override;
};

struct GPTMemmapPreparatorConfig : config::Config {
  std::filesystem::path output_path;
  PreparationDistributedConfig distributed;
  int64_t documents_per_shard = 1000000;
  // Fast-LLM's default is 1 process; unset here means every core (threads), which gives the same files.
  std::optional<int> num_workers;
  DatasetSourceConfig dataset;
  data::TokenizerConfig tokenizer;
  bool add_bos = true;
  bool add_eos = true;
  SplitRatios splits;
  void visit(config::Visitor& v) override;
  void check() const override;
};

// `fast-llm prepare dataset_discovery`: Fast-LLM's DatasetDiscoveryConfig.
struct DatasetDiscoveryConfig : config::Config {
  std::filesystem::path directory;
  std::filesystem::path output;
  std::vector<std::filesystem::path> ignore_paths;
  void visit(config::Visitor& v) override;
  void check() const override;
};

}  // namespace fast_llm::preparation
