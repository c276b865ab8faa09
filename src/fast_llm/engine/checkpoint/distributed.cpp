#include "fast_llm/engine/checkpoint/distributed.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "fast_llm/config/config.h"
#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/engine/checkpoint/directory.h"

namespace fast_llm::engine {

namespace {

constexpr std::string_view kComponent = "checkpoint";

std::string rank_file(int rank) { return fmt::format("rank_{}.safetensors", rank); }
// The file of a (pipeline rank p, data rank d, tensor rank t): rank_<(p * data_parallel + d) * tensor_parallel + t>,
// so a checkpoint without tensor or pipeline parallelism names its files by data rank as before.
int file_index(int pipeline_rank, int data_rank, int tensor_rank, int data_parallel, int tensor_parallel) {
  return (pipeline_rank * data_parallel + data_rank) * tensor_parallel + tensor_rank;
}
std::string stage_key(size_t stage, std::string_view shard) { return fmt::format("stage_{}/{}", stage, shard); }

// A parameter as the layout records it.
struct RecordedParameter {
  std::string name;
  int64_t offset = 0;
  Shape shape;  // a tensor rank's
  bool frozen = false;
  // Tensor parallelism: the split dimension and its blocks (layers::TensorSplit), dim -1 when whole on every rank.
  int split_dim = -1;
  int split_blocks = 1;
};
struct RecordedStage {
  int64_t trainable_size = 0, frozen_size = 0;
  std::vector<RecordedParameter> parameters;
};
struct RecordedLayout {
  int data_parallel = 1;
  // Stage s's shards are in the files of pipeline rank s % pipeline_parallel (file_index).
  int pipeline_parallel = 1;
  int tensor_parallel = 1;
  DType optimization_dtype = DType::float32;
  std::vector<std::string> files;
  std::vector<RecordedStage> stages;
};

YAML::Node layout_of(const MultiStage& multi_stage) {
  YAML::Node layout(YAML::NodeType::Map);
  const StageSettings& settings = multi_stage.settings();
  layout["data_parallel"] = settings.data_parallel;
  layout["pipeline_parallel"] = settings.pipeline_parallel;
  // Written only with tensor parallelism, so that other checkpoints keep their metadata.
  if (settings.tensor_parallel > 1) layout["tensor_parallel"] = settings.tensor_parallel;
  layout["optimization_dtype"] = std::string(dtype_name(settings.optimization_dtype));
  YAML::Node files(YAML::NodeType::Sequence);
  for (int rank = 0; rank < settings.pipeline_parallel * settings.data_parallel * settings.tensor_parallel; ++rank)
    files.push_back(rank_file(rank));
  layout["files"] = files;
  YAML::Node stages(YAML::NodeType::Sequence);
  for (const auto& stage : multi_stage.stages()) {
    YAML::Node node(YAML::NodeType::Map);
    node["trainable_size"] = stage->trainable_size();
    node["frozen_size"] = stage->frozen_size();
    YAML::Node parameters(YAML::NodeType::Sequence);
    for (const ParameterSlot& slot : stage->parameters()) {
      YAML::Node parameter(YAML::NodeType::Map);
      parameter["name"] = slot.parameter->meta.name;
      parameter["offset"] = slot.offset;
      YAML::Node shape(YAML::NodeType::Sequence);
      for (int64_t dim : slot.parameter->meta.shape) shape.push_back(dim);
      shape.SetStyle(YAML::EmitterStyle::Flow);
      parameter["shape"] = shape;
      parameter["frozen"] = slot.parameter->meta.frozen;
      if (const layers::TensorSplit& split = slot.parameter->meta.tensor; split.split()) {
        YAML::Node tensor_split(YAML::NodeType::Sequence);
        tensor_split.push_back(split.dim);
        tensor_split.push_back(split.blocks);
        parameter["tensor_split"] = tensor_split;
      }
      parameter.SetStyle(YAML::EmitterStyle::Flow);
      parameters.push_back(parameter);
    }
    node["parameters"] = parameters;
    stages.push_back(node);
  }
  layout["stages"] = stages;
  return layout;
}

// The element count of `shape`, or nothing when a dimension is negative or the count overflows.
std::optional<int64_t> checked_numel(const Shape& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || (dim > 0 && count > std::numeric_limits<int64_t>::max() / dim)) return std::nullopt;
    count *= dim;
  }
  return count;
}

