#include "fast_llm/preparation/dataset_configs.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>

namespace fast_llm::preparation {

namespace {

nlohmann::json range_metadata(const std::vector<int64_t>& cumsum, int64_t begin, int64_t end) {
  return {{"num_documents", end - begin}, {"num_ranges", cumsum[size_t(end)] - cumsum[size_t(begin)]}};
}

// Fast-LLM's blend_metadata: sums, with the data type shared by all.
nlohmann::json blend_metadata(const std::vector<nlohmann::json>& metadata) {
  nlohmann::json out = metadata.front();
  for (size_t index = 1; index < metadata.size(); ++index) {
    const nlohmann::json& other = metadata[index];
    out["num_tokens"] = out["num_tokens"].get<int64_t>() + other["num_tokens"].get<int64_t>();
    for (const char* key : {"num_tokens", "num_documents"})
      out["tokens"][key] = out["tokens"][key].get<int64_t>() + other["tokens"][key].get<int64_t>();
    for (const char* section : {"loss_masking_spans", "chosen_spans", "rejected_spans"}) {
      if (!out.contains(section)) continue;
      for (const char* key : {"num_documents", "num_ranges"})
        out[section][key] = out[section][key].get<int64_t>() + other[section][key].get<int64_t>();
    }
    for (const char* section : {"advantages", "old_log_probabilities"}) {
      if (!out.contains(section)) continue;
      for (const char* key : {"num_tokens", "num_documents"})
        out[section][key] = out[section][key].get<int64_t>() + other[section][key].get<int64_t>();
    }
  }
  return out;
}

nlohmann::json memmap_config(const ShardSummary& shard) { return {{"type", "memmap"}, {"path", shard.path}}; }

nlohmann::json blended_config(const std::vector<nlohmann::json>& datasets,
                              const std::vector<nlohmann::json>& metadata) {
  nlohmann::json weights = nlohmann::json::array();
  for (const auto& entry : metadata) weights.push_back(entry["num_tokens"]);
  return {{"type", "blended"}, {"datasets", datasets}, {"weights", weights}};
}

template <class Json>
void emit(YAML::Emitter& out, const Json& value) {
  switch (value.type()) {
    case Json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [key, item] : value.items()) {
        out << YAML::Key << key << YAML::Value;
        emit(out, item);
      }
      out << YAML::EndMap;
      break;
    case Json::value_t::array:
      out << YAML::BeginSeq;
      for (const auto& item : value) emit(out, item);
      out << YAML::EndSeq;
      break;
    case Json::value_t::string:
      out << value.template get<std::string>();
      break;
    case Json::value_t::boolean:
      out << value.template get<bool>();
      break;
    case Json::value_t::number_integer:
      out << value.template get<int64_t>();
      break;
    case Json::value_t::number_unsigned:
      out << value.template get<uint64_t>();
      break;
    case Json::value_t::number_float: {
      // Shortest text that reads back as the same double, always with a '.' or exponent so YAML reads a float.
      std::string text = fmt::format("{}", value.template get<double>());
      if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
      out << text;
      break;
    }
    default:
      out << YAML::Null;
  }
}

}  // namespace

nlohmann::json shard_metadata(const ShardSummary& shard, int64_t begin, int64_t end) {
  const int64_t tokens = shard.size_cumsum[size_t(end)] - shard.size_cumsum[size_t(begin)];
  nlohmann::json metadata = {
      {"num_tokens", tokens},
      {"tokens", {{"num_tokens", tokens}, {"num_documents", end - begin}, {"data_type", shard.data_type}}}};
  if (shard.loss_masking_cumsum)
    metadata["loss_masking_spans"] = range_metadata(*shard.loss_masking_cumsum, begin, end);
  if (shard.chosen_cumsum) metadata["chosen_spans"] = range_metadata(*shard.chosen_cumsum, begin, end);
  if (shard.rejected_cumsum) metadata["rejected_spans"] = range_metadata(*shard.rejected_cumsum, begin, end);
  if (shard.token_data)
    for (const char* section : {"advantages", "old_log_probabilities"})
      metadata[section] = {{"num_tokens", tokens},
                           {"num_documents", end - begin},
                           {"data_type", "float32"},
                           {"shape", nlohmann::json::array()}};
  return metadata;
}

