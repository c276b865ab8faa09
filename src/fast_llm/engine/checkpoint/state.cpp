#include "fast_llm/engine/checkpoint/state.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "fast_llm/core/error.h"
#include "fast_llm/core/file_writer.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/engine/checkpoint/directory.h"

namespace fast_llm::engine {

namespace {

constexpr std::string_view kComponent = "checkpoint";

// This rank's part of one region (trainable or frozen) of a stage: stage coordinates [begin, begin + size), stored from
// element 0 of the region's shard (the weight and Adam shards for the trainable region, Stage::frozen_shard for the
// frozen one).
struct Region {
  int64_t begin = 0, size = 0;
};

Region region_of(const Stage& stage, bool frozen) {
  const int rank = stage.settings().data_rank;
  if (frozen) return {stage.frozen_shard_begin(rank), stage.frozen_shard_size()};
  return {stage.trainable_shard_begin(rank), stage.trainable_shard_size()};
}

// The master weights of a parameter's region on this rank: the weight shard (its trainable part starts at 0) or the
// frozen shard, which may hold the compute dtype.
Tensor& (Stage::*master_weights(bool frozen))() { return frozen ? &Stage::frozen_shard : &Stage::weight_shard; }

// The part of `slot` in this rank's shard: elements [parameter_begin, parameter_begin + count) of the parameter sit at
// `shard_position` of its region's shard (master_weights, and for trainable parameters the Adam shards).
struct Overlap {
  int64_t parameter_begin = 0, shard_position = 0, count = 0;
};

Overlap overlap_of(const Stage& stage, const ParameterSlot& slot) {
  const Region region = region_of(stage, slot.parameter->meta.frozen);
  const int64_t begin = std::max(slot.offset, region.begin);
  const int64_t end = std::min(slot.offset + slot.numel, region.begin + region.size);
  if (begin >= end) return {};
  return {begin - slot.offset, begin - region.begin, end - begin};
}

// `count` elements of a contiguous 1-d tensor from `begin`.
Tensor elements(const Tensor& tensor, int64_t begin, int64_t count) { return tensor.slice(0, begin, begin + count); }

Tensor host_copy(const Tensor& tensor) {
  Tensor result = Tensor::empty(tensor.shape(), tensor.dtype());
  result.copy_bytes_from(tensor, compute_stream(tensor.device()));
  synchronize(tensor.device(), compute_stream(tensor.device()));
  return result;
}

std::string safe_file_name(const std::string& name, const std::filesystem::path& index) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    throw Error(kComponent, fmt::format("{}: weight_map names file '{}', which is not a plain file name in the "
                                        "checkpoint directory",
                                        index.string(), name));
  return name;
}

}  // namespace

std::vector<std::string> state_shards(bool optimizer_state) {
  if (!optimizer_state) return {std::string(kWeightsShard)};
  return {std::string(kWeightsShard), std::string(kExpAvgShard), std::string(kExpAvgSqShard)};
}

std::string state_key(std::string_view parameter, std::string_view shard) {
  return fmt::format("{}/{}", parameter, shard);
}

// ---------------------------------------------------------------------------------------------------------------
// TensorList

void TensorList::add(std::string name, TensorSpec spec, std::function<Tensor()> load) {
  FLM_ASSERT(!entries_.contains(name), "{}: tensor {} added twice", description_, name);
  names_.push_back(name);
  entries_.emplace(std::move(name), Entry{std::move(spec), std::move(load)});
}

TensorSpec TensorList::spec(const std::string& name) const {
  auto found = entries_.find(name);
  FLM_CHECK(found != entries_.end(), kComponent, "{}: no tensor '{}'", description_, name);
  return found->second.spec;
}