// Reads the layout and checks what loading relies on: each parameter lies inside its stage's region (trainable ones
// in [0, trainable_size), frozen ones in [trainable_size, trainable_size + frozen_size)), no two parameters of a stage
// overlap, and names are unique. A layout failing these would load the wrong values into some parameter.
RecordedLayout read_layout(const std::filesystem::path& directory, const CheckpointMetadata& metadata) {
  const std::filesystem::path file = directory / kMetadataFile;
  auto fail = [&](std::string_view message) -> void {
    throw Error(kComponent, fmt::format("{}: `layout` {}", file.string(), message));
  };
  RecordedLayout layout;
  const YAML::Node& node = metadata.layout;
  if (!node || !node.IsMap()) fail("is missing or not a mapping");
  try {
    layout.data_parallel = node["data_parallel"].as<int>();
    // Checkpoints written before pipeline parallelism have no pipeline_parallel: one pipeline rank.
    if (node["pipeline_parallel"]) layout.pipeline_parallel = node["pipeline_parallel"].as<int>();
    if (node["tensor_parallel"]) layout.tensor_parallel = node["tensor_parallel"].as<int>();
    auto dtype = parse_dtype(node["optimization_dtype"].as<std::string>());
    if (!dtype || !is_floating(*dtype)) fail("has an invalid optimization_dtype");
    layout.optimization_dtype = *dtype;
    for (const auto& name : node["files"]) layout.files.push_back(name.as<std::string>());
    std::set<std::string> names;
    for (const auto& stage : node["stages"]) {
      const size_t index = layout.stages.size();
      RecordedStage recorded{.trainable_size = stage["trainable_size"].as<int64_t>(),
                             .frozen_size = stage["frozen_size"].as<int64_t>()};
      if (recorded.trainable_size < 0 || recorded.frozen_size < 0 ||
          recorded.frozen_size > std::numeric_limits<int64_t>::max() - recorded.trainable_size)
        fail(fmt::format("gives stage {} invalid sizes ({} trainable, {} frozen)", index, recorded.trainable_size,
                         recorded.frozen_size));
      // (begin, end, name) of each parameter in the stage.
      std::vector<std::tuple<int64_t, int64_t, std::string>> ranges;
      for (const auto& parameter : stage["parameters"]) {
        RecordedParameter entry{.name = parameter["name"].as<std::string>(),
                                .offset = parameter["offset"].as<int64_t>(),
                                .frozen = parameter["frozen"].as<bool>()};
        if (entry.name.empty() || !names.insert(entry.name).second)
          fail(fmt::format("names parameter '{}' twice or not at all", entry.name));
        std::vector<int64_t> dims;
        for (const auto& dim : parameter["shape"]) dims.push_back(dim.as<int64_t>());
        if (dims.size() > size_t(kMaxTensorRank))
          fail(fmt::format("gives parameter {} a shape of rank {}", entry.name, dims.size()));
        entry.shape = Shape(std::span<const int64_t>(dims));
        if (const YAML::Node split = parameter["tensor_split"]) {
          entry.split_dim = split[0].as<int>();
          entry.split_blocks = split[1].as<int>();
          if (entry.split_dim < 0 || entry.split_dim >= entry.shape.rank() || entry.split_blocks < 1 ||
              entry.shape[entry.split_dim] % entry.split_blocks != 0)
            fail(fmt::format("gives parameter {} of shape {} an invalid tensor split ({}, {})", entry.name,
                             entry.shape.str(), entry.split_dim, entry.split_blocks));
        }
        const std::optional<int64_t> numel = checked_numel(entry.shape);
        if (!numel) fail(fmt::format("gives parameter {} an invalid shape {}", entry.name, entry.shape.str()));
        const int64_t region_begin = entry.frozen ? recorded.trainable_size : 0;
        const int64_t region_end = recorded.trainable_size + (entry.frozen ? recorded.frozen_size : 0);
        if (entry.offset < region_begin || entry.offset > region_end || *numel > region_end - entry.offset)
          fail(fmt::format("places parameter {} ({} elements at offset {}) outside stage {}'s {} region [{}, {})",
                           entry.name, *numel, entry.offset, index, entry.frozen ? "frozen" : "trainable",
                           region_begin, region_end));
        if (*numel > 0) ranges.emplace_back(entry.offset, entry.offset + *numel, entry.name);
        recorded.parameters.push_back(std::move(entry));
      }
      std::sort(ranges.begin(), ranges.end());
      for (size_t next = 1; next < ranges.size(); ++next) {
        const auto& [begin, end, name] = ranges[next - 1];
        const auto& [next_begin, next_end, next_name] = ranges[next];
        if (next_begin < end)
          fail(fmt::format("overlaps parameters {} [{}, {}) and {} [{}, {}) in stage {}", name, begin, end,
                           next_name, next_begin, next_end, index));
      }
      layout.stages.push_back(std::move(recorded));
    }
  } catch (const YAML::Exception& error) {
    fail(fmt::format("is malformed: {}", error.msg));
  }
  if (layout.data_parallel < 1 || layout.pipeline_parallel < 1 || layout.tensor_parallel < 1 ||
      int64_t(layout.files.size()) != int64_t(layout.pipeline_parallel) * layout.data_parallel * layout.tensor_parallel)
    fail("lists a number of files that does not match its pipeline_parallel x data_parallel x tensor_parallel");
  if (layout.stages.size() < size_t(layout.pipeline_parallel))
    fail(fmt::format("has {} stages for {} pipeline ranks", layout.stages.size(), layout.pipeline_parallel));
  for (const auto& name : layout.files)
    if (name.find('/') != std::string::npos) fail(fmt::format("names file '{}' outside the checkpoint", name));
  return layout;
}

