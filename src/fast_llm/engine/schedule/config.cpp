// Field list of the schedule config.
#include "fast_llm/engine/schedule/config.h"

namespace fast_llm::engine {

using config::Hint;
using config::Visitor;
namespace check = config::check;

void ScheduleConfig::visit(Visitor& v) {
  v(depth_first_micro_batches, "depth_first_micro_batches",
    "Micro-batches per step that each go through every stage, forward and backward, before the next starts "
    "(gradient accumulation).",
    Hint::core, check::gt(0));
  v(breadth_first_micro_batches, "breadth_first_micro_batches",
    "Micro-batches per step interleaved stage by stage (fills the pipeline).", Hint::core, check::gt(0));
  v(micro_batch_splits, "micro_batch_splits",
    "Cut each micro-batch along the sequence into this many pieces run in order.", Hint::performance, check::gt(0));
  v(pipeline_overlap, "pipeline_overlap",
    "Overlap pipeline-parallel communication with compute (receives are posted as early as the schedule's order "
    "allows; posting them later could make two ranks wait for each other, so this cannot be turned off).",
    Hint::testing, config::not_supported_yet(true, "pipeline communication without overlap"));
  v(data_overlap, "data_overlap", "Overlap data-parallel communication with compute.", Hint::testing);
  v(throttle_cpu, "throttle_cpu",
    "Keep the host from queueing work too far ahead of the device, which limits memory fragmentation.",
    Hint::expert);
  v(throttle_cpu_rate, "throttle_cpu_rate", "Schedule steps between two throttles.", Hint::expert, check::gt(0));
  v(throttle_cpu_delay, "throttle_cpu_delay", "Wait for the event recorded this many steps earlier when throttling.",
    Hint::expert, check::ge(0));
  v(debug_schedule, "debug_schedule", "Log the whole schedule: each rank's steps, in order.", Hint::logging);
  v(debug_send_recv, "debug_send_recv", "Log the pipeline-parallel sends and receives.", Hint::logging);
  v(profile_schedule, "profile_schedule", "Log host and device times of every schedule step.", Hint::logging,
    config::not_supported_yet(false, "schedule profiling"));
  v(skip_step, "skip_step", "Run forward and backward but skip the weight update (testing).", Hint::testing,
    config::not_supported_yet(false, "skipping the weight update"));
  v(cuda_graphs, "cuda_graphs",
    "Capture the training step (forward, backward and optimizer) in a CUDA graph and replay it while the batches' "
    "shapes repeat (same tokens and document boundaries per micro-batch, same label count), which removes the gaps "
    "between kernel launches. Needs a CUDA device; a run with dropout, dynamic fp16 loss scaling or several processes "
    "stays eager (logged), as do the first step and profiled steps.",
    Hint::performance);
}

}  // namespace fast_llm::engine