Tensor TensorList::load(const std::string& name) const {
  auto found = entries_.find(name);
  FLM_CHECK(found != entries_.end(), kComponent, "{}: no tensor '{}'", description_, name);
  Tensor tensor = found->second.load();
  const TensorSpec& spec = found->second.spec;
  FLM_ASSERT(tensor.defined() && tensor.dtype() == spec.dtype && tensor.shape() == spec.shape &&
                 tensor.device().is_cpu() && tensor.is_contiguous(),
             "{}: tensor {} loaded as {} {}, listed as {} {}", description_, name,
             tensor.defined() ? dtype_name(tensor.dtype()) : "undefined", tensor.shape().str(), dtype_name(spec.dtype),
             spec.shape.str());
  return tensor;
}

std::shared_ptr<TensorSource> convert_source(std::shared_ptr<const TensorSource> source, DType dtype) {
  auto result = std::make_shared<TensorList>(fmt::format("{} (as {})", source->describe(), dtype_name(dtype)));
  for (const std::string& name : source->names()) {
    TensorSpec spec = source->spec(name);
    if (!is_floating(spec.dtype) || spec.dtype == dtype) {
      result->add(name, spec, [source, name] { return source->load(name); });
      continue;
    }
    result->add(name, {dtype, spec.shape}, [source, name, dtype] { return to_host_dtype(source->load(name), dtype); });
  }
  return result;
}

// ---------------------------------------------------------------------------------------------------------------
// SafetensorsSet

SafetensorsSet::SafetensorsSet(std::string description, const std::vector<std::filesystem::path>& files)
    : description_(std::move(description)) {
  for (const auto& path : files) {
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    const size_t index = files_.size() - 1;
    for (const SafetensorsTensorInfo& info : files_.back()->tensors()) {
      if (!info.dtype.dtype || !is_floating(*info.dtype.dtype))
        throw Error(kComponent, fmt::format("{}: tensor '{}' is {}, but a checkpoint holds weights and optimizer "
                                            "state, which are floating point (F64, F32, F16, BF16)",
                                            path.string(), info.name, info.dtype.name));
      auto [found, inserted] = owner_.emplace(info.name, index);
      if (!inserted)
        throw Error(kComponent, fmt::format("{}: tensor '{}' is in both {} and {}", description_, info.name,
                                            files_[found->second]->path().string(), path.string()));
      names_.push_back(info.name);
    }
  }
}

