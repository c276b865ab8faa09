// A walk over one pipeline rank's steps of the schedule, adding up what the runner holds at each (activation_memory.h).
#include "fast_llm/engine/schedule/activation_memory.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "fast_llm/core/error.h"

namespace fast_llm::engine {
namespace {

// A stage's layers added up: what they keep together, the largest working memory of one of them, and the stage's
// output (its last layer's).
struct StageActivations {
  int64_t kept = 0, kept_per_sequence_token = 0, working = 0, backward_per_sequence_token = 0, output = 0;
};

std::vector<StageActivations> stage_activations(const ModelActivations& model, const std::vector<size_t>& sizes) {
  size_t num_layers = 0;
  for (size_t size : sizes) num_layers += size;
  FLM_CHECK(num_layers == model.layers.size(), "memory",
            "the model type describes the activations of {} layers, but the model's stages hold {}",
            model.layers.size(), num_layers);
  std::vector<StageActivations> stages;
  size_t layer = 0;
  for (size_t size : sizes) {
    StageActivations stage;
    for (size_t end = layer + size; layer < end; ++layer) {
      const LayerActivations& activations = model.layers[layer];
      stage.kept += activations.kept;
      stage.kept_per_sequence_token += activations.kept_per_sequence_token;
      stage.working = std::max(stage.working, activations.working);
      stage.backward_per_sequence_token += activations.backward_per_sequence_token;
      stage.output = activations.output;
    }
    stages.push_back(stage);
  }
  return stages;
}

// "stage 2", "stages 0-3", "stages 0, 2, 4": runs of consecutive stages as ranges.
std::string describe_stages(const std::vector<size_t>& stages) {
  if (stages.empty()) return "no stages";
  std::string text;
  for (size_t begin = 0; begin < stages.size();) {
    size_t end = begin + 1;
    while (end < stages.size() && stages[end] == stages[end - 1] + 1) ++end;
    if (!text.empty()) text += ", ";
    text += end - begin > 1 ? fmt::format("{}-{}", stages[begin], stages[end - 1]) : fmt::format("{}", stages[begin]);
    begin = end;
  }
  return fmt::format("{} {}", stages.size() == 1 ? "stage" : "stages", text);
}

}  // namespace

std::string describe_activation_peak(const ActivationPeak& peak, const DistributedConfig& distributed,
                                     int64_t tokens) {
  std::string text = "activations of " + describe_stages(peak.stages);
  if (distributed.pipeline_parallel > 1)
    text += fmt::format(" on pipeline rank {} of {}", distributed.pipeline_rank(), distributed.pipeline_parallel);
  const int micro_batches = std::max(1, peak.micro_batches_in_flight);
  text += fmt::format(", {} micro-batch{} of {} tokens in flight", micro_batches, micro_batches == 1 ? "" : "es",
                      tokens);
  if (peak.piece_tokens != tokens) text += fmt::format(" (pieces of {} tokens)", peak.piece_tokens);
  if (distributed.tensor_parallel > 1)
    text += fmt::format(", tensor rank {} of {}{}", distributed.tensor_rank(), distributed.tensor_parallel,
                        distributed.sequence_tensor_parallel ? " (sequence-tensor parallel)" : "");
  if (distributed.sequence_data_parallel > 1)
    text += fmt::format(", sequence-data rank {} of {}", distributed.sequence_data_rank(),
                        distributed.sequence_data_parallel);
  return text;
}

ActivationPeak activation_peak(const ModelActivations& model, const std::vector<size_t>& stage_sizes,
                               const Schedule& schedule, int pipeline_rank, int64_t tokens,
                               int sequence_data_parallel) {
  const std::vector<StageActivations> stages = stage_activations(model, stage_sizes);
  const int64_t pieces = int64_t(schedule.splits()) * std::max(1, sequence_data_parallel);
  ActivationPeak peak;
  peak.piece_tokens = (tokens + pieces - 1) / pieces;
  const int64_t piece = peak.piece_tokens;
  const std::vector<const ScheduleStep*> steps = schedule.steps_of(pipeline_rank);
  std::set<size_t> run;
  for (const ScheduleStep* step : steps) run.insert(step->stage);
  peak.stages.assign(run.begin(), run.end());
  const bool keeps = std::any_of(schedule.steps().begin(), schedule.steps().end(),
                                 [](const ScheduleStep& step) { return step.type == StepType::backward; });
  // The input of a step: the previous stage's output in forward, the gradient of its own output in backward.
  auto input_bytes = [&](const ScheduleStep& step) {
    const bool forward = step.type == StepType::forward;
    const bool has_input = forward ? step.stage > 0 : step.stage + 1 < stages.size();
    if (!has_input) return int64_t(0);
    return piece * (forward ? stages[step.stage - 1].output : stages[step.stage].output);
  };
  auto output_bytes = [&](const ScheduleStep& step) {
    const bool forward = step.type == StepType::forward;
    const bool has_output = forward ? step.stage + 1 < stages.size() : step.stage > 0;
    if (!has_output) return int64_t(0);
    return piece * (forward ? stages[step.stage].output : stages[step.stage - 1].output);
  };
  // The runner posts a receive once this rank has issued everything before the step producing it.
  const std::vector<const ScheduleStep*> receiving = Schedule::receives_in_message_order(steps);
  size_t next_receive = 0;
  int64_t pending = 0;  // received or passed-on inputs not yet taken by their step
  auto post_receives = [&](size_t position) {
    for (; next_receive < receiving.size() && receiving[next_receive]->producer_position < position; ++next_receive)
      pending += input_bytes(*receiving[next_receive]);
  };

  const int64_t fixed = tokens * (model.micro_batch_bytes_per_token * schedule.micro_batches() +
                                  model.step_bytes_per_token);
  int64_t kept = 0, sent = 0;
  // Pieces kept per (stage, micro-batch), and the micro-batches kept per stage.
  std::map<std::pair<size_t, int>, int64_t> kept_pieces;
  std::map<size_t, std::set<int>> in_flight;
  peak.bytes = fixed;
  for (size_t index = 0; index < steps.size(); ++index) {
    const ScheduleStep& step = *steps[index];
    const StageActivations& stage = stages[step.stage];
    const bool forward = step.type == StepType::forward;
    post_receives(step.position);
    const int64_t input = input_bytes(step);
    // A forward's input is what its first layer keeps (counted there); a backward's incoming gradient is read
    // through the step.
    if (forward) pending -= input;
    int64_t working = piece * stage.working;
    if (forward && keeps) {
      int64_t& count = kept_pieces[{step.stage, step.micro_batch}];
      if (count++ == 0) kept += tokens * stage.kept_per_sequence_token;
      kept += piece * stage.kept;
      in_flight[step.stage].insert(step.micro_batch);
      peak.micro_batches_in_flight = std::max(peak.micro_batches_in_flight, int(in_flight[step.stage].size()));
    }
    if (!forward) working += tokens * stage.backward_per_sequence_token;
    peak.bytes = std::max(peak.bytes, fixed + kept + pending + sent + working);
    if (!forward) {
      pending -= input;
      int64_t& count = kept_pieces[{step.stage, step.micro_batch}];
      kept -= piece * stage.kept;
      if (--count == 0) {
        kept -= tokens * stage.kept_per_sequence_token;
        kept_pieces.erase({step.stage, step.micro_batch});
        in_flight[step.stage].erase(step.micro_batch);
      }
    }
    // Sends are waited for at the end of the step; an output for this rank's next stage waits for it.
    if (step.send_to >= 0)
      sent += output_bytes(step);
    else
      pending += output_bytes(step);
    post_receives(index + 1 < steps.size() ? steps[index + 1]->position : schedule.steps().size());
  }
  return peak;
}

}  // namespace fast_llm::engine
