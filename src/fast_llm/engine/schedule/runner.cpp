// Executing the step list: layers, the multi-stage's hooks, and the pipeline's sends and receives; the pieces of
// micro-batches cut along the sequence.
#include "fast_llm/engine/schedule/runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>
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
                       .sequence_data = sequence_data},
      training_schedule_(multi_stage.stages().size(), schedule.depth_first_micro_batches,
                         schedule.breadth_first_micro_batches, schedule.micro_batch_splits,
                         multi_stage.settings().pipeline_parallel, /*training=*/true) {
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
  if (schedule.debug_schedule)
    log_info("Schedule of pipeline rank {} (F/B stage.micro-batch): {}", multi_stage.settings().pipeline_rank,
             training_schedule_.describe(multi_stage.settings().pipeline_rank));
}

std::vector<layers::MicroBatch> ScheduleRunner::inputs(std::span<layers::MicroBatch> micro_batches) const {
  std::vector<layers::MicroBatch> result;
  for (size_t index = 0; index < micro_batches.size(); ++index) {
    layers::MicroBatch& batch = micro_batches[index];
    batch.index = int64_t(index);
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
      .micro_batches_in_step = micro_batches * sequence_layout_.splits * distributed_.batch_data_parallel() *
                               distributed_.sequence_data_parallel,
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
  const std::vector<layers::MicroBatch> step_inputs = inputs(micro_batches);
  std::vector<layers::LayerContext> contexts;
  contexts.reserve(step_inputs.size());
  for (const layers::MicroBatch& input : step_inputs)
    contexts.push_back(make_context(input, Phase::training, iteration, loss_gradient_scale, loss_scale,
                                    int64_t(micro_batches.size()), losses));
  run_steps(training_schedule_, contexts, /*training=*/true);
  multi_stage_.finish_gradients(stream_);
}

void ScheduleRunner::run_forward(std::span<layers::MicroBatch> micro_batches, int64_t iteration,
                                 layers::LossSums& losses) {
  const std::vector<layers::MicroBatch> all_inputs = inputs(micro_batches);
  std::vector<layers::LayerContext> contexts;
  contexts.reserve(all_inputs.size());
  for (const layers::MicroBatch& input : all_inputs)
    contexts.push_back(
        make_context(input, Phase::validation, iteration, 1.0, 1.0, int64_t(micro_batches.size()), losses));
  // Stage by stage over all the micro-batches (one breadth-first group), so that a stage whose weights are gathered at
  // use (ZeRO-3) is gathered once.
  if (!forward_schedule_ || forward_schedule_->micro_batches() != int(micro_batches.size()))
    forward_schedule_.emplace(multi_stage_.stages().size(), 1, int(micro_batches.size()), schedule_.micro_batch_splits,
                              multi_stage_.settings().pipeline_parallel, /*training=*/false);
  run_steps(*forward_schedule_, contexts, /*training=*/false);
}

void ScheduleRunner::run_steps(const Schedule& schedule, std::vector<layers::LayerContext>& contexts, bool training) {
  const int pipeline_rank = multi_stage_.settings().pipeline_rank;
  const std::vector<const ScheduleStep*> steps = schedule.steps_of(pipeline_rank);
  const auto& stages = multi_stage_.stages();
  const int depth_first = training ? schedule_.depth_first_micro_batches : 1;
  const int64_t count = int64_t(contexts.size());
  FLM_ASSERT(count == int64_t(schedule.micro_batches()) * schedule.splits(),
             "schedule: {} inputs for {} micro-batches of {} splits", count, schedule.micro_batches(),
             schedule.splits());
  // Split j of micro-batch m is input m * splits + j.
  auto input_of = [&](const ScheduleStep& step) {
    return size_t(step.micro_batch) * size_t(schedule.splits()) + size_t(step.split);
  };
  const std::vector<const ScheduleStep*> receiving = Schedule::receives_in_message_order(steps);
  size_t next_receive = 0;
  std::map<size_t, Message> received;  // by the position of the step that takes it
  std::vector<Message> sent;
  // Posts the receives of the messages produced before `position`: this rank has issued all it sends before them.
  auto post_receives = [&](size_t position) {
    for (; next_receive < receiving.size() && receiving[next_receive]->producer_position < position; ++next_receive) {
      const ScheduleStep& step = *receiving[next_receive];
      received[step.position] = post_receive(step, contexts[input_of(step)].batch);
    }
  };
  // The outputs of steps whose next stage runs on this rank too, by (direction, stage that takes it, micro-batch,
  // split).
  std::map<std::tuple<StepType, size_t, int, int>, Tensor> local;

  for (size_t index = 0; index < steps.size(); ++index) {
    const ScheduleStep& step = *steps[index];
    const bool forward = step.type == StepType::forward;
    const size_t input_index = input_of(step);
    layers::LayerContext& context = contexts[input_index];
    const Stage& stage = *stages[step.stage];
    post_receives(step.position);
    Tensor input;
    if (step.receive_from >= 0) {
      Message& message = received.at(step.position);
      message.work->wait(stream_);
      input = std::move(message.tensor);
      received.erase(step.position);
    } else if (auto found = local.find({step.type, step.stage, step.micro_batch, step.split}); found != local.end()) {
      input = std::move(found->second);
      local.erase(found);
    }
    if (step.first_of_stage && forward) multi_stage_.before_forward(step.stage, stream_, training);
    if (step.first_of_stage && !forward) multi_stage_.before_backward(step.stage, stream_);
    // The head ignores grad_output (it computed the gradient of its input in forward); the embeddings ignore their
    // input and return no input gradient.
    if (forward) {
      for (layers::Layer* layer : stage.layers()) {
        input = layer->forward(context, input);
        log_layer_tensor(*layer, input, /*forward=*/true, int64_t(input_index), count);
      }
    } else {
      for (auto layer = stage.layers().rbegin(); layer != stage.layers().rend(); ++layer) {
        input = (*layer)->backward(context, input);
        log_layer_tensor(**layer, input, /*forward=*/false, int64_t(input_index), count);
      }
    }
    if (!forward && step.last_of_stage)
      multi_stage_.after_backward(step.stage, step.depth_first_group == 0, step.depth_first_group + 1 == depth_first,
                                  stream_);
    const bool has_output = forward ? step.stage + 1 < stages.size() : step.stage > 0;
    if (step.send_to >= 0)
      sent.push_back(send(step, input));
    else if (has_output)
      local[{step.type, forward ? step.stage + 1 : step.stage - 1, step.micro_batch, step.split}] = std::move(input);
    post_receives(index + 1 < steps.size() ? steps[index + 1]->position : schedule.steps().size());
  }
  FLM_ASSERT(received.empty() && next_receive == receiving.size(), "schedule: {} receives left unused",
             received.size());
  for (Message& message : sent) message.work->wait(stream_);
}

ScheduleRunner::Message ScheduleRunner::send(const ScheduleStep& step, const Tensor& tensor) {
  distributed::Communicator* pipeline = multi_stage_.pipeline_group();
  FLM_ASSERT(pipeline && tensor.defined() && tensor.is_contiguous(),
             "schedule: stage {} has no contiguous output to send to pipeline rank {}", step.stage, step.send_to);
  // The activations leaving stage s (forward) and their gradients coming back (backward) have one shape per boundary.
  const size_t boundary = step.type == StepType::forward ? step.stage : step.stage - 1;
  Message header;
  if (auto known = boundary_shapes_.find(boundary); known == boundary_shapes_.end()) {
    FLM_ASSERT(step.type == StepType::forward, "schedule: a gradient sent before its activation's shape");
    boundary_shapes_[boundary] = tensor.shape();
    Tensor host = Tensor::empty(Shape{kMaxTensorRank + 1}, DType::int64);
    int64_t* values = host.data_as<int64_t>();
    std::fill_n(values, kMaxTensorRank + 1, 0);
    values[0] = tensor.rank();
    for (int dim = 0; dim < tensor.rank(); ++dim) values[dim + 1] = tensor.shape()[dim];
    header.tensor = host.to(multi_stage_.device(), stream_);
    header.work = pipeline->send(header.tensor, step.send_to, stream_);
    // Waited for at once: a header is sent once per boundary and run.
    header.work->wait(stream_);
  } else {
    FLM_CHECK(known->second == tensor.shape() && tensor.dtype() == distributed_.compute_dtype, "schedule",
              "pipeline parallelism needs every micro-batch's activations between stages {} and {} to have one shape "
              "({}), got {}",
              boundary, boundary + 1, known->second.str(), tensor.shape().str());
  }
  if (schedule_.debug_send_recv)
    log_info("Pipeline: {} of stage {}, micro-batch {} split {}: send {} to pipeline rank {}",
             step.type == StepType::forward ? "forward" : "backward", step.stage, step.micro_batch, step.split,
             tensor.shape().str(), step.send_to);
  return {.work = pipeline->send(tensor, step.send_to, stream_), .tensor = tensor};
}

ScheduleRunner::Message ScheduleRunner::post_receive(const ScheduleStep& step, const layers::MicroBatch& batch) {
  distributed::Communicator* pipeline = multi_stage_.pipeline_group();
  FLM_ASSERT(pipeline != nullptr, "schedule: a receive without a pipeline group");
  const size_t boundary = step.type == StepType::forward ? step.stage - 1 : step.stage;
  if (!boundary_shapes_.contains(boundary)) {
    FLM_ASSERT(step.type == StepType::forward, "schedule: a gradient received before its activation's shape");
    Tensor header = Tensor::empty(Shape{kMaxTensorRank + 1}, DType::int64, multi_stage_.device(), stream_);
    pipeline->recv(header, step.receive_from, stream_)->wait(stream_);
    const Tensor host = header.to(Device::cpu(), stream_);
    const int64_t* values = host.data_as<int64_t>();
    Shape shape;
    for (int64_t dim = 0; dim < values[0]; ++dim) shape.push_back(values[dim + 1]);
    // With sequence-tensor parallelism the activations between stages are this tensor rank's sequence shard (the
    // pipeline group links the ranks of one tensor rank).
    const int64_t sequence_split = distributed_.sequence_tensor_parallel ? distributed_.tensor_parallel : 1;
    FLM_CHECK(shape.rank() > 0 && shape[0] * sequence_split == batch.num_tokens(), "schedule",
              "pipeline rank {} sends activations of shape {} for micro-batches of {} tokens{}", step.receive_from,
              shape.str(), batch.num_tokens(),
              sequence_split > 1 ? fmt::format(" split over {} sequence-tensor ranks", sequence_split) : "");
    boundary_shapes_[boundary] = shape;
  }
  Message message{.tensor = Tensor::empty(boundary_shapes_.at(boundary), distributed_.compute_dtype,
                                          multi_stage_.device(), stream_)};
  message.work = pipeline->recv(message.tensor, step.receive_from, stream_);
  if (schedule_.debug_send_recv)
    log_info("Pipeline: {} of stage {}, micro-batch {} split {}: receive {} from pipeline rank {} (posted)",
             step.type == StepType::forward ? "forward" : "backward", step.stage, step.micro_batch, step.split,
             message.tensor.shape().str(), step.receive_from);
  return message;
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
  return total / double(multi_stage_.settings().pipeline_parallel) / double(distributed_.sequence_data_parallel);
}

}  // namespace fast_llm::engine
