// The breadth-first step list.
#include "fast_llm/engine/schedule/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "fast_llm/core/error.h"

namespace fast_llm::engine {

Schedule::Schedule(size_t num_stages, int depth_first, int breadth_first, int splits, int pipeline_parallel,
                   bool training)
    : depth_first_(training ? depth_first : 1),
      breadth_first_(training ? breadth_first : depth_first * breadth_first),
      splits_(splits) {
  FLM_CHECK(num_stages > 0 && depth_first > 0 && breadth_first > 0 && splits > 0 && pipeline_parallel > 0,
            "schedule", "a schedule of {} stages, {} x {} micro-batches in {} splits on {} pipeline ranks", num_stages,
            depth_first, breadth_first, splits, pipeline_parallel);
  const size_t last = num_stages - 1;
  // The first and last steps of (group, stage, direction): forward from slot 0's split 0 to the last slot's last
  // split; backward from slot 0's last split to the last slot's split 0.
  auto add = [&](size_t stage, int group, int slot, int split, StepType type) {
    const bool forward = type == StepType::forward;
    const int rank = stage_pipeline_rank(stage, pipeline_parallel);
    // Forward input from the previous stage, output to the next; backward the other way round.
    const bool has_input = forward ? stage > 0 : stage < last;
    const bool has_output = forward ? stage < last : stage > 0;
    const size_t input_stage = forward ? stage - 1 : stage + 1, output_stage = forward ? stage + 1 : stage - 1;
    int receive_from = -1, send_to = -1;
    if (has_input && stage_pipeline_rank(input_stage, pipeline_parallel) != rank)
      receive_from = stage_pipeline_rank(input_stage, pipeline_parallel);
    if (has_output && stage_pipeline_rank(output_stage, pipeline_parallel) != rank)
      send_to = stage_pipeline_rank(output_stage, pipeline_parallel);
    steps_.push_back({.stage = stage,
                      .micro_batch = group * breadth_first_ + slot,
                      .depth_first_group = group,
                      .split = split,
                      .type = type,
                      .pipeline_rank = rank,
                      .receive_from = receive_from,
                      .send_to = send_to,
                      .position = steps_.size(),
                      .first_of_stage = slot == 0 && split == (forward ? 0 : splits_ - 1),
                      .last_of_stage = slot + 1 == breadth_first_ && split == (forward ? splits_ - 1 : 0)});
  };
  for (int group = 0; group < depth_first_; ++group) {
    for (size_t stage = 0; stage < num_stages; ++stage)
      for (int slot = 0; slot < breadth_first_; ++slot)
        for (int split = 0; split < splits_; ++split) add(stage, group, slot, split, StepType::forward);
    if (!training) continue;
    for (size_t stage = num_stages; stage-- > 0;)
      for (int slot = 0; slot < breadth_first_; ++slot)
        for (int split = splits_; split-- > 0;) add(stage, group, slot, split, StepType::backward);
  }
  // Where each received input is produced: the same micro-batch and split at the neighbouring stage.
  std::map<std::tuple<size_t, int, int, StepType>, size_t> position;
  for (const ScheduleStep& step : steps_)
    position[{step.stage, step.micro_batch, step.split, step.type}] = step.position;
  for (ScheduleStep& step : steps_) {
    if (step.receive_from < 0) continue;
    const size_t producer = step.type == StepType::forward ? step.stage - 1 : step.stage + 1;
    step.producer_position = position.at({producer, step.micro_batch, step.split, step.type});
  }
}

std::vector<const ScheduleStep*> Schedule::steps_of(int pipeline_rank) const {
  std::vector<const ScheduleStep*> result;
  for (const ScheduleStep& step : steps_)
    if (step.pipeline_rank == pipeline_rank) result.push_back(&step);
  return result;
}

std::vector<const ScheduleStep*> Schedule::receives_in_message_order(const std::vector<const ScheduleStep*>& steps) {
  std::vector<const ScheduleStep*> receiving;
  for (const ScheduleStep* step : steps)
    if (step->receive_from >= 0) receiving.push_back(step);
  std::sort(receiving.begin(), receiving.end(), [](const ScheduleStep* a, const ScheduleStep* b) {
    return a->producer_position < b->producer_position;
  });
  return receiving;
}

std::string Schedule::describe(int pipeline_rank) const {
  std::string text;
  for (const ScheduleStep& step : steps_) {
    if (pipeline_rank >= 0 && step.pipeline_rank != pipeline_rank) continue;
    if (!text.empty()) text += ' ';
    text += fmt::format("{}{}.{}", step.type == StepType::forward ? 'F' : 'B', step.stage, step.micro_batch);
    if (splits_ > 1) text += fmt::format(":{}", step.split);
  }
  return text;
}

}  // namespace fast_llm::engine