bool same_layout(const RecordedLayout& recorded, const MultiStage& multi_stage) {
  const StageSettings& settings = multi_stage.settings();
  if (recorded.data_parallel != settings.data_parallel || recorded.pipeline_parallel != settings.pipeline_parallel ||
      recorded.tensor_parallel != settings.tensor_parallel ||
      recorded.optimization_dtype != settings.optimization_dtype ||
      recorded.stages.size() != multi_stage.stages().size())
    return false;
  for (size_t index = 0; index < recorded.stages.size(); ++index) {
    const RecordedStage& stage = recorded.stages[index];
    const Stage& current = *multi_stage.stages()[index];
    if (stage.trainable_size != current.trainable_size() || stage.frozen_size != current.frozen_size() ||
        stage.parameters.size() != current.parameters().size())
      return false;
    for (size_t slot = 0; slot < stage.parameters.size(); ++slot) {
      const RecordedParameter& parameter = stage.parameters[slot];
      const ParameterSlot& actual = current.parameters()[slot];
      const layers::TensorSplit& split = actual.parameter->meta.tensor;
      if (parameter.name != actual.parameter->meta.name || parameter.offset != actual.offset ||
          !(parameter.shape == actual.parameter->meta.shape) || parameter.frozen != actual.parameter->meta.frozen ||
          parameter.split_dim != (split.split() ? split.dim : -1) ||
          (split.split() && parameter.split_blocks != split.blocks))
        return false;
    }
  }
  return true;
}

// Step of a save directory name, or nothing for other names.
std::optional<int64_t> step_of(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  int64_t step = 0;
  auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), step);
  if (error != std::errc() || end != name.data() + name.size() || step < 0) return std::nullopt;
  return step;
}

}  // namespace

