// Stage buffers: layout, binding, initialisation and the shard <-> full-buffer copies.
#include "fast_llm/engine/multi_stage/stage.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "fast_llm/core/error.h"
#include "fast_llm/core/random.h"
#include "fast_llm/engine/multi_stage/initialization.h"
#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/pointwise.h"

namespace fast_llm::engine {
namespace {

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

Tensor zeros(int64_t numel, DType dtype, Device device) {
  Tensor tensor = Tensor::empty(Shape{numel}, dtype, device);
  if (numel > 0) set_bytes(tensor.data(), device, 0, tensor.nbytes(), Stream{});
  return tensor;
}

// Host elements filled per chunk when initialising a device shard (bounds the host staging memory).
constexpr int64_t kInitializationChunk = int64_t(1) << 24;

// One data-parallel rank: the shard covers the whole stage in the same layout, so it can stand in for the full
// buffer when the dtypes agree.
bool weights_alias_shard(const StageSettings& settings) {
  return settings.data_parallel == 1 && settings.compute_dtype == settings.optimization_dtype;
}
bool gradients_alias_shard(const StageSettings& settings) {
  return settings.data_parallel == 1 && settings.gradient_dtype == settings.optimization_dtype;
}
// Frozen weights kept in the compute dtype only (store_frozen_weights_in_optimization_precision: false), when it is not
// the optimization dtype.
bool frozen_kept_in_compute_dtype(const StageSettings& settings) {
  return !settings.store_frozen_weights_in_optimization_precision &&
         settings.compute_dtype != settings.optimization_dtype;
}
// ... and then, unless the stage's full weight buffer is shared with other stages (ZeRO-3), this rank's part of the
// frozen region of that buffer is their only copy on the rank (the gather that fills the rest is in place).
bool frozen_shard_in_weight_buffer(const StageSettings& settings, bool weights_shared) {
  return frozen_kept_in_compute_dtype(settings) && !weights_shared;
}

}  // namespace

TensorRole tensor_role(const layers::ParameterMeta& meta) {
  if (meta.tensor.size == 1 || meta.tensor.split()) return TensorRole::split;
  return meta.tensor.partial_gradient ? TensorRole::partial : TensorRole::replicated;
}

StageRegions stage_regions(const std::vector<layers::Layer*>& layers, int data_parallel) {
  // Each parameter starts aligned, so the order they are laid out in does not change the sizes.
  int64_t trainable = 0, frozen = 0;
  for (layers::Layer* layer : layers)
    for (layers::Parameter* parameter : layer->parameters())
      (parameter->meta.frozen ? frozen : trainable) += round_up(parameter->meta.shape.numel(), kParameterAlignment);
  const int64_t region_multiple = kParameterAlignment * data_parallel;
  return {.trainable = round_up(trainable, region_multiple), .frozen = round_up(frozen, region_multiple)};
}

int64_t stage_buffer_bytes(const StageRegions& regions, const StageSettings& settings, SharedBufferUse shared) {
  const int64_t shard = regions.trainable / settings.data_parallel;
  const int64_t optimization = int64_t(dtype_size(settings.optimization_dtype));
  int64_t bytes = shard * optimization;  // weight_shard, trainable part
  const int64_t frozen_shard = regions.frozen / settings.data_parallel;
  if (!frozen_kept_in_compute_dtype(settings))
    bytes += frozen_shard * optimization;  // weight_shard, frozen part
  else if (!frozen_shard_in_weight_buffer(settings, shared.weights))
    bytes += frozen_shard * int64_t(dtype_size(settings.compute_dtype));  // frozen_shard
  if (!weights_alias_shard(settings) && !shared.weights)
    bytes += (regions.trainable + regions.frozen) * int64_t(dtype_size(settings.compute_dtype));  // weight_buffer
  if (!settings.training) return bytes;
  if (!shared.gradients) bytes += regions.trainable * int64_t(dtype_size(settings.gradient_dtype));  // grad_buffer
  if (!gradients_alias_shard(settings)) bytes += shard * optimization;        // grad_shard
  return bytes + 2 * shard * optimization;                                    // exp_avg, exp_avg_sq
}

Stage::Stage(int index, std::vector<layers::Layer*> layers, const StageSettings& settings,
             const SharedStageBuffers& shared, bool allocate)
    : index_(index), allocated_(allocate), layers_(std::move(layers)), settings_(settings) {
  FLM_CHECK(settings_.data_parallel >= 1 && settings_.data_rank >= 0 && settings_.data_rank < settings_.data_parallel,
            "multi_stage", "data rank {} is outside a data-parallel group of {}", settings_.data_rank,
            settings_.data_parallel);
  FLM_CHECK(settings_.optimization_dtype == DType::float32 || settings_.optimization_dtype == DType::float64,
            "multi_stage", "the optimization dtype must be float32 or float64, got {}",
            dtype_name(settings_.optimization_dtype));

  // Trainable parameters first, grouped by optimizer settings in order of first appearance (so each group is one
  // contiguous range), then frozen ones.
  std::vector<layers::Parameter*> trainable, frozen;
  using GroupKey = std::tuple<bool, double, TensorRole>;
  std::vector<GroupKey> group_keys;
  std::map<GroupKey, std::vector<layers::Parameter*>> by_group;
  for (layers::Layer* layer : layers_) {
    for (layers::Parameter* parameter : layer->parameters()) {
      const layers::ParameterMeta& meta = parameter->meta;
      FLM_ASSERT(meta.tensor.size == settings_.tensor_parallel, "parameter {} is laid out for {} tensor-parallel ranks "
                 "in a model of {}", meta.name, meta.tensor.size, settings_.tensor_parallel);
      if (meta.frozen) {
        frozen.push_back(parameter);
        continue;
      }
      GroupKey key{meta.weight_decay, meta.lr_scale, tensor_role(meta)};
      if (!by_group.contains(key)) group_keys.push_back(key);
      by_group[key].push_back(parameter);
    }
  }
  const int64_t region_multiple = kParameterAlignment * settings_.data_parallel;
  int64_t offset = 0;
  for (const auto& key : group_keys) {
    ParameterGroup group{.weight_decay = std::get<0>(key),
                         .lr_scale = std::get<1>(key),
                         .tensor_role = std::get<2>(key),
                         .begin = offset};
    for (layers::Parameter* parameter : by_group[key]) {
      int64_t numel = parameter->meta.shape.numel();
      slots_.push_back({.parameter = parameter, .offset = offset, .numel = numel});
      offset = round_up(offset + numel, kParameterAlignment);
    }
    group.end = offset;
    groups_.push_back(group);
  }
  trainable_size_ = round_up(offset, region_multiple);
  // The last group runs to the end of the region: the padding behaves like the gaps between parameters.
  if (!groups_.empty()) groups_.back().end = trainable_size_;
  offset = trainable_size_;
  for (layers::Parameter* parameter : frozen) {
    int64_t numel = parameter->meta.shape.numel();
    slots_.push_back({.parameter = parameter, .offset = offset, .numel = numel});
    offset = round_up(offset + numel, kParameterAlignment);
  }
  frozen_size_ = round_up(offset, region_multiple) - trainable_size_;
  frozen_in_compute_dtype_ = frozen_kept_in_compute_dtype(settings_);
  // Another pipeline rank's stage: its layers exist (the model is built whole) but own no memory here.
  if (!allocated_) return;

  // Buffers (stage_buffer_bytes counts the same ones).
  const Device device = settings_.device;
  weight_shard_ = zeros(trainable_shard_size() + (frozen_in_compute_dtype_ ? 0 : frozen_shard_size()),
                        settings_.optimization_dtype, device);
  weights_alias_shard_ = weights_alias_shard(settings_);
  weights_shared_ = shared.weights.defined();
  gradients_shared_ = settings_.training && shared.gradients.defined();
  FLM_ASSERT(!weights_shared_ || (!weights_alias_shard_ && shared.weights.dtype() == settings_.compute_dtype &&
                                  shared.weights.numel() >= trainable_size_ + frozen_size_),
             "stage {}: a shared weight buffer that cannot hold its weights", index_);
  FLM_ASSERT(!gradients_shared_ || (shared.gradients.dtype() == settings_.gradient_dtype &&
                                    shared.gradients.numel() >= trainable_size_ && settings_.data_parallel > 1),
             "stage {}: a shared gradient buffer that cannot hold its gradients", index_);
  weight_buffer_ = weights_alias_shard_ ? weight_shard_
                   : weights_shared_    ? shared.weights.slice(0, 0, trainable_size_ + frozen_size_)
                                        : zeros(trainable_size_ + frozen_size_, settings_.compute_dtype, device);
  if (!frozen_in_compute_dtype_)
    frozen_shard_ = weight_shard_.slice(0, trainable_shard_size(), trainable_shard_size() + frozen_shard_size());
  else if (frozen_shard_in_weight_buffer(settings_, weights_shared_))
    frozen_shard_ = weight_buffer_.slice(0, frozen_shard_begin(settings_.data_rank),
                                         frozen_shard_begin(settings_.data_rank) + frozen_shard_size());
  else
    frozen_shard_ = zeros(frozen_shard_size(), settings_.compute_dtype, device);
  if (settings_.training) {
    grad_buffer_ = gradients_shared_ ? shared.gradients.slice(0, 0, trainable_size_)
                                     : zeros(trainable_size_, settings_.gradient_dtype, device);
    gradients_alias_shard_ = gradients_alias_shard(settings_);
    grad_shard_ = gradients_alias_shard_ ? grad_buffer_
                                         : zeros(trainable_shard_size(), settings_.optimization_dtype, device);
    exp_avg_ = zeros(trainable_shard_size(), settings_.optimization_dtype, device);
    exp_avg_sq_ = zeros(trainable_shard_size(), settings_.optimization_dtype, device);
  }

  // The trainable region's elements outside every parameter (alignment gaps and the region's padding).
  int64_t covered = 0;
  for (const ParameterSlot& slot : slots_) {
    if (slot.parameter->meta.frozen) continue;
    if (slot.offset > covered) gradient_gaps_.emplace_back(covered, slot.offset);
    covered = slot.offset + slot.numel;
  }
  if (trainable_size_ > covered) gradient_gaps_.emplace_back(covered, trainable_size_);

  for (const ParameterSlot& slot : slots_) {
    layers::Parameter& parameter = *slot.parameter;
    parameter.weight = weight_buffer_.slice(0, slot.offset, slot.offset + slot.numel).reshape(parameter.meta.shape);
    parameter.grad = settings_.training && !parameter.meta.frozen
                         ? grad_buffer_.slice(0, slot.offset, slot.offset + slot.numel).reshape(parameter.meta.shape)
                         : Tensor();
  }
}

std::vector<ParameterGroup> Stage::shard_groups(int rank) const {
  const int64_t shard_begin = trainable_shard_begin(rank), shard_end = shard_begin + trainable_shard_size();
  std::vector<ParameterGroup> result;
  for (const ParameterGroup& group : groups_) {
    int64_t begin = std::max(group.begin, shard_begin), end = std::min(group.end, shard_end);
    if (begin >= end) continue;
    result.push_back({.weight_decay = group.weight_decay,
                      .lr_scale = group.lr_scale,
                      .tensor_role = group.tensor_role,
                      .begin = begin - shard_begin,
                      .end = end - shard_begin});
  }
  return result;
}

const ParameterSlot* Stage::find(const std::string& name) const {
  for (const ParameterSlot& slot : slots_)
    if (slot.parameter->meta.name == name) return &slot;
  return nullptr;
}

void Stage::fill_initial_values(const layers::Parameter& parameter, int64_t begin, int64_t count,
                                void* output) const {
  const layers::ParameterMeta& meta = parameter.meta;
  const uint64_t seed = parameter_seed(settings_.seed, meta.name);
  const size_t element_size = dtype_size(settings_.optimization_dtype);
  // A tensor-parallel part holds elements of the one-process tensor that are contiguous only in runs: each run gets
  // the values of its elements there, so every layout starts from the same model.
  for (int64_t done = 0; done < count;) {
    const int64_t run = std::min(count - done, meta.tensor.contiguous_run(meta.shape, begin + done));
    const int64_t global_begin = meta.tensor.global_index(meta.shape, begin + done);
    void* destination = static_cast<char*>(output) + size_t(done) * element_size;
    if (settings_.optimization_dtype == DType::float32)
      fill_initialization(meta.initialization, seed, global_begin, run, static_cast<float*>(destination));
    else
      fill_initialization(meta.initialization, seed, global_begin, run, static_cast<double*>(destination));
    done += run;
  }
}

void Stage::reduce_partial_gradients(Stream stream) {
  if (settings_.tensor_parallel == 1 || !grad_buffer_.defined()) return;
  FLM_ASSERT(settings_.tensor_group != nullptr && settings_.tensor_group->size() == settings_.tensor_parallel,
             "stage {}: partial gradients without a tensor-parallel group", index_);
  for (const ParameterGroup& group : groups_) {
    if (group.tensor_role != TensorRole::partial || group.begin == group.end) continue;
    Tensor range = grad_buffer_.slice(0, group.begin, group.end);
    settings_.tensor_group->all_reduce(range, distributed::ReduceOp::sum, stream)->wait(stream);
  }
}

void Stage::initialize_weights() {
  initialize_shard();
  copy_weights_from_shard();
}

void Stage::initialize_shard() {
  for (const ParameterSlot& slot : slots_) initialize_parameter(slot);
  if (settings_.training) {
    set_bytes(exp_avg_.data(), settings_.device, 0, exp_avg_.nbytes(), Stream{});
    set_bytes(exp_avg_sq_.data(), settings_.device, 0, exp_avg_sq_.nbytes(), Stream{});
  }
}

void Stage::initialize_parameter(const ParameterSlot& slot) {
  const int rank = settings_.data_rank;
  const bool frozen = slot.parameter->meta.frozen;
  // This rank's part of the parameter's region: [region begin, + shard size) in stage coordinates, held by `shard`
  // (the trainable part of weight_shard, or frozen_shard) from its element 0.
  const int64_t region_begin = frozen ? frozen_shard_begin(rank) : trainable_shard_begin(rank);
  const int64_t region_size = frozen ? frozen_shard_size() : trainable_shard_size();
  Tensor shard = frozen ? frozen_shard_ : weight_shard_.slice(0, 0, trainable_shard_size());
  const int64_t begin = std::max(slot.offset, region_begin);
  const int64_t end = std::min(slot.offset + slot.numel, region_begin + region_size);
  const size_t element_size = dtype_size(settings_.optimization_dtype);
  // Values are computed in the optimization dtype; written directly where the shard is of that dtype on the CPU,
  // else through a host staging buffer (cast on the way when the shard holds the compute dtype).
  const bool direct = settings_.device.is_cpu() && shard.dtype() == settings_.optimization_dtype;
  Tensor staging;
  for (int64_t chunk = begin; chunk < end; chunk += kInitializationChunk) {
    const int64_t count = std::min(kInitializationChunk, end - chunk);
    Tensor destination = shard.slice(0, chunk - region_begin, chunk - region_begin + count);
    if (direct) {
      fill_initial_values(*slot.parameter, chunk - slot.offset, count, destination.data());
      continue;
    }
    if (!staging.defined() || staging.numel() < count)
      staging = Tensor::empty(Shape{std::min(kInitializationChunk, end - begin)}, settings_.optimization_dtype);
    fill_initial_values(*slot.parameter, chunk - slot.offset, count, staging.data());
    Tensor values = staging.slice(0, 0, count);
    const Stream stream = compute_stream(settings_.device);
    if (shard.dtype() == settings_.optimization_dtype) {
      copy_bytes(destination.data(), settings_.device, values.data(), Device::cpu(), size_t(count) * element_size,
                 stream);
    } else {
      kernels::cast({.source = settings_.device.is_cpu() ? values : values.to(settings_.device, stream),
                     .destination = destination,
                     .stream = stream});
    }
    // The staging buffer is rewritten by the next chunk: wait for this copy.
    synchronize(settings_.device, stream);
  }
}

Tensor Stage::trainable_compute_weight_shard() const {
  if (weights_alias_shard_ || settings_.data_parallel != 1) return Tensor();
  // One rank: the shard starts at element 0 of the stage, as the full buffer does.
  return weight_buffer_.slice(0, 0, trainable_shard_size());
}

void PendingCollectives::wait(Stream stream) {
  for (const auto& work : works) work->wait(stream);
  works.clear();
  tensors.clear();
}

void Stage::copy_weights_from_shard(Stream stream, bool frozen) {
  if (weights_alias_shard_ || weights_shared_ || weight_buffer_.numel() == 0) return;
  if (settings_.data_parallel == 1) {
    // Frozen weights kept in the compute dtype are already in the buffer (frozen_shard is its frozen region).
    Tensor destination = frozen_in_compute_dtype_ ? weight_buffer_.slice(0, 0, trainable_size_) : weight_buffer_;
    if (destination.numel() > 0)
      kernels::cast({.source = weight_shard_, .destination = destination, .stream = stream});
    return;
  }
  start_gather_weights(stream, frozen).wait(stream);
}

PendingCollectives Stage::start_gather_weights(Stream stream, bool frozen) {
  FLM_ASSERT(settings_.data_parallel > 1 && settings_.data_group &&
                 settings_.data_group->size() == settings_.data_parallel,
             "stage {}: gathering weights without a data-parallel group", index_);
  PendingCollectives pending;
  // Each region is gathered on its own from this rank's part of it, in the compute dtype (cast first when kept in
  // another), rank r's part landing at r * shard of the region, where the layout puts it.
  auto gather = [&](Tensor part, int64_t begin, int64_t size) {
    if (size == 0) return;
    if (part.dtype() != settings_.compute_dtype) {
      Tensor cast = Tensor::empty(part.shape(), settings_.compute_dtype, settings_.device);
      kernels::cast({.source = part, .destination = cast, .stream = stream});
      part = cast;
    }
    Tensor full = weight_buffer_.slice(0, begin, begin + size);
    pending.works.push_back(settings_.data_group->all_gather(part, full, stream));
    pending.tensors.push_back(part);
  };
  gather(weight_shard_.slice(0, 0, trainable_shard_size()), 0, trainable_size_);
  if (frozen) gather(frozen_shard_, trainable_size_, frozen_size_);
  return pending;
}

void Stage::copy_gradients_to_shard(Stream stream) {
  if (gradients_alias_shard_ || !grad_buffer_.defined() || grad_buffer_.numel() == 0) return;
  if (settings_.data_parallel > 1) return reduce_gradients(stream, /*accumulate=*/false).wait(stream);
  kernels::cast({.source = grad_buffer_, .destination = grad_shard_, .stream = stream});
}

PendingCollectives Stage::reduce_gradients(Stream stream, bool accumulate) {
  FLM_ASSERT(settings_.data_parallel > 1 && settings_.data_group &&
                 settings_.data_group->size() == settings_.data_parallel,
             "stage {}: reducing gradients without a data-parallel group", index_);
  PendingCollectives pending;
  if (!grad_buffer_.defined() || grad_buffer_.numel() == 0) return pending;
  const bool direct = !accumulate && settings_.gradient_dtype == settings_.optimization_dtype;
  Tensor reduced = direct ? grad_shard_
                          : Tensor::empty(grad_shard_.shape(), settings_.gradient_dtype, settings_.device);
  pending.works.push_back(
      settings_.data_group->reduce_scatter(grad_buffer_, reduced, distributed::ReduceOp::sum, stream));
  pending.tensors.push_back(reduced);
  if (direct) return pending;
  pending.wait(stream);
  if (accumulate)
    kernels::axpy({.input = reduced, .output = grad_shard_, .alpha = 1.0, .stream = stream});
  else
    kernels::cast({.source = reduced, .destination = grad_shard_, .stream = stream});
  return pending;
}

void Stage::zero_gradients(Stream stream) {
  if (grad_buffer_.defined() && grad_buffer_.numel() > 0)
    set_bytes(grad_buffer_.data(), settings_.device, 0, grad_buffer_.nbytes(), stream);
}

void Stage::begin_gradients(Stream stream) {
  // A shared buffer's gaps between parameters hold what another stage left there: they must read as zero again (the
  // reduction and the gradient norm see them).
  if (gradients_shared_)
    for (const auto& [begin, end] : gradient_gaps_)
      set_bytes(static_cast<char*>(grad_buffer_.data()) + size_t(begin) * dtype_size(settings_.gradient_dtype),
                settings_.device, 0, size_t(end - begin) * dtype_size(settings_.gradient_dtype), stream);
  bool all_tracked = true;
  for (const ParameterSlot& slot : slots_)
    if (slot.parameter->grad.defined()) all_tracked = all_tracked && slot.parameter->tracks_grad_start;
  if (!all_tracked) zero_gradients(stream);
  for (const ParameterSlot& slot : slots_)
    if (slot.parameter->grad.defined()) slot.parameter->grad_started = !slot.parameter->tracks_grad_start;
}

void Stage::finish_gradients(Stream stream) {
  for (const ParameterSlot& slot : slots_)
    if (slot.parameter->grad.defined()) slot.parameter->start_grad(stream);
}

}  // namespace fast_llm::engine