DatasetDescription describe_shards(const std::vector<ShardSummary>& shards) {
  std::vector<nlohmann::json> configs, metadata;
  for (const ShardSummary& shard : shards) {
    configs.push_back(memmap_config(shard));
    metadata.push_back(shard_metadata(shard, 0, shard.num_documents()));
  }
  if (shards.size() == 1) return {configs.front(), metadata.front()};
  return {blended_config(configs, metadata), blend_metadata(metadata)};
}

int64_t nearest_document_boundary(const std::vector<int64_t>& cumsum, double value) {
  // searchsorted(side="right"): the number of entries <= value.
  const int64_t right =
      int64_t(std::upper_bound(cumsum.begin(), cumsum.end(), value,
                               [](double v, int64_t entry) { return v < double(entry); }) -
              cumsum.begin());
  if (right == int64_t(cumsum.size())) return right;
  const double left = right > 0 ? double(cumsum[size_t(right - 1)]) : 0.0;
  return (value - left) / (double(cumsum[size_t(right)]) - left) > 0.5 ? right + 1 : right;
}

std::vector<std::pair<std::string, DatasetDescription>> split_shards(
    const std::vector<ShardSummary>& shards, const std::vector<std::pair<std::string, double>>& ratios,
    std::vector<std::string>& empty_splits) {
  // Fast-LLM's arithmetic, in the same order: normalized ratios and shard token fractions, padded cumulative sums.
  double ratio_total = 0;
  for (const auto& entry : ratios) ratio_total += entry.second;
  std::vector<double> split_cumsum{0.0};
  for (const auto& entry : ratios) split_cumsum.push_back(split_cumsum.back() + entry.second / ratio_total);
  int64_t token_total = 0;
  for (const auto& shard : shards) token_total += shard.num_tokens();
  std::vector<double> probabilities, shard_cumsum{0.0};
  for (const auto& shard : shards) {
    probabilities.push_back(token_total > 0 ? double(shard.num_tokens()) / double(token_total) : 0.0);
    shard_cumsum.push_back(shard_cumsum.back() + probabilities.back());
  }

  std::vector<std::pair<std::string, DatasetDescription>> result;
  for (size_t split = 0; split < ratios.size(); ++split) {
    std::vector<nlohmann::json> configs, metadata;
    for (size_t index = 0; index < shards.size(); ++index) {
      const ShardSummary& shard = shards[index];
      if (probabilities[index] <= 0) continue;  // a shard without tokens belongs to no split
      const double begin = std::max((split_cumsum[split] - shard_cumsum[index]) / probabilities[index], 0.0);
      const double end = std::min((split_cumsum[split + 1] - shard_cumsum[index]) / probabilities[index], 1.0);
      if (begin == 0.0 && end == 1.0) {
        configs.push_back(memmap_config(shard));
        metadata.push_back(shard_metadata(shard, 0, shard.num_documents()));
      } else if (end > begin) {
        const std::vector<int64_t> cumsum(shard.size_cumsum.begin() + 1, shard.size_cumsum.end());
        const int64_t begin_index = nearest_document_boundary(cumsum, begin * double(shard.num_tokens()));
        const int64_t end_index = nearest_document_boundary(cumsum, end * double(shard.num_tokens()));
        if (end_index > begin_index) {
          const double documents = double(shard.num_documents());
          configs.push_back({{"type", "slice"},
                             {"dataset", memmap_config(shard)},
                             {"begin", double(begin_index) / documents},
                             {"end", double(end_index) / documents}});
          metadata.push_back(shard_metadata(shard, begin_index, end_index));
        }
      }
    }
    if (configs.empty())
      empty_splits.push_back(ratios[split].first);
    else if (configs.size() == 1)
      result.emplace_back(ratios[split].first, DatasetDescription{configs.front(), metadata.front()});
    else
      result.emplace_back(ratios[split].first,
                          DatasetDescription{blended_config(configs, metadata), blend_metadata(metadata)});
  }
  return result;
}

std::string json_to_yaml(const nlohmann::json& value) {
  YAML::Emitter out;
  emit(out, value);
  return std::string(out.c_str()) + "\n";
}

std::string json_to_yaml(const nlohmann::ordered_json& value) {
  YAML::Emitter out;
  emit(out, value);
  return std::string(out.c_str()) + "\n";
}

std::string dataset_config_yaml(const DatasetDescription& description) {
  return json_to_yaml(nlohmann::json{{"config", description.config}, {"metadata", description.metadata}});
}

}  // namespace fast_llm::preparation
