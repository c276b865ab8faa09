// Training steps through CUDA graphs: capture, input copies, replay.
#include "fast_llm/engine/training/cuda_graph_step.h"

#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/tensor/graph.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::engine {

// A captured step: the graph and what it reads and writes at fixed addresses besides the model's buffers.
struct GraphedTrainingStep::Captured {
  std::vector<layers::MicroBatch> inputs;  // the graph's input buffers, one micro-batch each, with the host fields
  layers::LossSums losses;
  Graph graph;
};

namespace {

// Device buffers of the same shapes as `batch`'s, ordinary allocations on `stream` (not the graph pool: the graph
// keeps them for its life, and they are written outside it).
layers::MicroBatch input_buffers_like(const layers::MicroBatch& batch, Device device, Stream stream) {
  const auto like = [&](const Tensor& tensor) { return Tensor::empty(tensor.shape(), tensor.dtype(), device, stream); };
  return layers::MicroBatch{.index = batch.index,
                            .tokens = like(batch.tokens),
                            .labels = like(batch.labels),
                            .positions = like(batch.positions),
                            .cu_seqlens = like(batch.cu_seqlens),
                            .max_seqlen = batch.max_seqlen,
                            .sequence_lengths = batch.sequence_lengths};
}

void copy_inputs(std::span<layers::MicroBatch> destination, std::span<const layers::MicroBatch> source,
                 Stream stream) {
  FLM_ASSERT(destination.size() == source.size(), "a graph of {} micro-batches run on {}", destination.size(),
             source.size());
  for (size_t index = 0; index < source.size(); ++index) {
    destination[index].tokens.copy_bytes_from(source[index].tokens, stream);
    destination[index].labels.copy_bytes_from(source[index].labels, stream);
    destination[index].positions.copy_bytes_from(source[index].positions, stream);
    destination[index].cu_seqlens.copy_bytes_from(source[index].cu_seqlens, stream);
  }
}

}  // namespace

GraphedTrainingStep::GraphedTrainingStep(Device device, Stream stream, size_t capacity)
    : device_(device), stream_(stream), policy_(capacity) {
  FLM_CHECK(device.is_cuda(), "training", "CUDA graphs need a CUDA device, got {}", device.str());
}

GraphedTrainingStep::~GraphedTrainingStep() = default;

const layers::LossSums& GraphedTrainingStep::run(std::span<layers::MicroBatch> micro_batches, const StepGraphKey& key,
                                                 bool eager_only, const QueueStep& queue_step) {
  const bool first = counts_.eager_steps + counts_.captures + counts_.replays == 0;
  const StepGraphDecision decision = policy_.decide(key, eager_only || first || !enabled_);
  for (uint64_t id : decision.dropped) graphs_.erase(id);
  switch (decision.action) {
    case StepGraphAction::eager: return run_eagerly(micro_batches, queue_step);
    case StepGraphAction::capture: return capture(decision.graph, micro_batches, queue_step);
    case StepGraphAction::replay: {
      auto found = graphs_.find(decision.graph);
      FLM_ASSERT(found != graphs_.end(), "CUDA graph {} to replay is not kept", decision.graph);
      return replay(*found->second, micro_batches);
    }
  }
  FLM_ASSERT(false, "unknown graph action");
  return eager_losses_;
}

const layers::LossSums& GraphedTrainingStep::run_eagerly(std::span<layers::MicroBatch> micro_batches,
                                                         const QueueStep& queue_step) {
  queue_step(micro_batches, eager_losses_);
  ++counts_.eager_steps;
  return eager_losses_;
}

const layers::LossSums& GraphedTrainingStep::capture(uint64_t id, std::span<layers::MicroBatch> micro_batches,
                                                     const QueueStep& queue_step) {
  auto captured = std::make_unique<Captured>();
  for (const layers::MicroBatch& batch : micro_batches)
    captured->inputs.push_back(input_buffers_like(batch, device_, stream_));
  copy_inputs(captured->inputs, micro_batches, stream_);
  try {
    GraphCapture capture(device_, stream_);
    queue_step(captured->inputs, captured->losses);
    captured->graph = capture.finish();
  } catch (const Error& error) {
    // Recovered here rather than at the command line: nothing of the step ran (a capture only records), so the step
    // can still run eagerly; the layers' state saved during the capture is overwritten by that run's forward.
    log_warning("Capturing the training step in a CUDA graph failed; graphs are off for the rest of the run and this "
                "step runs eagerly: {}",
                error.what());
    enabled_ = false;
    ++counts_.failed_captures;
    for (uint64_t dropped : policy_.clear()) graphs_.erase(dropped);
    return run_eagerly(micro_batches, queue_step);
  }
  captured->graph.launch(stream_);
  ++counts_.captures;
  if (counts_.captures == 1)
    log_main("Captured the training step in a CUDA graph ({} micro-batches); steps with the same shapes replay it",
             micro_batches.size());
  const Captured& kept = *graphs_.emplace(id, std::move(captured)).first->second;
  return kept.losses;
}

const layers::LossSums& GraphedTrainingStep::replay(Captured& captured,
                                                    std::span<const layers::MicroBatch> micro_batches) {
  copy_inputs(captured.inputs, micro_batches, stream_);
  captured.graph.launch(stream_);
  ++counts_.replays;
  return captured.losses;
}

}  // namespace fast_llm::engine
