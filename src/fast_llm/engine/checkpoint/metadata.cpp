#include "fast_llm/engine/checkpoint/metadata.h"

#include <fmt/format.h>

#include "fast_llm/config/config.h"
#include "fast_llm/core/error.h"
#include "fast_llm/core/file_writer.h"
#include "fast_llm/engine/checkpoint/directory.h"

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

}  // namespace

void write_checkpoint_metadata(const std::filesystem::path& directory, const CheckpointMetadata& metadata) {
  FLM_ASSERT(!metadata.model.empty(), "checkpoint metadata without a model type");
  FLM_ASSERT(metadata.state || (metadata.format != CheckpointFormat::distributed && metadata.shards.size() == 1),
             "checkpoint metadata with optimizer state but no training state");
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
  write_file(directory / kMetadataFile, fmt::format("{}\n", emitter.c_str()), {.component = kComponent});
}

CheckpointMetadata read_checkpoint_metadata(const std::filesystem::path& directory,
                                            std::optional<CheckpointFormat> expected) {
  const std::filesystem::path file = directory / kMetadataFile;
  const std::filesystem::file_type type = file_type_of(file, kComponent);
  if (type == std::filesystem::file_type::not_found)
    throw Error(kComponent, fmt::format("{}: no {} (not a fast_llm or distributed checkpoint?)", directory.string(),
                                        kMetadataFile));
  if (type != std::filesystem::file_type::regular)
    throw Error(kComponent, fmt::format("{}: not a file", file.string()));
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
  } else if (metadata.format == CheckpointFormat::distributed || metadata.shards.size() > 1) {
    fail(file, "state", fmt::format("is missing: a {} records the training state it was saved at",
                                    metadata.format == CheckpointFormat::distributed
                                        ? "distributed checkpoint"
                                        : "checkpoint holding the optimizer state"));
  }
  metadata.layout = node["layout"];
  if (YAML::Node trainer = node["trainer_config"]; trainer && !trainer.IsNull()) {
    YAML::Emitter emitter;
    emitter << trainer;
    metadata.trainer_config = emitter.c_str();
  }
  return metadata;
}

void check_checkpoint_model(const std::filesystem::path& directory, const CheckpointMetadata& metadata,
                            std::string_view model) {
  if (metadata.model != model)
    fail(directory / kMetadataFile, "model",
         fmt::format("is '{}'; only {} models are supported", metadata.model, model));
}

bool checkpoint_complete(const std::filesystem::path& directory) {
  return file_type_of(directory / kCompleteMarker, kComponent) == std::filesystem::file_type::regular;
}

}  // namespace fast_llm::engine
