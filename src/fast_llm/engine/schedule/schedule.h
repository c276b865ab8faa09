// The order of one step's work as an explicit list (Fast-LLM's breadth-first schedule, reference/fast-llm.md §6.3),
// built once from the schedule config and the stage layout, the same list for every rank of a pipeline.
//
// For each depth-first group of micro-batches: the forward of stage 0 on every breadth-first micro-batch (and split),
// then stage 1, ... to the last stage; then the backward of the last stage on every micro-batch, ... down to stage 0.
// Micro-batch d * breadth_first + b is breadth-first slot b of depth-first group d; within its slot, a micro-batch's
// splits (micro_batch_splits: pieces along the sequence) run in order in forward and in reverse in backward (a later
// split's attention adds into the key gradients of the earlier ones). Each (stage, micro-batch, split, direction) is
// one step, with its own messages. Stage s runs on pipeline rank s % pipeline_parallel (Fast-LLM's placement); a step
// whose input comes from a stage on another rank receives it from that rank (the previous stage's output in forward,
// the next stage's input gradient in backward), and a step whose output goes to another rank sends it there. Each rank
// runs its own steps in the list's order, which is one order for all ranks, so every message is sent and received at
// the same place of both ranks' sequences: that is why no rank can wait for a message its peer only sends after
// waiting for one from it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "fast_llm/engine/multi_stage/stage.h"

namespace fast_llm::engine {

enum class StepType { forward, backward };

struct ScheduleStep {
  size_t stage = 0;
  int micro_batch = 0;        // index in the step: depth_first_group * breadth_first + breadth_first_slot
  int depth_first_group = 0;
  int split = 0;              // piece of the micro-batch along the sequence (micro_batch_splits), 0 .. splits - 1
  StepType type = StepType::forward;
  int pipeline_rank = 0;      // the rank that runs it
  // The pipeline rank the step's input comes from, and the one its output goes to; -1 when that is this rank (or
  // there is no input or output: the first stage's forward input, the last stage's forward output, ...).
  int receive_from = -1;
  int send_to = -1;
  // Position in the whole list (all ranks): where the messages of this step sit in every rank's order.
  size_t position = 0;
  // For a step with receive_from >= 0: the position of the step (on the other rank) that produces its input.
  size_t producer_position = 0;
  // The first / last step of this (depth-first group, stage, direction): where the multi-stage's hooks run.
  bool first_of_stage = false;
  bool last_of_stage = false;
};

class Schedule {
 public:
  // `training` false: forward steps only (validation), every micro-batch of the step in one breadth-first group.
  Schedule(size_t num_stages, int depth_first, int breadth_first, int splits, int pipeline_parallel, bool training);

  const std::vector<ScheduleStep>& steps() const { return steps_; }
  // The steps `pipeline_rank` runs, in order.
  std::vector<const ScheduleStep*> steps_of(int pipeline_rank) const;
  // Of a rank's `steps`, those that receive their input from another rank, in the order of the steps producing that
  // input: the order in which every rank issues its messages (the runner posts its receives in it).
  static std::vector<const ScheduleStep*> receives_in_message_order(const std::vector<const ScheduleStep*>& steps);
  int micro_batches() const { return depth_first_ * breadth_first_; }
  int splits() const { return splits_; }
  // "F0.0 F0.1 ... B1.0": type, stage and micro-batch of each step (and `:split` when splits > 1), for logs and tests.
  std::string describe(int pipeline_rank = -1) const;

 private:
  int depth_first_, breadth_first_, splits_;
  std::vector<ScheduleStep> steps_;
};

}  // namespace fast_llm::engine
