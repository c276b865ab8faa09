// Training steps replayed from CUDA graphs (`schedule.cuda_graphs`): a step's forward, backward and optimizer update
// are ~1500-3000 kernel launches with gaps between them; captured once in a graph, they go out with one launch.
//
// Each step, StepGraphPolicy (step_graph_policy.h) decides from the step's key:
//   eager   the step is queued as usual, on the micro-batches as uploaded (the first step always: kernels tune and
//           create their lazy state then, which a capture could not record; profiled steps too, as the profiler times
//           each kernel with events);
//   capture the new graph gets its own device buffers for the step's inputs (tokens, labels, positions and cu_seqlens
//           of each micro-batch; ordinary allocations, made before the capture), the uploaded micro-batches are copied
//           into them, and the step is queued on those buffers while the stream is captured (its allocations come from
//           the allocator's graph pool, tensor/graph.h); then the graph is launched, which runs this step;
//   replay  the uploaded micro-batches are copied into the graph's input buffers (device to device, on the stream,
//           outside the graph) and the graph is launched.
// Graphs are replayed one after another on one stream and never read each other's intermediate data, so they share
// the allocator's one graph pool. The loss sums a graphed step adds into belong to its graph (their addresses are
// baked in); the caller copies them aside after each launch (StepRecords::record, outside the graph, as its
// destination row changes every step), before the next launch of the same graph overwrites them in stream order.
//
// A capture that fails (something queued during it is not allowed in a capture) has run nothing: it is abandoned, the
// reason logged as a warning, graphs are off for the rest of the run, and the step runs eagerly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>

#include "fast_llm/core/device.h"
#include "fast_llm/engine/training/step_graph_policy.h"
#include "fast_llm/layers/context.h"
#include "fast_llm/tensor/stream.h"

namespace fast_llm::engine {

class GraphedTrainingStep {
 public:
  // Queues the device work of one training step on `micro_batches`, adding the losses into `losses` (cleared first):
  // the schedule runner and the optimizer's queue_update. It must not wait on the host.
  using QueueStep = std::function<void(std::span<layers::MicroBatch> micro_batches, layers::LossSums& losses)>;

  struct Counts {
    int64_t eager_steps = 0;      // steps queued without a graph
    int64_t captures = 0;         // graphs captured (each launched at once for the step that captured it)
    int64_t replays = 0;          // steps run by launching a graph captured at an earlier step
    int64_t failed_captures = 0;  // at most 1: a failure turns graphs off
  };

  static constexpr size_t kDefaultCapacity = 4;

  // `stream`: the compute stream every step is queued on. `device` must be a CUDA device.
  GraphedTrainingStep(Device device, Stream stream, size_t capacity = kDefaultCapacity);
  ~GraphedTrainingStep();
  GraphedTrainingStep(const GraphedTrainingStep&) = delete;
  GraphedTrainingStep& operator=(const GraphedTrainingStep&) = delete;

  // Queues one step on `micro_batches` (as uploaded; `key` is theirs, step_graph_key). `eager_only`: run this step
  // eagerly whatever its key. Returns the step's loss sums, valid until the next call.
  const layers::LossSums& run(std::span<layers::MicroBatch> micro_batches, const StepGraphKey& key, bool eager_only,
                              const QueueStep& queue_step);

  const Counts& counts() const { return counts_; }
  // False once a capture failed.
  bool enabled() const { return enabled_; }

 private:
  struct Captured;

  const layers::LossSums& run_eagerly(std::span<layers::MicroBatch> micro_batches, const QueueStep& queue_step);
  const layers::LossSums& capture(uint64_t id, std::span<layers::MicroBatch> micro_batches,
                                  const QueueStep& queue_step);
  const layers::LossSums& replay(Captured& captured, std::span<const layers::MicroBatch> micro_batches);

  Device device_;
  Stream stream_;
  StepGraphPolicy policy_;
  std::unordered_map<uint64_t, std::unique_ptr<Captured>> graphs_;
  layers::LossSums eager_losses_;
  Counts counts_;
  bool enabled_ = true;
};

}  // namespace fast_llm::engine
