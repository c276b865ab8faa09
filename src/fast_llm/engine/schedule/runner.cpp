// The step schedule: forward breadth-first over a depth-first group, backward in reverse, gradient accumulation; the
// pieces of micro-batches cut along the sequence.
#include "fast_llm/engine/schedule/runner.h"

#include <fmt/format.h>

#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/core/random.h"

namespace fast_llm::engine {

ScheduleRunner::ScheduleRunner(MultiStage& multi_stage, const ScheduleConfig& schedule,
                               const DistributedConfig& distributed, LayerLogSettings logs, bool global_tensor_names,
                               distributed::Communicator* sequence_data)
    : multi_stage_(multi_stage),
      schedule_(schedule),
      distributed_(distributed),
      stream_(compute_stream(multi_stage.device())),
      logs_(logs),
      global_tensor_names_(global_tensor_names),
      sequence_layout_{.splits = schedule.micro_batch_splits,
                       .sequence_data_parallel = distributed.sequence_data_parallel,
                       .sequence_data_rank = distributed.sequence_data_rank(),
                       .sequence_data = sequence_data} {
  FLM_ASSERT(distributed.sequence_data_parallel == 1 || sequence_data != nullptr,
             "sequence_data_parallel {} without its group", distributed.sequence_data_parallel);
  if (sequence_layout_.cuts())
    for (const layers::Layer* layer : multi_stage.layers())
      if (layer->uses_dropout())
        throw NotSupportedError(
            "schedule", fmt::format("{} draws random numbers (dropout), which schedule.micro_batch_splits {} and "
                                    "model.distributed.sequence_data_parallel {} would draw differently from the "
                                    "whole micro-batch; set its dropout to 0 or both to 1",
                                    layer->name(), schedule.micro_batch_splits, distributed.sequence_data_parallel));
}

std::vector<layers::MicroBatch> ScheduleRunner::inputs(std::span<layers::MicroBatch> micro_batches,
                                                       int64_t first_index) const {
  std::vector<layers::MicroBatch> result;
  for (size_t offset = 0; offset < micro_batches.size(); ++offset) {
    layers::MicroBatch& batch = micro_batches[offset];
    batch.index = first_index + int64_t(offset);
    if (!sequence_layout_.cuts()) {
      result.push_back(batch);
      continue;
    }
    std::vector<layers::MicroBatch> pieces = sequence_pieces(batch, batch.index, sequence_layout_, stream_);
    for (size_t split = 0; split < pieces.size(); ++split) {
      pieces[split].index = batch.index * sequence_layout_.splits + int64_t(split);
      result.push_back(std::move(pieces[split]));
    }
  }
  return result;
}

layers::LayerContext ScheduleRunner::make_context(const layers::MicroBatch& batch, Phase phase, int64_t iteration,
                                                  double loss_gradient_scale, double loss_scale, int64_t micro_batches,
                                                  layers::LossSums& losses) const {
  // Micro-batch m of data rank r is the step's micro-batch m * data_parallel + r: the one a single process with
  // data_parallel times the micro-batches reads at that place (data/data_loader.h), and gets the same seed.
  // The pieces of a micro-batch share its seed (they draw no random numbers: see the constructor).
  const int64_t index = batch.sequence_piece ? batch.sequence_piece->sequence : batch.index;
  const int64_t global_index = index * distributed_.batch_data_parallel() + distributed_.batch_data_rank();
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
      // Every piece of every rank counts (sequence-data ranks hold pieces of the same micro-batches).
      .micro_batches_in_step = micro_batches * (sequence_layout_.cuts() ? sequence_layout_.splits : 1) *
                               distributed_.batch_data_parallel() * distributed_.sequence_data_parallel,
      .dropout_seed = derive_seed(uint64_t(distributed_.seed), phase_shift, uint64_t(iteration),
                                  uint64_t(global_index)),
      .losses = &losses};
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

  const int splits = sequence_layout_.cuts() ? sequence_layout_.splits : 1;
  const int64_t step_inputs = int64_t(micro_batches.size()) * splits;
  for (int group = 0; group < depth_first; ++group) {
    // The group's inputs: breadth-first slot b's splits at [b * splits, (b + 1) * splits).
    std::vector<layers::MicroBatch> group_inputs =
        inputs(micro_batches.subspan(size_t(group * breadth_first), size_t(breadth_first)), group * breadth_first);
    std::vector<layers::LayerContext> contexts;
    contexts.reserve(group_inputs.size());
    for (const layers::MicroBatch& input : group_inputs)
      contexts.push_back(make_context(input, Phase::training, iteration, loss_gradient_scale, loss_scale,
                                      int64_t(micro_batches.size()), losses));
    // (input) activation between stages: the embeddings ignore their input, the head returns nothing.
    std::vector<Tensor> activations(group_inputs.size());
    for (size_t stage = 0; stage < stages.size(); ++stage) {
      multi_stage_.before_forward(stage, stream_, /*training=*/true);
      for (size_t input = 0; input < group_inputs.size(); ++input)
        for (layers::Layer* layer : stages[stage]->layers()) {
          activations[input] = layer->forward(contexts[input], activations[input]);
          log_layer_tensor(*layer, activations[input], /*forward=*/true, group_inputs[input].index, step_inputs);
        }
    }
    // The head ignores grad_output (it computed the gradient of its input in forward). A micro-batch's splits in
    // reverse: attention adds the key gradients of a split into those of the splits before it.
    std::vector<Tensor> gradients(group_inputs.size());
    for (size_t stage = stages.size(); stage-- > 0;) {
      multi_stage_.before_backward(stage, stream_);
      for (int slot = 0; slot < breadth_first; ++slot)
        for (int split = splits; split-- > 0;) {
          const size_t input = size_t(slot * splits + split);
          for (auto layer = stages[stage]->layers().rbegin(); layer != stages[stage]->layers().rend(); ++layer) {
            gradients[input] = (*layer)->backward(contexts[input], gradients[input]);
            log_layer_tensor(**layer, gradients[input], /*forward=*/false, group_inputs[input].index, step_inputs);
          }
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
  std::vector<layers::MicroBatch> all_inputs = inputs(micro_batches, 0);
  std::vector<layers::LayerContext> contexts;
  contexts.reserve(all_inputs.size());
  for (const layers::MicroBatch& input : all_inputs)
    contexts.push_back(
        make_context(input, Phase::validation, iteration, 1.0, 1.0, int64_t(micro_batches.size()), losses));
  std::vector<Tensor> activations(all_inputs.size());
  const auto& stages = multi_stage_.stages();
  for (size_t stage = 0; stage < stages.size(); ++stage) {
    multi_stage_.before_forward(stage, stream_, /*training=*/false);
    for (size_t index = 0; index < all_inputs.size(); ++index)
      for (layers::Layer* layer : stages[stage]->layers()) {
        activations[index] = layer->forward(contexts[index], activations[index]);
        log_layer_tensor(*layer, activations[index], /*forward=*/true, int64_t(index), int64_t(all_inputs.size()));
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
  // The ranks of a sequence-data group share the micro-batches: each is counted its share (the group's average).
  return total / double(distributed_.sequence_data_parallel);
}

}  // namespace fast_llm::engine
