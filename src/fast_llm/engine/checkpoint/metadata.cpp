#include "fast_llm/engine/checkpoint/metadata.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "fast_llm/config/config.h"
#include "fast_llm/core/error.h"

namespace fast_llm::engine {

namespace {

constexpr std::string_view kComponent = "checkpoint";

[[noreturn]] void fail(const std::filesystem::path& file, std::string_view key, std::string_view message) {
  throw Error(kComponent, fmt::format("{}: `{}` {}", file.string(), key, message));
}

YAML::Node require(const YAML::Node& node, const std::string& key, const std::filesystem::path& file,
                   std::string_view prefix = "") {
  const std::string full = prefix.empty() ? key : fmt::format("{}.{}", prefix, key);
  if (!node.IsMap()) fail(file, prefix, "must be a mapping");
  YAML::Node value = node[key];
  if (!value || value.IsNull()) fail(file, full, "is missing");
  return value;
}

template <class T>
T scalar(const YAML::Node& node, const std::string& key, const std::filesystem::path& file,
         std::string_view prefix = "") {
  const std::string full = prefix.empty() ? key : fmt::format("{}.{}", prefix, key);
  YAML::Node value = require(node, key, file, prefix);
  if (!value.IsScalar()) fail(file, full, "must be a single value");
  try {
    return value.as<T>();
  } catch (const YAML::Exception&) {
    fail(file, full, fmt::format("has an invalid value '{}'", value.Scalar()));
  }
}

void sync_path(const std::filesystem::path& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw Error(kComponent, fmt::format("{}: cannot open to sync: {}", path.string(), std::strerror(errno)));
  int result = ::fsync(fd);
  int error = errno;
  ::close(fd);
  if (result != 0) throw Error(kComponent, fmt::format("{}: cannot sync: {}", path.string(), std::strerror(error)));
}

void sync_tree(const std::filesystem::path& directory) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory))
    sync_path(entry.path(), entry.is_directory());
  sync_path(directory, true);
}

}  // namespace

void write_checkpoint_metadata(const std::filesystem::path& directory, const CheckpointMetadata& metadata) {
  YAML::Node node(YAML::NodeType::Map);
  node["fast_llm_version"] = metadata.fast_llm_version;
  node["format"] = std::string(config::enum_name(metadata.format));
  node["model"] = metadata.model;
  node["config"] = metadata.config ? metadata.config : YAML::Node(YAML::NodeType::Map);
  YAML::Node shards(YAML::NodeType::Sequence);
  for (const auto& shard : metadata.shards) shards.push_back(shard);
  node["shards"] = shards;
  if (metadata.state) {
    const TrainingState& state = *metadata.state;
    YAML::Node state_node(YAML::NodeType::Map);
    state_node["completed_steps"] = state.completed_steps;
    state_node["consumed_samples"] = metadata.consumed_samples;
    state_node["optimizer"]["step"] = state.optimizer.step;
    state_node["optimizer"]["grad_scaler"]["scale"] = config::detail::write_double(state.optimizer.grad_scaler.scale);
    state_node["optimizer"]["grad_scaler"]["growth_tracker"] = state.optimizer.grad_scaler.growth_tracker;
    state_node["optimizer"]["grad_scaler"]["hysteresis_tracker"] = state.optimizer.grad_scaler.hysteresis_tracker;
    node["state"] = state_node;
  }
  if (metadata.layout) node["layout"] = metadata.layout;
  if (!metadata.trainer_config.empty()) node["trainer_config"] = YAML::Load(metadata.trainer_config);
  YAML::Emitter emitter;
  emitter << node;
  const std::filesystem::path path = directory / kMetadataFile;
  std::ofstream stream(path);
  stream << emitter.c_str() << '\n';
  stream.close();
  FLM_CHECK(stream.good(), kComponent, "{}: cannot write", path.string());
}