std::unique_ptr<SafetensorsSet> SafetensorsSet::open_huggingface(const std::filesystem::path& directory) {
  const std::filesystem::path index_path = directory / "model.safetensors.index.json";
  const std::filesystem::path single = directory / "model.safetensors";
  const std::string description = fmt::format("checkpoint {}", directory.string());
  if (file_type_of(index_path, kComponent) == std::filesystem::file_type::not_found) {
    if (file_type_of(single, kComponent) == std::filesystem::file_type::not_found)
      throw Error(kComponent, fmt::format("{}: neither model.safetensors nor model.safetensors.index.json is there",
                                          directory.string()));
    return std::make_unique<SafetensorsSet>(description, std::vector<std::filesystem::path>{single});
  }
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_text_file(index_path, kComponent));
  } catch (const nlohmann::json::exception& error) {
    throw Error(kComponent, fmt::format("{}: not valid JSON: {}", index_path.string(), error.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(kComponent, fmt::format("{}: no `weight_map` object", index_path.string()));
  std::map<std::string, std::string> weight_map;
  std::vector<std::filesystem::path> files;
  std::set<std::string> seen_files;
  for (auto entry = index["weight_map"].begin(); entry != index["weight_map"].end(); ++entry) {
    if (!entry.value().is_string())
      throw Error(kComponent, fmt::format("{}: weight_map entry '{}' is not a file name", index_path.string(),
                                          entry.key()));
    std::string file = safe_file_name(entry.value().get<std::string>(), index_path);
    weight_map[entry.key()] = file;
    if (seen_files.insert(file).second) {
      if (file_type_of(directory / file, kComponent) == std::filesystem::file_type::not_found)
        throw Error(kComponent, fmt::format("{}: weight_map names {} (for tensor '{}'), which does not exist",
                                            index_path.string(), (directory / file).string(), entry.key()));
      files.push_back(directory / file);
    }
  }
  auto set = std::make_unique<SafetensorsSet>(description, files);
  for (const auto& [name, file] : weight_map) {
    if (!set->contains(name))
      throw Error(kComponent, fmt::format("{}: tensor '{}' is listed in {} but {} does not hold it",
                                          index_path.string(), name, file, (directory / file).string()));
    const std::filesystem::path actual = set->file_of(name).path().filename();
    if (actual != file)
      throw Error(kComponent, fmt::format("{}: tensor '{}' is listed in {} but is in {}", index_path.string(), name,
                                          file, actual.string()));
  }
  for (const std::string& name : set->names())
    if (!weight_map.contains(name))
      throw Error(kComponent, fmt::format("{}: tensor '{}' of {} is missing from the index", index_path.string(), name,
                                          set->file_of(name).path().string()));
  return set;
}

const SafetensorsFile& SafetensorsSet::file_of(const std::string& name) const {
  auto found = owner_.find(name);
  FLM_CHECK(found != owner_.end(), kComponent, "{}: no tensor '{}'", description_, name);
  return *files_[found->second];
}

TensorSpec SafetensorsSet::spec(const std::string& name) const {
  const SafetensorsFile& file = file_of(name);
  const SafetensorsTensorInfo& info = file.info(name);
  if (!info.dtype.dtype)
    throw Error(kComponent, fmt::format("{}: tensor '{}' has dtype {}, which is not supported", file.path().string(),
                                        name, info.dtype.name));
  return {*info.dtype.dtype, info.tensor_shape()};
}

Tensor SafetensorsSet::load(const std::string& name) const { return file_of(name).read(name); }

// ---------------------------------------------------------------------------------------------------------------
// Writing sets of files

std::map<std::string, std::string> write_safetensors_set(const std::filesystem::path& directory,
                                                         const TensorSource& source,
                                                         const std::vector<std::string>& names,
                                                         int64_t parameters_per_file, SafetensorsSetLayout layout,
                                                         const std::map<std::string, std::string>& metadata,
                                                         bool sync) {
  FLM_ASSERT(parameters_per_file > 0, "parameters_per_file must be positive");
  std::vector<std::vector<SafetensorsEntry>> files;
  int64_t in_file = 0;
  uint64_t total_bytes = 0;
  for (const std::string& name : names) {
    const TensorSpec spec = source.spec(name);
    const int64_t numel = spec.shape.numel();
    if (files.empty() || (in_file > 0 && in_file + numel > parameters_per_file)) {
      files.emplace_back();
      in_file = 0;
    }
    in_file += numel;
    total_bytes += uint64_t(numel) * dtype_size(spec.dtype);
    files.back().push_back(
        SafetensorsEntry{.name = name, .dtype = spec.dtype, .shape = spec.shape, .values = [&source, name] {
                           return source.load(name);
                         }});
  }
  if (files.empty()) files.emplace_back();

  std::map<std::string, std::string> file_of;
  const size_t count = files.size();
  for (size_t index = 0; index < count; ++index) {
    std::string file_name;
    if (layout == SafetensorsSetLayout::numbered)
      file_name = fmt::format("model_{}.safetensors", index);
    else if (count == 1)
      file_name = "model.safetensors";
    else
      file_name = fmt::format("model-{:05d}-of-{:05d}.safetensors", index + 1, count);
    write_safetensors(directory / file_name, files[index], metadata, {.sync = sync});
    for (const SafetensorsEntry& entry : files[index]) file_of[entry.name] = file_name;
  }

  if (layout == SafetensorsSetLayout::huggingface && count > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes}}},
                                    {"weight_map", nlohmann::ordered_json::object()}};
    for (const std::string& name : names) index["weight_map"][name] = file_of[name];
    write_file(directory / "model.safetensors.index.json", index.dump(2) + '\n',
               {.component = kComponent, .sync = sync});
  }
  return file_of;
}