void write_distributed_checkpoint(const std::filesystem::path& directory, MultiStage& multi_stage,
                                  const DistributedCheckpointContents& contents) {
  const StageSettings& settings = multi_stage.settings();
  FLM_CHECK(settings.training, kComponent, "a distributed checkpoint holds the optimizer state: the model must be "
                                           "built for training");
  std::vector<SafetensorsEntry> entries;
  for (size_t index = 0; index < multi_stage.stages().size(); ++index) {
    // This rank's stages (a copy of tied weights is its owner's to save).
    if (!multi_stage.runs(index)) continue;
    Stage& stage = *multi_stage.stages()[index];
    // The weights as the format stores them whatever the stage keeps: this rank's trainable shard then its frozen
    // shard, in the optimization dtype (frozen weights kept in the compute dtype are widened, exactly).
    if (stage.frozen_in_compute_dtype()) {
      Stage* owner = &stage;
      const int64_t trainable = stage.weight_shard().numel(), frozen = stage.frozen_shard().numel();
      entries.push_back({.name = stage_key(index, kWeightsShard),
                         .dtype = settings.optimization_dtype,
                         .shape = Shape{trainable + frozen},
                         .values = [owner, trainable, frozen, dtype = settings.optimization_dtype] {
                           Tensor values = Tensor::empty(Shape{trainable + frozen}, dtype);
                           values.slice(0, 0, trainable).copy_bytes_from(to_host_dtype(owner->weight_shard(), dtype));
                           values.slice(0, trainable, trainable + frozen)
                               .copy_bytes_from(to_host_dtype(owner->frozen_shard(), dtype));
                           return values;
                         }});
    }
    std::vector<std::pair<std::string_view, Tensor*>> shards{{kExpAvgShard, &stage.exp_avg()},
                                                             {kExpAvgSqShard, &stage.exp_avg_sq()}};
    if (!stage.frozen_in_compute_dtype()) shards.insert(shards.begin(), {kWeightsShard, &stage.weight_shard()});
    for (const auto& [shard, buffer] : shards) {
      Tensor* tensor = buffer;
      entries.push_back({.name = stage_key(index, shard),
                         .dtype = tensor->dtype(),
                         .shape = tensor->shape(),
                         .values = [tensor] { return tensor->to(Device::cpu()); }});
    }
  }
  const int file_rank = file_index(settings.pipeline_rank, settings.data_rank, settings.tensor_rank,
                                   settings.data_parallel, settings.tensor_parallel);
  write_safetensors(directory / rank_file(file_rank), entries,
                    {{"format", "distributed"},
                     {"step", std::to_string(contents.state.completed_steps)},
                     {"rank", std::to_string(file_rank)}});
  // The metadata describes every rank's file: rank 0 writes it.
  if (file_rank != 0) return;
  CheckpointMetadata metadata{.format = CheckpointFormat::distributed,
                              .model = contents.model,
                              .config = contents.model_config,
                              .shards = state_shards(true),
                              .state = contents.state,
                              .consumed_samples = contents.consumed_samples,
                              .layout = layout_of(multi_stage),
                              .trainer_config = contents.trainer_config};
  write_checkpoint_metadata(directory, metadata);
}

void save_distributed_checkpoint(const std::filesystem::path& directory, MultiStage& multi_stage,
                                 const DistributedCheckpointContents& contents, bool sync) {
  write_checkpoint_directory(
      directory,
      [&](const std::filesystem::path& temporary) { write_distributed_checkpoint(temporary, multi_stage, contents); },
      sync);
}

TrainingState load_distributed_checkpoint(const std::filesystem::path& directory, const CheckpointMetadata& metadata,
                                          MultiStage& multi_stage, bool optimizer_state) {
  FLM_CHECK(metadata.format == CheckpointFormat::distributed, kComponent, "{} is not a distributed checkpoint",
            directory.string());
  if (optimizer_state && metadata.shards.size() < 3)
    throw Error(kComponent, fmt::format("{}: the checkpoint holds no optimizer state", directory.string()));
  const RecordedLayout layout = read_layout(directory, metadata);
  if (same_layout(layout, multi_stage)) {
    const StageSettings& settings = multi_stage.settings();
    // The files of this (data rank, tensor rank) at each pipeline rank whose stages this rank holds.
    std::map<size_t, std::unique_ptr<SafetensorsFile>> files;
    const Stream stream = compute_stream(settings.device);
    for (size_t index = 0; index < multi_stage.stages().size(); ++index) {
      if (!multi_stage.holds(index)) continue;
      Stage& stage = *multi_stage.stages()[index];
      const size_t number = size_t(file_index(stage_pipeline_rank(index, settings.pipeline_parallel),
                                              settings.data_rank, settings.tensor_rank, settings.data_parallel,
                                              settings.tensor_parallel));
      std::unique_ptr<SafetensorsFile>& opened = files[number];
      if (!opened) opened = std::make_unique<SafetensorsFile>(directory / layout.files.at(number));
      SafetensorsFile& file = *opened;
      std::vector<std::pair<std::string_view, Tensor*>> shards{{kWeightsShard, &stage.weight_shard()}};
      if (optimizer_state) {
        shards.emplace_back(kExpAvgShard, &stage.exp_avg());
        shards.emplace_back(kExpAvgSqShard, &stage.exp_avg_sq());
      }
      for (const auto& [shard, buffer] : shards) {
        const std::string key = stage_key(index, shard);
        const SafetensorsTensorInfo& info = file.info(key);
        // Frozen weights kept in the compute dtype: the stored weights are the trainable shard, then the frozen one.
        const bool split = shard == kWeightsShard && stage.frozen_in_compute_dtype();
        const int64_t expected = buffer->numel() + (split ? stage.frozen_shard().numel() : 0);
        if (info.dtype.dtype != buffer->dtype() || info.numel() != expected)
          throw Error(kComponent, fmt::format("{}: tensor '{}' is {} x {}, the stage's shard is {} x {}",
                                              file.path().string(), key, info.dtype.name, info.numel(),
                                              dtype_name(buffer->dtype()), expected));
        Tensor values = file.read(key).flatten();
        buffer->copy_bytes_from(values.slice(0, 0, buffer->numel()), stream);
        if (split)
          stage.frozen_shard().copy_bytes_from(
              to_host_dtype(values.slice(0, buffer->numel(), expected), stage.frozen_shard().dtype()), stream);
        synchronize(settings.device, stream);
      }
    }
    multi_stage.copy_weights_from_shards(stream);
    synchronize(settings.device, stream);
  } else {
    log_main("Checkpoint {} has another stage layout: loading it parameter by parameter", directory.string());
    load_multi_stage_state(multi_stage, *distributed_checkpoint_source(directory, metadata), optimizer_state);
  }
  return metadata.state.value_or(TrainingState{});
}

