// Eligibility, keys and the capture / replay policy of graphed training steps.
#include "fast_llm/engine/training/step_graph_policy.h"

#include <fmt/format.h>

#include <algorithm>

#include "fast_llm/core/error.h"

namespace fast_llm::engine {

std::optional<std::string> cuda_graphs_refusal(const GraphedRunFacts& facts) {
  if (!facts.cuda) return "the run is not on a CUDA device";
  if (facts.world_size != 1)
    return fmt::format("the run has {} processes (graphs are built for one process, without collectives)",
                       facts.world_size);
  if (facts.dropout) return "the model uses dropout (its masks come from a seed the host derives every step)";
  if (facts.dynamic_loss_scaling)
    return "dynamic fp16 loss scaling reads each step's outcome on the host and changes the loss scale";
  if (facts.tensor_logs)
    return "model.multi_stage.debug_layer_outputs / debug_layer_gradients read every layer's tensors on the host";
  if (facts.host_reads)
    return "a layer reads device values on the host during the step (the mixture of experts' per-expert row counts)";
  // A graph replays the addresses of its capture; the reference models' outputs are new tensors every step.
  if (facts.prepared_inputs) return "reference models add new inputs to every step (their logits and activations)";
  // The pieces' document boundaries are uploaded from the host every step.
  if (facts.sequence_pieces) return "schedule.micro_batch_splits cuts every step's micro-batches on the host";
  return std::nullopt;
}

int64_t StepGraphKey::max_tokens() const {
  int64_t tokens = 0;
  for (const MicroBatchShape& shape : micro_batches) tokens = std::max(tokens, shape.tokens);
  return tokens;
}

StepGraphKey step_graph_key(std::span<const std::shared_ptr<const data::Batch>> batches, int64_t num_labels,
                            double loss_scale, std::vector<const void*> state_addresses) {
  StepGraphKey key{.micro_batches = {},
                   .num_labels = num_labels,
                   .loss_scale = loss_scale,
                   .state_addresses = std::move(state_addresses)};
  key.micro_batches.reserve(batches.size());
  for (const auto& batch : batches)
    key.micro_batches.push_back(MicroBatchShape{.tokens = batch->micro_batch_size, .cu_seqlens = batch->cu_seqlens});
  return key;
}

StepGraphPolicy::StepGraphPolicy(size_t capacity) : capacity_(capacity) {
  FLM_CHECK(capacity >= 1, "training", "the CUDA graph cache needs room for at least one graph, got {}", capacity);
}

StepGraphDecision StepGraphPolicy::decide(const StepGraphKey& key, bool eager_only) {
  StepGraphDecision decision;
  if (key.max_tokens() > max_tokens_) {
    decision.dropped = clear();
    max_tokens_ = key.max_tokens();
  }
  const bool repeated = previous_.has_value() && *previous_ == key;
  previous_ = key;
  if (eager_only) return decision;
  auto found = std::find_if(graphs_.begin(), graphs_.end(), [&](const Entry& entry) { return entry.key == key; });
  if (found != graphs_.end()) {
    graphs_.splice(graphs_.begin(), graphs_, found);
    decision.action = StepGraphAction::replay;
    decision.graph = graphs_.front().id;
    return decision;
  }
  if (!repeated) return decision;
  if (graphs_.size() == capacity_) {
    decision.dropped.push_back(graphs_.back().id);
    graphs_.pop_back();
  }
  graphs_.push_front(Entry{.key = key, .id = next_id_++});
  decision.action = StepGraphAction::capture;
  decision.graph = graphs_.front().id;
  return decision;
}

std::vector<uint64_t> StepGraphPolicy::clear() {
  std::vector<uint64_t> ids;
  for (const Entry& entry : graphs_) ids.push_back(entry.id);
  graphs_.clear();
  return ids;
}

}  // namespace fast_llm::engine