// ---------------------------------------------------------------------------------------------------------------
// Tensor-parallel parts

namespace {

// Copies between a rank's part (contiguous runs of elements) and the one-process tensor, in either direction.
void copy_tensor_parallel_runs(const layers::TensorSplit& split, const Shape& local, size_t element_size,
                               char* global, char* part, bool to_part) {
  const int64_t numel = local.numel();
  for (int64_t index = 0; index < numel;) {
    const int64_t run = std::min(numel - index, split.contiguous_run(local, index));
    char* global_bytes = global + size_t(split.global_index(local, index)) * element_size;
    char* part_bytes = part + size_t(index) * element_size;
    if (to_part)
      std::memcpy(part_bytes, global_bytes, size_t(run) * element_size);
    else
      std::memcpy(global_bytes, part_bytes, size_t(run) * element_size);
    index += run;
  }
}

}  // namespace

Tensor tensor_parallel_part(const Tensor& global, const layers::TensorSplit& split, const Shape& local) {
  FLM_ASSERT(global.device().is_cpu() && global.is_contiguous() && global.shape() == split.global_shape(local),
             "tensor-parallel part {} of a tensor {}", local.str(), global.shape().str());
  if (!split.split()) return global;
  Tensor part = Tensor::empty(local, global.dtype());
  copy_tensor_parallel_runs(split, local, dtype_size(global.dtype()), static_cast<char*>(global.data()),
                            static_cast<char*>(part.data()), /*to_part=*/true);
  return part;
}

Tensor join_tensor_parallel_parts(const layers::TensorSplit& split, const Shape& local, DType dtype,
                                  const std::function<Tensor(int)>& part_of) {
  Tensor global = Tensor::empty(split.global_shape(local), dtype);
  for (int rank = 0; rank < split.size; ++rank) {
    layers::TensorSplit part_split = split;
    part_split.rank = rank;
    const Tensor part = part_of(rank);
    FLM_ASSERT(part.device().is_cpu() && part.is_contiguous() && part.dtype() == dtype && part.shape() == local,
               "tensor-parallel part {} of a tensor {}", part.shape().str(), global.shape().str());
    copy_tensor_parallel_runs(part_split, local, dtype_size(dtype), static_cast<char*>(global.data()),
                              static_cast<char*>(part.data()), /*to_part=*/false);
  }
  return global;
}

// ---------------------------------------------------------------------------------------------------------------
// Stages

