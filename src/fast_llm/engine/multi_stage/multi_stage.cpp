// Cutting a model into stages.
#include "fast_llm/engine/multi_stage/multi_stage.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"

namespace fast_llm::engine {

Device resolve_device(const DistributedConfig& distributed) {
  if (distributed.use_cuda && !cuda_devices().empty())
    return Device::cuda(distributed.local_rank() % int(cuda_devices().size()));
  if (distributed.use_cuda && distributed.is_explicit("use_cuda"))
    throw ConfigError(distributed.field_path("use_cuda"),
                      cuda_compiled() ? "is true but no CUDA device is visible"
                                      : "is true but this fast-llm was built without CUDA");
  return Device::cpu();
}

DType gradient_dtype(const MultiStageConfig& multi_stage, const DistributedConfig& distributed) {
  if (distributed.compute_dtype == DType::float64) return DType::float64;
  return multi_stage.full_precision_gradients ? DType::float32 : distributed.compute_dtype;
}

StageSettings stage_settings(const MultiStageConfig& multi_stage, const DistributedConfig& distributed, Device device,
                             bool training) {
  return StageSettings{.device = device,
                       .compute_dtype = distributed.compute_dtype,
                       .gradient_dtype = gradient_dtype(multi_stage, distributed),
                       .optimization_dtype = distributed.optimization_dtype,
                       .data_parallel = distributed.data_parallel(),
                       .data_rank = distributed.data_rank(),
                       .pipeline_parallel = distributed.pipeline_parallel,
                       .pipeline_rank = distributed.pipeline_rank(),
                       .tensor_parallel = distributed.tensor_parallel,
                       .tensor_rank = distributed.tensor_rank(),
                       .seed = uint64_t(distributed.seed),
                       .training = training,
                       .store_frozen_weights_in_optimization_precision =
                           multi_stage.store_frozen_weights_in_optimization_precision};
}

std::vector<std::vector<layers::Layer*>> split_into_stages(const std::vector<layers::Layer*>& layers,
                                                           double layers_per_stage) {
  // Greedy split, as Fast-LLM's: a stage closes once it holds at least layers_per_stage layers since the last one
  // closed (each layer counts 1), and at the last layer.
  std::vector<std::vector<layers::Layer*>> stages;
  double last_count = 0;
  size_t begin = 0;
  for (size_t layer = 0; layer < layers.size(); ++layer) {
    const double count = double(layer + 1);
    if (count >= last_count + layers_per_stage || layer + 1 == layers.size()) {
      stages.emplace_back(layers.begin() + int64_t(begin), layers.begin() + int64_t(layer + 1));
      begin = layer + 1;
      last_count = count;
    }
  }
  return stages;
}

SharedBufferCounts shared_buffer_counts(const MultiStageConfig& multi_stage, int data_parallel, size_t num_stages,
                                        bool training) {
  if (data_parallel == 1) return {};
  auto count = [&](const std::optional<int>& buffers) {
    return buffers && size_t(*buffers) < num_stages ? *buffers : 0;
  };
  return {.weights = count(multi_stage.num_weight_buffers),
          .gradients = training ? count(multi_stage.num_grad_buffers) : 0};
}

namespace {

// The stage each parameter is declared in.
std::map<const layers::Parameter*, size_t> parameter_owners(const std::vector<std::vector<layers::Layer*>>& stages) {
  std::map<const layers::Parameter*, size_t> owner;
  for (size_t index = 0; index < stages.size(); ++index)
    for (layers::Layer* layer : stages[index])
      for (layers::Parameter* parameter : layer->parameters()) owner[parameter] = index;
  return owner;
}

}  // namespace

std::vector<bool> stages_lending_parameters(const std::vector<std::vector<layers::Layer*>>& stages) {
  const std::map<const layers::Parameter*, size_t> owner = parameter_owners(stages);
  std::vector<bool> lending(stages.size(), false);
  for (size_t index = 0; index < stages.size(); ++index)
    for (layers::Layer* layer : stages[index])
      for (layers::Parameter* borrowed : layer->borrowed_parameters())
        if (auto found = owner.find(borrowed); found != owner.end() && found->second != index)
          lending[found->second] = true;
  return lending;
}

std::vector<bool> stages_held(const std::vector<std::vector<layers::Layer*>>& stages, int pipeline_parallel,
                              int pipeline_rank) {
  std::vector<bool> held(stages.size(), false);
  const std::map<const layers::Parameter*, size_t> owner = parameter_owners(stages);
  for (size_t index = 0; index < stages.size(); ++index) {
    if (stage_pipeline_rank(index, pipeline_parallel) != pipeline_rank) continue;
    held[index] = true;
    for (layers::Layer* layer : stages[index])
      for (layers::Parameter* borrowed : layer->borrowed_parameters())
        if (auto found = owner.find(borrowed); found != owner.end()) held[found->second] = true;
  }
  return held;
}

namespace {

size_t count_true(const std::vector<bool>& values) { return size_t(std::count(values.begin(), values.end(), true)); }

// The elements the shared buffers must hold: the largest full weights and gradients of the stages that use them (held
// here and lending no parameter).
struct SharedBufferSizes {
  int64_t weights = 0, gradients = 0;
};
SharedBufferSizes shared_buffer_sizes(const std::vector<std::vector<layers::Layer*>>& stages,
                                      const std::vector<bool>& held, const std::vector<bool>& lending,
                                      int data_parallel) {
  SharedBufferSizes largest;
  for (size_t index = 0; index < stages.size(); ++index) {
    if (lending[index] || !held[index]) continue;
    const StageRegions regions = stage_regions(stages[index], data_parallel);
    largest.weights = std::max(largest.weights, regions.trainable + regions.frozen);
    largest.gradients = std::max(largest.gradients, regions.trainable);
  }
  return largest;
}

}  // namespace

int64_t multi_stage_buffer_bytes(const std::vector<std::vector<layers::Layer*>>& stages,
                                 const MultiStageConfig& multi_stage, const StageSettings& settings) {
  const std::vector<bool> held = stages_held(stages, settings.pipeline_parallel, settings.pipeline_rank);
  const SharedBufferCounts shared =
      shared_buffer_counts(multi_stage, settings.data_parallel, count_true(held), settings.training);
  const std::vector<bool> lending = stages_lending_parameters(stages);
  int64_t bytes = 0;
  for (size_t index = 0; index < stages.size(); ++index) {
    if (!held[index]) continue;
    const bool own = lending[index];
    bytes += stage_buffer_bytes(stage_regions(stages[index], settings.data_parallel), settings,
                                {.weights = !own && shared.weights > 0, .gradients = !own && shared.gradients > 0});
  }
  const SharedBufferSizes largest = shared_buffer_sizes(stages, held, lending, settings.data_parallel);
  return bytes + shared.weights * largest.weights * int64_t(dtype_size(settings.compute_dtype)) +
         shared.gradients * largest.gradients * int64_t(dtype_size(settings.gradient_dtype));
}

MultiStage::MultiStage(BaseModel& model, const MultiStageConfig& multi_stage, const DistributedConfig& distributed,
                       Device device, bool training, distributed::Communicator* data_group,
                       distributed::Communicator* pipeline_group, distributed::Communicator* tensor_group)
    : model_(model), layers_(model.layers()), pipeline_group_(pipeline_group) {
  FLM_CHECK(multi_stage.validated() && distributed.validated(), "multi_stage",
            "the multi-stage and distributed configs must be validated first");
  const int data_parallel = distributed.data_parallel();
  FLM_CHECK(data_parallel == 1 || (data_group && data_group->size() == data_parallel &&
                                   data_group->rank() == distributed.data_rank()),
            "multi_stage", "{} data-parallel ranks need their process group (engine/distributed/process_groups.h)",
            data_parallel);
  FLM_CHECK(!pipeline_group || (pipeline_group->size() == distributed.pipeline_parallel &&
                                pipeline_group->rank() == distributed.pipeline_rank()),
            "multi_stage", "the pipeline group does not match model.distributed.pipeline_parallel {}",
            distributed.pipeline_parallel);
  FLM_CHECK(distributed.tensor_parallel == 1 || (tensor_group && tensor_group->size() == distributed.tensor_parallel &&
                                                  tensor_group->rank() == distributed.tensor_rank()),
            "multi_stage", "{} tensor-parallel ranks need their process group (engine/distributed/process_groups.h)",
            distributed.tensor_parallel);
  FLM_CHECK(!layers_.empty(), "multi_stage", "the model has no layers");

  settings_ = stage_settings(multi_stage, distributed, device, training);
  settings_.data_group = data_parallel > 1 ? data_group : nullptr;
  // Without a pipeline group the whole model lives here.
  settings_.pipeline_parallel = pipeline_group ? pipeline_group->size() : 1;
  settings_.pipeline_rank = pipeline_group ? pipeline_group->rank() : 0;
  settings_.tensor_group = distributed.tensor_parallel > 1 ? tensor_group : nullptr;
  std::vector<std::vector<layers::Layer*>> stage_layers = split_into_stages(layers_, multi_stage.layers_per_stage);
  const size_t num_stages = stage_layers.size();
  FLM_CHECK(num_stages >= size_t(settings_.pipeline_parallel), "multi_stage",
            "{} stages cannot fill {} pipeline ranks: lower model.multi_stage.layers_per_stage or "
            "model.distributed.pipeline_parallel",
            num_stages, settings_.pipeline_parallel);
  const std::vector<bool> held = stages_held(stage_layers, settings_.pipeline_parallel, settings_.pipeline_rank);
  runs_.resize(num_stages);
  for (size_t index = 0; index < num_stages; ++index)
    runs_[index] = stage_pipeline_rank(index, settings_.pipeline_parallel) == settings_.pipeline_rank;
  shared_counts_ = shared_buffer_counts(multi_stage, data_parallel, count_true(held), training);
  // A stage whose parameters a layer of another stage reads (the embeddings, when the head's output weights are tied
  // to them) keeps its own full buffers: the other stage uses them while the shared ones hold other stages.
  const std::vector<bool> lending = stages_lending_parameters(stage_layers);
  const SharedBufferSizes largest = shared_buffer_sizes(stage_layers, held, lending, data_parallel);
  // Tied weights across pipeline ranks: the ranks holding a lending stage (its owner and the ranks of the stages
  // that read it) sum their gradients.
  tied_across_ranks_.assign(num_stages, false);
  std::vector<bool> tie_ranks(size_t(settings_.pipeline_parallel), false);
  for (int rank = 0; rank < settings_.pipeline_parallel; ++rank) {
    const std::vector<bool> held_there = stages_held(stage_layers, settings_.pipeline_parallel, rank);
    for (size_t index = 0; index < num_stages; ++index) {
      const int owner = stage_pipeline_rank(index, settings_.pipeline_parallel);
      if (!held_there[index] || owner == rank) continue;
      tied_across_ranks_[index] = true;
      tie_ranks[size_t(rank)] = tie_ranks[size_t(owner)] = true;
    }
  }
  // Zeroed like a stage's own buffers: the padding between parameters must read as zeros.
  auto zeros = [&](int64_t numel, DType dtype) {
    Tensor tensor = Tensor::empty(Shape{numel}, dtype, device);
    if (numel > 0) set_bytes(tensor.data(), device, 0, tensor.nbytes(), Stream{});
    return tensor;
  };
  for (int index = 0; index < shared_counts_.weights; ++index)
    shared_weights_.push_back(zeros(largest.weights, settings_.compute_dtype));
  for (int index = 0; index < shared_counts_.gradients; ++index)
    shared_gradients_.push_back(zeros(largest.gradients, settings_.gradient_dtype));
  weight_occupant_.assign(shared_weights_.size(), -1);
  pending_gathers_.resize(shared_weights_.size());
  pending_refreshes_.resize(num_stages);
  pending_reductions_.resize(num_stages);
  weight_buffer_of_.assign(num_stages, -1);
  gradient_buffer_of_.assign(num_stages, -1);
  // The shared buffers go round the stages this rank holds, in order.
  size_t sharing = 0;
  for (std::vector<layers::Layer*>& layers : stage_layers) {
    const size_t index = stages_.size();
    SharedStageBuffers shared;
    if (held[index] && !lending[index]) {
      if (!shared_weights_.empty()) {
        weight_buffer_of_[index] = int64_t(sharing % shared_weights_.size());
        shared.weights = shared_weights_[size_t(weight_buffer_of_[index])];
      }
      if (!shared_gradients_.empty()) {
        gradient_buffer_of_[index] = int64_t(sharing % shared_gradients_.size());
        shared.gradients = shared_gradients_[size_t(gradient_buffer_of_[index])];
      }
      ++sharing;
    }
    stages_.push_back(std::make_unique<Stage>(int(index), std::move(layers), settings_, shared, held[index]));
  }
  gradients_reduced_.assign(stages_.size(), false);
  // A stage that adds to its gradients in its forward (the head) begins them there; that is safe in a shared buffer
  // only for the last stage, whose backward (and reduction) comes right after its forward, before any other stage
  // writes gradients.
  for (size_t index = 0; index + 1 < stages_.size(); ++index)
    FLM_CHECK(!stages_[index]->shares_gradients() || !gradients_in_forward(index), "multi_stage",
              "stage {} computes gradients in its forward but is not the last stage: it cannot share a gradient buffer "
              "(ZeRO-2); set model.multi_stage.num_grad_buffers to the number of stages or use zero_stage 1",
              index);
  if (count_true(tied_across_ranks_) > 1)
    throw NotSupportedError("multi_stage", "several stages with parameters tied across pipeline ranks are not "
                                           "supported (only the word embeddings tied to the head)");
  // Every pipeline rank takes part in the split, in the same order.
  if (count_true(tied_across_ranks_) == 1)
    tie_group_ = pipeline_group_->split(tie_ranks[size_t(settings_.pipeline_rank)] ? 0 : -1, "tied_weights");
  log_main("Model: {} layers in {} stages, {} parameters ({} trainable) on {}", layers_.size(), stages_.size(),
           num_parameters(), num_trainable_parameters(), device.str());
  if (settings_.pipeline_parallel > 1)
    log_main("Pipeline over {} ranks: stage s on pipeline rank s % {}{}", settings_.pipeline_parallel,
             settings_.pipeline_parallel,
             count_true(tied_across_ranks_) > 0 ? ", tied weights copied to the ranks that read them" : "");
  if (data_parallel > 1)
    log_main("ZeRO over {} data-parallel ranks: optimizer state sharded{}{}", data_parallel,
             shared_counts_.gradients > 0
                 ? fmt::format(", gradients in {} shared buffers", shared_counts_.gradients)
                 : std::string(),
             shared_counts_.weights > 0 ? fmt::format(", weights in {} shared buffers", shared_counts_.weights)
                                        : std::string());
}

MultiStage::~MultiStage() {
  try {
    const Stream stream = compute_stream(settings_.device);
    wait_for_collectives(stream);
    synchronize(settings_.device, stream);
  } catch (const Error& error) {
    // A destructor must not throw: the collective's own error was reported where it was waited for, or is here.
    log_error("{}", error.what());
  }
}

int64_t MultiStage::num_parameters() const {
  int64_t count = 0;
  for (const auto& stage : stages_)
    for (const ParameterSlot& slot : stage->parameters()) count += slot.numel;
  return count;
}

int64_t MultiStage::num_trainable_parameters() const {
  int64_t count = 0;
  for (const auto& stage : stages_)
    for (const ParameterSlot& slot : stage->parameters())
      if (!slot.parameter->meta.frozen) count += slot.numel;
  return count;
}

layers::Parameter* MultiStage::find_parameter(const std::string& name) const {
  for (const auto& stage : stages_)
    if (const ParameterSlot* slot = stage->find(name)) return slot->parameter;
  return nullptr;
}

void MultiStage::initialize_weights() {
  for (auto& stage : stages_)
    if (stage->allocated()) stage->initialize_weights();
  invalidate_gathered_weights();
}

void MultiStage::zero_gradients(Stream stream) {
  for (auto& stage : stages_)
    if (stage->allocated()) stage->zero_gradients(stream);
}

void MultiStage::begin_gradients(Stream stream) {
  std::fill(gradients_reduced_.begin(), gradients_reduced_.end(), false);
  // Stages that share a gradient buffer begin before each of their backwards (before_backward).
  for (auto& stage : stages_)
    if (stage->allocated() && !stage->shares_gradients()) stage->begin_gradients(stream);
}

void MultiStage::finish_gradients(Stream stream) {
  for (auto& stage : stages_)
    if (stage->allocated()) stage->finish_gradients(stream);
}

void MultiStage::reduce_tied_gradients(Stream stream) {
  if (!tie_group_ || !settings_.training) return;
  for (size_t index = 0; index < stages_.size(); ++index) {
    if (!tied_across_ranks_[index] || !holds(index)) continue;
    Tensor& gradients = stages_[index]->grad_buffer();
    if (gradients.numel() > 0) tie_group_->all_reduce(gradients, distributed::ReduceOp::sum, stream)->wait(stream);
    // after_backward left this stage alone: its tensor-parallel partial gradients are summed here (the tie group links
    // the ranks of one tensor rank, which hold the same vocabulary slice).
    stages_[index]->reduce_partial_gradients(stream);
  }
}

void MultiStage::copy_gradients_to_shards(Stream stream) {
  for (PendingCollectives& pending : pending_reductions_) pending.wait(stream);
  reduce_tied_gradients(stream);
  for (size_t index = 0; index < stages_.size(); ++index)
    if (holds(index) && !gradients_reduced_[index]) stages_[index]->copy_gradients_to_shard(stream);
  std::fill(gradients_reduced_.begin(), gradients_reduced_.end(), false);
}

void MultiStage::copy_weights_from_shards(Stream stream) {
  wait_for_collectives(stream);
  for (auto& stage : stages_)
    if (stage->allocated()) stage->copy_weights_from_shard(stream);
  invalidate_gathered_weights();
}

void MultiStage::refresh_weights(size_t stage, Stream stream) {
  Stage& current = *stages_[stage];
  if (!current.allocated()) return;
  // A copy of tied weights is read by a stage whose hooks do not wait for it: refreshed at once.
  if (settings_.data_parallel == 1 || current.shares_weights() || !runs(stage))
    return current.copy_weights_from_shard(stream, false);
  pending_refreshes_[stage].wait(stream);
  pending_refreshes_[stage] = current.start_gather_weights(stream, /*frozen=*/false);
}

void MultiStage::wait_for_collectives(Stream stream) {
  for (PendingCollectives& pending : pending_refreshes_) pending.wait(stream);
  for (PendingCollectives& pending : pending_reductions_) pending.wait(stream);
  for (PendingCollectives& pending : pending_gathers_) pending.wait(stream);
}

void MultiStage::invalidate_gathered_weights() {
  // A gather still on its way writes into a buffer that is about to be gathered again: let it land first.
  for (PendingCollectives& pending : pending_gathers_) pending.wait(compute_stream(settings_.device));
  std::fill(weight_occupant_.begin(), weight_occupant_.end(), -1);
}

int64_t MultiStage::next_run_stage(size_t stage, int step) const {
  for (int64_t other = int64_t(stage) + step; other >= 0 && other < int64_t(stages_.size()); other += step)
    if (runs_[size_t(other)]) return other;
  return -1;
}

void MultiStage::gather_weights(size_t stage, Stream stream, bool prefetch) {
  const int64_t buffer_index = weight_buffer_of_[stage];
  if (buffer_index < 0) return;
  const size_t buffer = size_t(buffer_index);
  if (weight_occupant_[buffer] != int64_t(stage)) {
    // The buffer's previous stage is done with it: everything that reads it is queued on `stream` before this.
    pending_gathers_[buffer].wait(stream);
    pending_gathers_[buffer] = stages_[stage]->start_gather_weights(stream);
    weight_occupant_[buffer] = int64_t(stage);
  }
  if (!prefetch) pending_gathers_[buffer].wait(stream);
}

void MultiStage::before_forward(size_t stage, Stream stream, bool training) {
  pending_refreshes_[stage].wait(stream);
  if (!shared_weights_.empty()) {
    gather_weights(stage, stream, /*prefetch=*/false);
    if (const int64_t next = next_run_stage(stage, 1); next >= 0 && shared_weights_.size() > 1)
      gather_weights(size_t(next), stream, /*prefetch=*/true);
  }
  if (training && stages_[stage]->shares_gradients() && gradients_in_forward(stage))
    begin_shared_gradients(stage, stream);
}

void MultiStage::begin_shared_gradients(size_t stage, Stream stream) {
  // The stages before it in the buffer may still be reading it.
  for (size_t other = 0; other < stages_.size(); ++other)
    if (gradient_buffer_of_[other] == gradient_buffer_of_[stage]) pending_reductions_[other].wait(stream);
  stages_[stage]->begin_gradients(stream);
}

void MultiStage::before_backward(size_t stage, Stream stream) {
  if (!shared_weights_.empty()) {
    gather_weights(stage, stream, /*prefetch=*/false);
    if (const int64_t previous = next_run_stage(stage, -1); previous >= 0 && shared_weights_.size() > 1)
      gather_weights(size_t(previous), stream, /*prefetch=*/true);
  }
  // A shared gradient buffer holds another stage's (already reduced) gradients: start this stage's afresh, unless its
  // forward already began them.
  if (stages_[stage]->shares_gradients() && !gradients_in_forward(stage)) begin_shared_gradients(stage, stream);
}

bool MultiStage::gradients_in_forward(size_t stage) const {
  for (layers::Layer* layer : stages_[stage]->layers())
    if (layer->accumulates_gradients_in_forward()) return true;
  return false;
}

void MultiStage::after_backward(size_t stage, bool first_group, bool last_group, Stream stream) {
  if (!settings_.training) return;
  Stage& current = *stages_[stage];
  // Gradients tied across pipeline ranks are summed over those ranks first (copy_gradients_to_shards).
  if (tied_across_ranks_[stage]) return;
  if (!current.shares_gradients() && !last_group) return;
  if (settings_.data_parallel == 1 && settings_.tensor_parallel == 1) return;
  current.finish_gradients(stream);
  // Tensor parallelism: the replicated parameters whose gradient each rank computed a part of, summed over the tensor
  // group before anything reads them.
  current.reduce_partial_gradients(stream);
  if (settings_.data_parallel == 1) return;
  pending_reductions_[stage].wait(stream);
  pending_reductions_[stage] =
      current.reduce_gradients(stream, /*accumulate=*/current.shares_gradients() && !first_group);
  gradients_reduced_[stage] = true;
}

}  // namespace fast_llm::engine