std::shared_ptr<TensorSource> distributed_checkpoint_source(const std::filesystem::path& directory,
                                                            const CheckpointMetadata& metadata) {
  const RecordedLayout layout = read_layout(directory, metadata);
  const int ranks = layout.data_parallel;
  const int pipeline_parallel = layout.pipeline_parallel;
  const int tensor_parallel = layout.tensor_parallel;
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  for (const std::string& name : layout.files) files.push_back(std::make_shared<SafetensorsFile>(directory / name));
  auto result = std::make_shared<TensorList>(fmt::format("checkpoint {} (distributed)", directory.string()));
  const DType dtype = layout.optimization_dtype;
  const size_t element_size = dtype_size(dtype);
  for (size_t index = 0; index < layout.stages.size(); ++index) {
    const RecordedStage& stage = layout.stages[index];
    if (stage.trainable_size % ranks != 0 || stage.frozen_size % ranks != 0)
      throw Error(kComponent, fmt::format("{}: stage {} of the layout does not split into {} equal shards",
                                          directory.string(), index, ranks));
    // Rank r's shard of each region: [r * shard, (r + 1) * shard) of the region, stored from `file_offset` on in the
    // rank's tensor (the frozen part follows the trainable one in `weights`).
    const int64_t trainable_shard = stage.trainable_size / ranks, frozen_shard = stage.frozen_size / ranks;
    // The files of the pipeline rank that owns the stage, by (data rank, tensor rank).
    const auto first_file =
        files.begin() + file_index(stage_pipeline_rank(index, pipeline_parallel), 0, 0, ranks, tensor_parallel);
    const std::vector<std::shared_ptr<SafetensorsFile>> stage_files(first_file, first_file + ranks * tensor_parallel);
    for (const std::shared_ptr<SafetensorsFile>& file : stage_files)
      for (const std::string& shard : metadata.shards) {
        const std::string key = stage_key(index, shard);
        const SafetensorsTensorInfo& info = file->info(key);
        const int64_t expected = shard == kWeightsShard ? trainable_shard + frozen_shard : trainable_shard;
        if (info.dtype.dtype != dtype || info.numel() != expected)
          throw Error(kComponent, fmt::format("{}: tensor '{}' is {} x {}, the layout says {} x {}",
                                              file->path().string(), key, info.dtype.name, info.numel(),
                                              dtype_name(dtype), expected));
      }
    for (const RecordedParameter& parameter : stage.parameters) {
      // The parameter's elements in its region's coordinates, and the size of that region's shards.
      const int64_t region_begin = parameter.frozen ? parameter.offset - stage.trainable_size : parameter.offset;
      const int64_t shard_size = parameter.frozen ? frozen_shard : trainable_shard;
      const int64_t file_offset = parameter.frozen ? trainable_shard : 0;
      // Tensor parallelism: each tensor rank's part of a split parameter, put together; tensor rank 0's copy of a
      // whole one.
      const layers::TensorSplit split{.size = tensor_parallel, .dim = parameter.split_dim,
                                      .blocks = parameter.split_blocks};
      for (const std::string& shard : metadata.shards) {
        if (shard != kWeightsShard && parameter.frozen) continue;
        const std::string key = stage_key(index, shard);
        const Shape shape = parameter.shape;
        // The part of tensor rank `tensor_rank`, from the shards of its data ranks' files.
        auto read_part = [files = stage_files, key, region_begin, shape, dtype, element_size, shard_size, file_offset,
                          ranks, tensor_parallel](int tensor_rank) {
          Tensor values = Tensor::empty(shape, dtype);
          char* output = static_cast<char*>(values.data());
          // The pieces of the parameter in each rank's shard, in order.
          const int64_t numel = shape.numel();
          for (int64_t element = 0; element < numel;) {
            const int64_t position = region_begin + element;
            const int64_t rank = position / shard_size, within = position % shard_size;
            const int64_t count = std::min(numel - element, shard_size - within);
            const std::span<const std::byte> bytes =
                files[size_t(file_index(0, int(rank), tensor_rank, ranks, tensor_parallel))]->bytes(key);
            std::memcpy(output + size_t(element) * element_size,
                        bytes.data() + size_t(file_offset + within) * element_size, size_t(count) * element_size);
            element += count;
          }
          return values;
        };
        if (!split.split()) {
          result->add(state_key(parameter.name, shard), {dtype, shape}, [read_part] { return read_part(0); });
          continue;
        }
        result->add(state_key(parameter.name, shard), {dtype, split.global_shape(shape)},
                    [read_part, split, shape, dtype] {
                      return join_tensor_parallel_parts(split, shape, dtype, read_part);
                    });
      }
    }
  }
  return result;
}