namespace {

// Several data-parallel, tensor-parallel or pipeline ranks: each stage's master weights (trainable and frozen regions)
// and Adam moments gathered from every rank's shard into host tensors in stage coordinates, tensor rank t's stage at
// [t * region size, (t + 1) * region size). Every data-parallel and tensor-parallel rank of the stage's pipeline rank
// calls it.
struct GatheredStage {
  Tensor trainable, frozen, exp_avg, exp_avg_sq;
};

GatheredStage gather_stage(Stage& stage, bool optimizer_state) {
  const StageSettings& settings = stage.settings();
  const Stream stream = compute_stream(settings.device);
  auto gather = [&](const Tensor& part, int64_t full_size) {
    Tensor full = part;
    if (settings.data_parallel > 1) {
      full = Tensor::empty(Shape{full_size}, part.dtype(), settings.device);
      if (full_size > 0) settings.data_group->all_gather(part, full, stream)->wait(stream);
    }
    if (settings.tensor_parallel > 1) {
      Tensor all = Tensor::empty(Shape{full_size * settings.tensor_parallel}, part.dtype(), settings.device);
      if (full_size > 0) settings.tensor_group->all_gather(full, all, stream)->wait(stream);
      full = all;
    }
    return host_copy(full);
  };
  const int64_t trainable_shard = stage.trainable_shard_size();
  GatheredStage gathered;
  gathered.trainable = gather(elements(stage.weight_shard(), 0, trainable_shard), stage.trainable_size());
  gathered.frozen = gather(stage.frozen_shard(), stage.frozen_size());
  if (optimizer_state) {
    gathered.exp_avg = gather(stage.exp_avg(), stage.trainable_size());
    gathered.exp_avg_sq = gather(stage.exp_avg_sq(), stage.trainable_size());
  }
  return gathered;
}

// A pipeline: stage `index`'s gathered state, from the pipeline rank that owns it to every other one (a broadcast on
// the pipeline group that every rank of it calls, for every stage in order).
void share_over_pipeline(MultiStage& multi_stage, size_t index, GatheredStage& gathered, bool optimizer_state) {
  const Stage& stage = *multi_stage.stages()[index];
  const StageSettings& settings = multi_stage.settings();
  const Stream stream = compute_stream(settings.device);
  const int owner = stage_pipeline_rank(index, settings.pipeline_parallel);
  auto share = [&](Tensor& host, int64_t size, DType dtype) {
    Tensor values = Tensor::empty(Shape{size}, dtype, settings.device);
    if (settings.pipeline_rank == owner && size > 0) values.copy_bytes_from(host, stream);
    if (size > 0) multi_stage.pipeline_group()->broadcast(values, owner, stream)->wait(stream);
    host = host_copy(values);
  };
  // Every tensor rank's stage, as gather_stage put them together (the pipeline group links ranks of one tensor rank).
  const int64_t parts = settings.tensor_parallel;
  share(gathered.trainable, stage.trainable_size() * parts, settings.optimization_dtype);
  share(gathered.frozen, stage.frozen_size() * parts,
        stage.frozen_in_compute_dtype() ? settings.compute_dtype : settings.optimization_dtype);
  if (!optimizer_state) return;
  share(gathered.exp_avg, stage.trainable_size() * parts, settings.optimization_dtype);
  share(gathered.exp_avg_sq, stage.trainable_size() * parts, settings.optimization_dtype);
}

}  // namespace

