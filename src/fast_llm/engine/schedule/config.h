// The order micro-batches run in within a step (`schedule`), as Fast-LLM's ScheduleConfig. Gradient accumulation is
// depth_first_micro_batches (each runs forward and backward through all stages before the next);
// breadth_first_micro_batches interleave stage by stage (to fill a pipeline). Samples per step =
// depth_first * breadth_first * batch_data_parallel. `cuda_graphs` replays training steps captured in CUDA graphs
// while the batches' shapes repeat (engine/training/cuda_graph_step.h).
#pragma once

#include "fast_llm/config/config.h"

namespace fast_llm::engine {

struct ScheduleConfig : config::Config {
  int depth_first_micro_batches = 1;
  int breadth_first_micro_batches = 1;
  int micro_batch_splits = 1;
  bool pipeline_overlap = true;
  bool data_overlap = true;
  bool throttle_cpu = true;
  int throttle_cpu_rate = 1;
  int throttle_cpu_delay = 1;
  bool debug_schedule = false;
  bool debug_send_recv = false;
  bool profile_schedule = false;
  bool skip_step = false;
  bool cuda_graphs = false;

  void visit(config::Visitor& v) override;

  // Micro-batches run one after the other on each data-parallel rank.
  int sequential_micro_batches() const { return depth_first_micro_batches * breadth_first_micro_batches; }
  // Inputs the model sees per step on each rank (micro-batches times their splits).
  int num_inputs() const { return sequential_micro_batches() * micro_batch_splits; }
};

}  // namespace fast_llm::engine
