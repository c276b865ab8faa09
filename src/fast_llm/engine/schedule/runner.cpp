// The step schedule: forward breadth-first over a depth-first group, backward in reverse, gradient accumulation.
#include "fast_llm/engine/schedule/runner.h"

#include <fmt/format.h>

#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/core/random.h"

namespace fast_llm::engine {

ScheduleRunner::ScheduleRunner(MultiStage& multi_stage, const ScheduleConfig& schedule,
                               const DistributedConfig& distributed, LayerLogSettings logs, bool global_tensor_names)
    : multi_stage_(multi_stage),
      schedule_(schedule),
      distributed_(distributed),
      stream_(compute_stream(multi_stage.device())),
      logs_(logs),
      global_tensor_names_(global_tensor_names) {
  if (schedule.micro_batch_splits != 1)
    throw NotSupportedError("schedule", fmt::format("schedule.micro_batch_splits {}: splitting micro-batches along the "
                                                    "sequence is not supported; use 1",
                                                    schedule.micro_batch_splits));
}

layers::LayerContext ScheduleRunner::make_context(const layers::MicroBatch& batch, Phase phase, int64_t iteration,
                                                  double loss_gradient_scale, double loss_scale, int64_t micro_batches,
                                                  layers::LossSums& losses) const {
  // Micro-batch m of data rank r is the step's micro-batch m * data_parallel + r: the one a single process with
  // data_parallel times the micro-batches reads at that place (data/data_loader.h), and gets the same seed.
  const int64_t global_index = batch.index * distributed_.batch_data_parallel() + distributed_.batch_data_rank();
  const uint64_t phase_shift =
      phase == Phase::training ? distributed_.train_seed_shift.value : distributed_.valid_seed_shift.value;
  return layers::LayerContext{
      .batch = batch,
      .device = multi_stage_.device(),
      .compute_dtype = distributed_.compute_dtype,
      .stream = stream_,
      .training = phase == Phase::training,
      .loss_gradient_scale = loss_gradient_scale,
      .loss_scale = loss_scale,
      .micro_batches_in_step = micro_batches * distributed_.batch_data_parallel(),
      .dropout_seed = derive_seed(uint64_t(distributed_.seed), phase_shift, uint64_t(iteration),
                                  uint64_t(global_index)),
      .losses = &losses,
      .tensor_group = multi_stage_.settings().tensor_group};
}

void ScheduleRunner::run_training_step(std::span<layers::MicroBatch> micro_batches, int64_t num_labels,
                                       int64_t iteration, double loss_scale, layers::LossSums& losses) {
  const int depth_first = schedule_.depth_first_micro_batches;
  const int breadth_first = schedule_.breadth_first_micro_batches;
  FLM_CHECK(int64_t(micro_batches.size()) == int64_t(depth_first) * breadth_first, "schedule",
            "a step takes depth_first_micro_batches x breadth_first_micro_batches = {} x {} micro-batches, got {}",
            depth_first, breadth_first, micro_batches.size());
  losses.clear();
  multi_stage_.begin_gradients(stream_);
  // No labels in the whole step: the losses are empty sums and their gradients 0.
  const double loss_gradient_scale = num_labels > 0 ? loss_scale / double(num_labels) : 0.0;
  const auto& stages = multi_stage_.stages();

  for (int group = 0; group < depth_first; ++group) {
    std::vector<layers::LayerContext> contexts;
    contexts.reserve(size_t(breadth_first));
    for (int slot = 0; slot < breadth_first; ++slot) {
      layers::MicroBatch& batch = micro_batches[size_t(group * breadth_first + slot)];
      batch.index = group * breadth_first + slot;
      contexts.push_back(make_context(batch, Phase::training, iteration, loss_gradient_scale, loss_scale,
                                      int64_t(micro_batches.size()), losses));
    }
    // (micro-batch) activation between stages: the embeddings ignore their input, the head returns nothing.
    std::vector<Tensor> activations(static_cast<size_t>(breadth_first));
    for (size_t stage = 0; stage < stages.size(); ++stage) {
      multi_stage_.before_forward(stage, stream_, /*training=*/true);
      for (int slot = 0; slot < breadth_first; ++slot)
        for (layers::Layer* layer : stages[stage]->layers()) {
          activations[size_t(slot)] = layer->forward(contexts[size_t(slot)], activations[size_t(slot)]);
          log_layer_tensor(*layer, activations[size_t(slot)], /*forward=*/true, group * breadth_first + slot,
                           int64_t(micro_batches.size()));
        }
    }
    // The head ignores grad_output (it computed the gradient of its input in forward).
    std::vector<Tensor> gradients(static_cast<size_t>(breadth_first));
    for (size_t stage = stages.size(); stage-- > 0;) {
      multi_stage_.before_backward(stage, stream_);
      for (int slot = 0; slot < breadth_first; ++slot)
        for (auto layer = stages[stage]->layers().rbegin(); layer != stages[stage]->layers().rend(); ++layer) {
          gradients[size_t(slot)] = (*layer)->backward(contexts[size_t(slot)], gradients[size_t(slot)]);
          log_layer_tensor(**layer, gradients[size_t(slot)], /*forward=*/false, group * breadth_first + slot,
                           int64_t(micro_batches.size()));
        }
      multi_stage_.after_backward(stage, group == 0, group + 1 == depth_first, stream_);
    }
  }
  multi_stage_.finish_gradients(stream_);
}

void ScheduleRunner::run_forward(std::span<layers::MicroBatch> micro_batches, int64_t iteration,
                                 layers::LossSums& losses) {
  // Stage by stage over all the micro-batches, so that a stage whose weights are gathered at use (ZeRO-3) is gathered
  // once.
  std::vector<layers::LayerContext> contexts;
  contexts.reserve(micro_batches.size());
  for (size_t index = 0; index < micro_batches.size(); ++index) {
    micro_batches[index].index = int64_t(index);
    contexts.push_back(make_context(micro_batches[index], Phase::validation, iteration, 1.0, 1.0,
                                    int64_t(micro_batches.size()), losses));
  }
  std::vector<Tensor> activations(micro_batches.size());
  const auto& stages = multi_stage_.stages();
  for (size_t stage = 0; stage < stages.size(); ++stage) {
    multi_stage_.before_forward(stage, stream_, /*training=*/false);
    for (size_t index = 0; index < micro_batches.size(); ++index)
      for (layers::Layer* layer : stages[stage]->layers()) {
        activations[index] = layer->forward(contexts[index], activations[index]);
        log_layer_tensor(*layer, activations[index], /*forward=*/true, int64_t(index), int64_t(micro_batches.size()));
      }
  }
}

void ScheduleRunner::log_layer_tensor(const layers::Layer& layer, const Tensor& tensor, bool forward, int64_t index,
                                      int64_t count) const {
  const int level = forward ? logs_.outputs : logs_.gradients;
  // The embeddings return no input gradient and the head no output.
  if (level <= 0 || !tensor.defined()) return;
  std::string name = fmt::format("{} {} {}", global_tensor_names_ ? "Global" : "Local", layer.name(),
                                 forward ? "fw" : "bw");
  // Numbered within the whole step over the data-parallel ranks (micro-batch m of data rank r is the step's
  // m * data_parallel + r), so that the lines of two layouts of the same run are the same lines.
  const int64_t data_parallel = distributed_.batch_data_parallel();
  if (count * data_parallel > 1)
    name += fmt::format(", mb={}/{}", index * data_parallel + distributed_.batch_data_rank(), count * data_parallel);
  log_info("{}", describe_tensor(fmt::format("{}: {} {}", name, layer.name(), forward ? "output" : "input gradient"),
                                 tensor, level));
}

double ScheduleRunner::flops(std::span<const layers::MicroBatch> micro_batches) const {
  double total = 0.0;
  for (const layers::MicroBatch& batch : micro_batches)
    for (layers::Layer* layer : multi_stage_.layers()) total += layer->flops(batch);
  return total;
}

}  // namespace fast_llm::engine