std::shared_ptr<TensorSource> multi_stage_source(MultiStage& multi_stage, bool optimizer_state) {
  auto result = std::make_shared<TensorList>("the model being trained");
  FLM_CHECK(!optimizer_state || multi_stage.settings().training, kComponent,
            "the model has no optimizer state (it was built for inference)");
  const DType dtype = multi_stage.settings().optimization_dtype;
  // Sharded over several ranks: the whole state comes to every rank's host first (collectives: each stage's shards
  // gathered on its pipeline rank, then sent to the other pipeline ranks).
  std::map<const Stage*, std::shared_ptr<GatheredStage>> gathered;
  const bool pipeline = multi_stage.settings().pipeline_parallel > 1;
  if (multi_stage.settings().data_parallel > 1 || multi_stage.settings().tensor_parallel > 1 || pipeline)
    for (size_t index = 0; index < multi_stage.stages().size(); ++index) {
      Stage& stage = *multi_stage.stages()[index];
      auto state = std::make_shared<GatheredStage>();
      if (multi_stage.runs(index)) *state = gather_stage(stage, optimizer_state);
      if (pipeline) share_over_pipeline(multi_stage, index, *state, optimizer_state);
      gathered[&stage] = state;
    }
  // Parameters in the layers' declaration order.
  for (layers::Layer* layer : multi_stage.layers()) {
    for (layers::Parameter* parameter : layer->parameters()) {
      Stage* owner = nullptr;
      const ParameterSlot* slot = nullptr;
      for (auto& stage : multi_stage.stages())
        if ((slot = stage->find(parameter->meta.name))) {
          owner = stage.get();
          break;
        }
      FLM_ASSERT(slot != nullptr, "parameter {} is in no stage", parameter->meta.name);
      const Shape shape = parameter->meta.tensor.global_shape(parameter->meta.shape);
      const bool frozen = parameter->meta.frozen;
      if (auto found = gathered.find(owner); found != gathered.end()) {
        const std::shared_ptr<GatheredStage> stage = found->second;
        const int64_t begin = frozen ? slot->offset - owner->trainable_size() : slot->offset;
        const int64_t count = slot->numel;
        const int64_t region_size = frozen ? owner->frozen_size() : owner->trainable_size();
        const layers::ParameterMeta meta = parameter->meta;
        auto read_from = [stage, begin, count, region_size, meta, shape, dtype](Tensor GatheredStage::*buffer) {
          return [stage, begin, count, region_size, meta, shape, buffer, dtype] {
            // Tensor rank 0's copy of a whole parameter, or every rank's part of a split one put together.
            if (!meta.tensor.split())
              return to_host_dtype(elements((*stage).*buffer, begin, count), dtype).reshape(shape);
            return join_tensor_parallel_parts(meta.tensor, meta.shape, dtype, [&](int rank) {
              return to_host_dtype(elements((*stage).*buffer, rank * region_size + begin, count), dtype)
                  .reshape(meta.shape);
            });
          };
        };
        result->add(state_key(parameter->meta.name, kWeightsShard), {dtype, shape},
                    read_from(frozen ? &GatheredStage::frozen : &GatheredStage::trainable));
        if (optimizer_state && !frozen) {
          result->add(state_key(parameter->meta.name, kExpAvgShard), {dtype, shape},
                      read_from(&GatheredStage::exp_avg));
          result->add(state_key(parameter->meta.name, kExpAvgSqShard), {dtype, shape},
                      read_from(&GatheredStage::exp_avg_sq));
        }
        continue;
      }
      const Overlap overlap = overlap_of(*owner, *slot);
      FLM_ASSERT(overlap.count == slot->numel, "parameter {} is not whole in this rank's shard", parameter->meta.name);
      auto read_from = [owner, overlap, shape, dtype](Tensor& (Stage::*buffer)()) {
        return [owner, overlap, shape, buffer, dtype] {
          return to_host_dtype(elements((owner->*buffer)(), overlap.shard_position, overlap.count), dtype)
              .reshape(shape);
        };
      };
      result->add(state_key(parameter->meta.name, kWeightsShard), {dtype, shape}, read_from(master_weights(frozen)));
      if (optimizer_state && !frozen) {
        result->add(state_key(parameter->meta.name, kExpAvgShard), {dtype, shape}, read_from(&Stage::exp_avg));
        result->add(state_key(parameter->meta.name, kExpAvgSqShard), {dtype, shape}, read_from(&Stage::exp_avg_sq));
      }
    }
  }
  return result;
}