CheckpointMetadata read_checkpoint_metadata(const std::filesystem::path& directory,
                                            std::optional<CheckpointFormat> expected) {
  const std::filesystem::path file = directory / kMetadataFile;
  if (!std::filesystem::exists(file))
    throw Error(kComponent, fmt::format("{}: no {} (not a fast_llm or distributed checkpoint?)", directory.string(),
                                        kMetadataFile));
  YAML::Node node = config::load_yaml_file(file);  // a mapping, or an error naming the file and line
  CheckpointMetadata metadata;
  const std::string format = scalar<std::string>(node, "format", file);
  auto parsed = config::parse_enum<CheckpointFormat>(format);
  if (!parsed || (*parsed != CheckpointFormat::distributed && *parsed != CheckpointFormat::fast_llm))
    fail(file, "format", fmt::format("is '{}', not distributed or fast_llm", format));
  metadata.format = *parsed;
  if (expected && *expected != metadata.format)
    fail(file, "format", fmt::format("is {}, but the checkpoint was given as {}", format,
                                     config::enum_name(*expected)));
  metadata.fast_llm_version = scalar<std::string>(node, "fast_llm_version", file);
  metadata.model = scalar<std::string>(node, "model", file);
  if (metadata.model != "gpt") fail(file, "model", fmt::format("is '{}'; only gpt models are supported", metadata.model));
  metadata.config = require(node, "config", file);
  if (!metadata.config.IsMap()) fail(file, "config", "must be a mapping");
  YAML::Node shards = require(node, "shards", file);
  if (!shards.IsSequence()) fail(file, "shards", "must be a list");
  for (const auto& shard : shards) {
    std::string name = shard.IsScalar() ? shard.Scalar() : "";
    if (name != kWeightsShard && name != kExpAvgShard && name != kExpAvgSqShard)
      fail(file, "shards", fmt::format("has an unknown shard '{}'", name));
    metadata.shards.push_back(name);
  }
  if (metadata.shards.empty() || metadata.shards.front() != kWeightsShard)
    fail(file, "shards", "must start with weights");
  if (YAML::Node state = node["state"]; state && !state.IsNull()) {
    TrainingState result;
    result.completed_steps = scalar<int64_t>(state, "completed_steps", file, "state");
    metadata.consumed_samples = scalar<int64_t>(state, "consumed_samples", file, "state");
    YAML::Node optimizer = require(state, "optimizer", file, "state");
    result.optimizer.step = scalar<int64_t>(optimizer, "step", file, "state.optimizer");
    YAML::Node scaler = require(optimizer, "grad_scaler", file, "state.optimizer");
    result.optimizer.grad_scaler.scale = scalar<double>(scaler, "scale", file, "state.optimizer.grad_scaler");
    result.optimizer.grad_scaler.growth_tracker =
        scalar<int64_t>(scaler, "growth_tracker", file, "state.optimizer.grad_scaler");
    result.optimizer.grad_scaler.hysteresis_tracker =
        scalar<int64_t>(scaler, "hysteresis_tracker", file, "state.optimizer.grad_scaler");
    if (result.completed_steps < 0 || result.optimizer.step < 0 || metadata.consumed_samples < 0)
      fail(file, "state", "has negative counts");
    metadata.state = result;
  }
  metadata.layout = node["layout"];
  if (YAML::Node trainer = node["trainer_config"]; trainer && !trainer.IsNull()) {
    YAML::Emitter emitter;
    emitter << trainer;
    metadata.trainer_config = emitter.c_str();
  }
  return metadata;
}

bool checkpoint_complete(const std::filesystem::path& directory) {
  return std::filesystem::is_regular_file(directory / kCompleteMarker);
}

void write_checkpoint_directory(const std::filesystem::path& directory,
                                const std::function<void(const std::filesystem::path&)>& write, bool sync) {
  const std::filesystem::path parent = directory.parent_path().empty() ? "." : directory.parent_path();
  std::filesystem::create_directories(parent);
  const std::filesystem::path temporary =
      parent / fmt::format(".{}.tmp-{}", directory.filename().string(), ::getpid());
  std::filesystem::remove_all(temporary);
  std::filesystem::create_directory(temporary);
  write(temporary);
  if (sync) sync_tree(temporary);
  std::filesystem::remove_all(directory);
  std::filesystem::rename(temporary, directory);
  if (sync) sync_path(parent, true);
  const std::filesystem::path marker = directory / kCompleteMarker;
  std::ofstream(marker).close();
  FLM_CHECK(std::filesystem::is_regular_file(marker), kComponent, "{}: cannot write", marker.string());
  if (sync) {
    sync_path(marker, false);
    sync_path(directory, true);
  }
}

}  // namespace fast_llm::engine
