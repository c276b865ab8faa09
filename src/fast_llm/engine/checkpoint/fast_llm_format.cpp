#include "fast_llm/engine/checkpoint/fast_llm_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "fast_llm/core/error.h"

namespace fast_llm::engine {

namespace {

constexpr std::string_view kComponent = "checkpoint";

// (parameter, shard) of "<parameter>/<shard>".
std::pair<std::string, std::string> split_key(const std::string& name) {
  const size_t slash = name.rfind('/');
  if (slash == std::string::npos) return {name, ""};
  return {name.substr(0, slash), name.substr(slash + 1)};
}

}  // namespace

void write_fast_llm_checkpoint(const std::filesystem::path& directory, const TensorSource& state,
                               CheckpointMetadata metadata, int64_t parameters_per_file, bool sync) {
  metadata.format = CheckpointFormat::fast_llm;
  std::vector<std::string> names;
  for (const std::string& name : state.names()) {
    const auto [parameter, shard] = split_key(name);
    if (std::find(metadata.shards.begin(), metadata.shards.end(), shard) != metadata.shards.end())
      names.push_back(name);
  }
  const std::map<std::string, std::string> file_of = write_safetensors_set(
      directory, state, names, parameters_per_file, SafetensorsSetLayout::numbered, {{"format", "fast_llm"}}, sync);
  std::set<std::string> files;
  for (const auto& [name, file] : file_of) files.insert(file);
  YAML::Node layout(YAML::NodeType::Map);
  YAML::Node list(YAML::NodeType::Sequence);
  for (const auto& file : files) list.push_back(file);
  layout["files"] = list;
  metadata.layout = layout;
  write_checkpoint_metadata(directory, metadata);
}

FastLLMCheckpoint open_fast_llm_checkpoint(const std::filesystem::path& directory) {
  FastLLMCheckpoint result{.metadata = read_checkpoint_metadata(directory, CheckpointFormat::fast_llm)};
  const std::filesystem::path metadata_file = directory / kMetadataFile;
  const YAML::Node& layout = result.metadata.layout;
  if (!layout || !layout.IsMap() || !layout["files"] || !layout["files"].IsSequence())
    throw Error(kComponent, fmt::format("{}: `layout.files` is missing", metadata_file.string()));
  std::vector<std::filesystem::path> files;
  for (const auto& file : layout["files"]) {
    const std::string name = file.IsScalar() ? file.Scalar() : "";
    if (name.empty() || name.find('/') != std::string::npos)
      throw Error(kComponent, fmt::format("{}: `layout.files` names '{}', not a file of the checkpoint",
                                          metadata_file.string(), name));
    files.push_back(directory / name);
  }
  result.state =
      std::make_shared<SafetensorsSet>(fmt::format("checkpoint {} (fast_llm)", directory.string()), files);
  const std::vector<std::string>& shards = result.metadata.shards;
  std::map<std::string, std::set<std::string>> shards_of;
  for (const std::string& name : result.state->names()) {
    const auto [parameter, shard] = split_key(name);
    if (std::find(shards.begin(), shards.end(), shard) == shards.end())
      throw Error(kComponent, fmt::format("{}: tensor '{}' is not `<parameter>/<shard>` with a shard of {}",
                                          result.state->file_of(name).path().string(), name,
                                          fmt::join(shards, ", ")));
    shards_of[parameter].insert(shard);
  }
  for (const auto& [parameter, present] : shards_of)
    if (!present.contains(std::string(kWeightsShard)))
      throw Error(kComponent, fmt::format("checkpoint {}: parameter {} has no weights", directory.string(), parameter));
  return result;
}

}  // namespace fast_llm::engine
