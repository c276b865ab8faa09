// When a training step runs from a CUDA graph (`schedule.cuda_graphs`, engine/training/cuda_graph_step.h): whether
// the run qualifies, what identifies a step's graph, and whether a step runs eagerly, is captured or replays a graph.
// Host logic only, so that it is tested without a GPU.
//
// A captured step replays its kernels with the host values they were launched with, so a graph is keyed by all of
// those that can change from step to step: per micro-batch the token count and the document boundaries (cu_seqlens:
// its length is a kernel argument, and the segment lengths and the longest document, which kernels size their grids
// from, follow from it); the step's label count (the loss gradient is scaled by 1 / labels on the host); the loss
// scale; and the addresses of the device state outside the step's own buffers that could move between steps (the
// optimizer's state and rate table). Everything else a step depends on is fixed for the run (configs, parameter
// buffers).
//
// Policy: a step whose key has a graph replays it; a step with the same key as the step just before captures one
// (so a run whose batches change every step, as packed real documents do, never pays for a capture), evicting the
// least recently used graph beyond `capacity`; any other step runs eagerly. Steps that must run eagerly (the first,
// profiled ones) still count as the previous key. A step whose micro-batches hold more tokens than any before drops
// every graph: layers size some device caches by the token count (rotary tables, Linear's column of ones) and grow
// them by replacing the tensor, which frees the memory the older graphs read.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fast_llm/data/batch.h"

namespace fast_llm::engine {

// What decides whether a run may use CUDA graphs.
struct GraphedRunFacts {
  bool cuda = false;
  int world_size = 1;
  bool dropout = false;               // some layer uses dropout (its seed changes every step, on the host)
  bool dynamic_loss_scaling = false;  // the loss scale changes with each step's outcome, read on the host
  bool tensor_logs = false;           // debug_layer_outputs / debug_layer_gradients read every layer's tensors
  bool host_reads = false;            // some layer reads device values on the host (the MoE's expert offsets)
  bool prepared_inputs = false;       // the model type adds per-step inputs (reference models' outputs)
  bool sequence_pieces = false;       // micro-batches run as pieces (schedule.micro_batch_splits), built every step
};

// Why a run cannot replay graphs (for the log line), or nothing when it can.
std::optional<std::string> cuda_graphs_refusal(const GraphedRunFacts& facts);

struct MicroBatchShape {
  int64_t tokens = 0;
  std::vector<int32_t> cu_seqlens;  // segment lengths and max_seqlen are its differences and their largest
  bool operator==(const MicroBatchShape&) const = default;
};

struct StepGraphKey {
  std::vector<MicroBatchShape> micro_batches;
  int64_t num_labels = 0;
  double loss_scale = 1.0;
  std::vector<const void*> state_addresses;
  bool operator==(const StepGraphKey&) const = default;
  // The most tokens in one micro-batch.
  int64_t max_tokens() const;
};

// The key of a step made of `batches` (the host batches of its micro-batches, in order).
StepGraphKey step_graph_key(std::span<const std::shared_ptr<const data::Batch>> batches, int64_t num_labels,
                            double loss_scale, std::vector<const void*> state_addresses);

enum class StepGraphAction { eager, capture, replay };

struct StepGraphDecision {
  StepGraphAction action = StepGraphAction::eager;
  uint64_t graph = 0;            // capture: the id of the new graph; replay: the graph to launch
  std::vector<uint64_t> dropped;  // graphs to destroy first (evicted, or invalidated by more tokens)
};

class StepGraphPolicy {
 public:
  explicit StepGraphPolicy(size_t capacity);

  // The decision for the next step; `eager_only`: this step must run eagerly whatever its key.
  StepGraphDecision decide(const StepGraphKey& key, bool eager_only);
  // Forgets every graph (a capture failed: graphs are off); returns their ids.
  std::vector<uint64_t> clear();
  size_t graphs() const { return graphs_.size(); }

 private:
  struct Entry {
    StepGraphKey key;
    uint64_t id = 0;
  };

  size_t capacity_;
  std::optional<StepGraphKey> previous_;
  std::list<Entry> graphs_;  // most recently used first
  uint64_t next_id_ = 0;
  int64_t max_tokens_ = 0;
};

}  // namespace fast_llm::engine