std::filesystem::path training_checkpoint_folder(const std::filesystem::path& experiment_dir) {
  return experiment_dir / "checkpoint";
}

std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& root) {
  if (file_type_of(root, kComponent) != std::filesystem::file_type::directory) return std::nullopt;
  std::optional<std::pair<int64_t, std::filesystem::path>> best;
  for (const std::filesystem::path& entry : folder_entries(root, kComponent)) {
    auto step = step_of(entry);
    if (!step || file_type_of(entry, kComponent) != std::filesystem::file_type::directory ||
        !checkpoint_complete(entry))
      continue;
    if (!best || *step > best->first) best = {*step, entry};
  }
  if (!best) return std::nullopt;
  return best->second;
}

void prune_checkpoints(const std::filesystem::path& root, const CheckpointRetention& retention) {
  if (!std::filesystem::is_directory(root)) return;
  std::vector<std::pair<int64_t, std::filesystem::path>> complete;
  std::vector<std::filesystem::path> leftovers;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    auto step = step_of(entry.path());
    if (step && checkpoint_complete(entry.path()))
      complete.emplace_back(*step, entry.path());
    else if (step || (name.starts_with(".") && name.find(".tmp-") != std::string::npos))
      leftovers.push_back(entry.path());
  }
  for (const auto& path : leftovers) {
    log_main("Removing {} (left by an interrupted save)", path.string());
    std::filesystem::remove_all(path);
  }
  if (!retention.keep) return;
  std::sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::optional<int64_t> newest_before;
  if (retention.keep_newest_before)
    for (const auto& [step, path] : complete)
      if (step < *retention.keep_newest_before) {
        newest_before = step;
        break;
      }
  int kept = 0;
  for (const auto& [step, path] : complete) {
    const bool permanent = retention.keep_every && retention.interval &&
                           (step - retention.offset) % (int64_t(*retention.keep_every) * *retention.interval) == 0;
    if (permanent || step == newest_before) continue;
    if (kept < *retention.keep) {
      ++kept;
      continue;
    }
    log_main("Removing {} (keeping the last {})", path.string(), *retention.keep);
    std::filesystem::remove_all(path);
  }
}

}  // namespace fast_llm::engine
