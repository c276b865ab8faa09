// The `fast_llm_config*.yaml` files that `prepare gpt_memmap` writes beside its shards, as Fast-LLM writes them:
// `{config: <dataset config>, metadata: <statistics>}` with keys sorted (PyYAML's safe_dump), where the dataset config
// is one `memmap` shard, or a `blended` of them weighted by token counts. With `splits`, one file per split
// (`fast_llm_config_<split>.yaml`): the splits cut the concatenated shards by token fraction, a shard falling across
// a boundary entering as a `slice` whose ends are the document boundaries nearest the cut (Fast-LLM's
// _split_and_blend_dataset_configs and get_split, reproduced so both give the same documents to each split).
// Pure functions of the shards' statistics, so they are tested without writing shards.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace fast_llm::preparation {

// What a written shard holds, enough to describe it and any document range of it.
struct ShardSummary {
  std::string path;                   // relative to the output folder, e.g. shard_0_0.fast_llm_dataset
  std::string data_type;              // token type name, e.g. uint16
  std::vector<int64_t> size_cumsum{0};  // tokens before each document, and the total
  // Spans before each document, and the total, per span section present.
  std::optional<std::vector<int64_t>> loss_masking_cumsum, chosen_cumsum, rejected_cumsum;
  bool token_data = false;  // advantages and old_log_probabilities sections (float32, one value per token)
  int64_t num_documents() const { return int64_t(size_cumsum.size()) - 1; }
  int64_t num_tokens() const { return size_cumsum.back(); }
};

// A dataset config with its metadata (Fast-LLM's reader get_metadata / blend_metadata).
struct DatasetDescription {
  nlohmann::json config;
  nlohmann::json metadata;
};

// Documents [begin, end) of a shard, as metadata.
nlohmann::json shard_metadata(const ShardSummary& shard, int64_t begin, int64_t end);

// All shards: the shard itself, or a `blended` of them weighted by tokens.
DatasetDescription describe_shards(const std::vector<ShardSummary>& shards);

// The splits in order; a split that gets no document is left out and its name added to `empty_splits`.
std::vector<std::pair<std::string, DatasetDescription>> split_shards(
    const std::vector<ShardSummary>& shards, const std::vector<std::pair<std::string, double>>& ratios,
    std::vector<std::string>& empty_splits);

// Fast-LLM's _get_nearest_split: the document boundary nearest to `value` tokens, among the cumulative sizes
// `cumsum` (size_cumsum without its leading 0); ties go to the lower boundary.
int64_t nearest_document_boundary(const std::vector<int64_t>& cumsum, double value);

// The YAML text of a `fast_llm_config*.yaml` file.
std::string dataset_config_yaml(const DatasetDescription& description);

// A JSON value as YAML (block style, keys in the JSON's order; floats in their shortest exact form).
std::string json_to_yaml(const nlohmann::json& value);
std::string json_to_yaml(const nlohmann::ordered_json& value);

}  // namespace fast_llm::preparation