void load_multi_stage_state(MultiStage& multi_stage, const TensorSource& source, bool optimizer_state) {
  FLM_CHECK(!optimizer_state || multi_stage.settings().training, kComponent,
            "the model has no optimizer state to load (it was built for inference)");
  // What each parameter takes: (key, stage, slot, buffer getter).
  struct Target {
    std::string key;
    Stage* stage;
    const ParameterSlot* slot;
    Tensor& (Stage::*buffer)();
  };
  std::vector<Target> targets;
  for (auto& stage : multi_stage.stages()) {
    for (const ParameterSlot& slot : stage->parameters()) {
      const layers::ParameterMeta& meta = slot.parameter->meta;
      targets.push_back({state_key(meta.name, kWeightsShard), stage.get(), &slot, master_weights(meta.frozen)});
      if (optimizer_state && !meta.frozen) {
        targets.push_back({state_key(meta.name, kExpAvgShard), stage.get(), &slot, &Stage::exp_avg});
        targets.push_back({state_key(meta.name, kExpAvgSqShard), stage.get(), &slot, &Stage::exp_avg_sq});
      }
    }
  }
  // Everything is checked before anything is loaded. A PEFT adapter (LoRA) the source does not hold, as a base model's
  // checkpoint does not, starts from its initialisation (and zero Adam state): training LoRA on top of a pretrained
  // model is what adapters are for.
  std::set<std::string> used;
  std::vector<Target> fresh_adapters;
  std::erase_if(targets, [&](const Target& target) {
    if (!target.slot->parameter->meta.peft || source.contains(target.key)) return false;
    if (target.buffer == &Stage::weight_shard) fresh_adapters.push_back(target);
    return true;
  });
  for (const Target& target : targets) {
    const layers::ParameterMeta& meta = target.slot->parameter->meta;
    if (!source.contains(target.key))
      throw Error(kComponent, fmt::format("{}: no tensor '{}' for parameter {} of shape {}", source.describe(),
                                          target.key, meta.name, meta.shape.str()));
    const TensorSpec spec = source.spec(target.key);
    const Shape shape = meta.tensor.global_shape(meta.shape);
    if (!(spec.shape == shape))
      throw Error(kComponent, fmt::format("{}: tensor '{}' has shape {}, the model's parameter {} has shape {}",
                                          source.describe(), target.key, spec.shape.str(), meta.name, shape.str()));
    used.insert(target.key);
  }
  // Every tensor of the shards read must belong to a parameter of the model.
  const std::vector<std::string> shards = state_shards(optimizer_state);
  for (const std::string& name : source.names()) {
    if (used.contains(name)) continue;
    const size_t slash = name.rfind('/');
    const std::string shard = slash == std::string::npos ? "" : name.substr(slash + 1);
    if (std::find(shards.begin(), shards.end(), shard) == shards.end()) continue;
    throw Error(kComponent, fmt::format("{}: tensor '{}' belongs to no parameter of the model (a different "
                                        "architecture?)",
                                        source.describe(), name));
  }
  if (!fresh_adapters.empty())
    log_main("{}: {} adapter weights it does not hold start from their initialization", source.describe(),
             fresh_adapters.size());
  // What other pipeline ranks hold is checked above and loaded there.
  auto not_here = [](const Target& target) { return !target.stage->allocated(); };
  std::erase_if(fresh_adapters, not_here);
  std::erase_if(targets, not_here);
  for (const Target& target : fresh_adapters) {
    target.stage->initialize_parameter(*target.slot);
    if (!optimizer_state) continue;
    const Overlap overlap = overlap_of(*target.stage, *target.slot);
    if (overlap.count == 0) continue;
    for (Tensor& (Stage::*buffer)() : {&Stage::exp_avg, &Stage::exp_avg_sq}) {
      Tensor moments = elements((target.stage->*buffer)(), overlap.shard_position, overlap.count);
      set_bytes(moments.data(), target.stage->settings().device, 0, moments.nbytes(),
                compute_stream(target.stage->settings().device));
    }
  }
  for (const Target& target : targets) {
    const Overlap overlap = overlap_of(*target.stage, *target.slot);
    if (overlap.count == 0) continue;
    const Stream stream = compute_stream(target.stage->settings().device);
    // In the shard's dtype: the optimization dtype, or the compute dtype for frozen weights kept only in it.
    Tensor& shard = (target.stage->*target.buffer)();
    // This tensor rank's part of a split parameter.
    const layers::ParameterMeta& meta = target.slot->parameter->meta;
    Tensor values =
        tensor_parallel_part(to_host_dtype(source.load(target.key), shard.dtype()), meta.tensor, meta.shape).flatten();
    elements(shard, overlap.shard_position, overlap.count)
        .copy_bytes_from(elements(values, overlap.parameter_begin, overlap.count), stream);
    // `values` is freed when this iteration ends: the copy must be done with it.
    synchronize(target.stage->settings().device, stream);
  }
  multi_stage.copy_weights_from_shards(compute_stream(multi_stage.device()));
  synchronize(multi_stage.device(), compute_stream(multi_stage.device()));
}

}  // namespace fast_llm::engine
