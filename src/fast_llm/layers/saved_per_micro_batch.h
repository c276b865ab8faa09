// What a layer keeps from its forward for its backward, per micro-batch: several micro-batches may be in flight before
// their backward (breadth-first schedules), so the state is keyed by the micro-batch's index (context.batch.index).
// Backward takes its state out, so the memory goes with the backward that reads it last. Nothing is kept outside
// training (validation forwards).
#pragma once

#include <cstdint>
#include <map>
#include <string_view>
#include <utility>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/context.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::layers {

template <class Saved>
class SavedPerMicroBatch {
 public:
  // Keeps `saved` for `micro_batch`, replacing what a forward of it left without a backward.
  void put(int64_t micro_batch, Saved saved) { saved_.insert_or_assign(micro_batch, std::move(saved)); }

  // Runs `forward(Saved*)`: in training with a Saved it fills, kept for the context's micro-batch; otherwise with null.
  template <class Forward>
  Tensor keep(const LayerContext& context, Forward&& forward) {
    if (!context.training) return forward(nullptr);
    Saved saved;
    Tensor output = forward(&saved);
    put(context.batch.index, std::move(saved));
    return output;
  }

  // Removes and returns the state of `micro_batch`; `owner` (the layer's name) is in the error when there is none.
  Saved take(int64_t micro_batch, std::string_view owner) {
    auto found = saved_.find(micro_batch);
    FLM_ASSERT(found != saved_.end(), "{}: backward of micro-batch {} without its forward", owner, micro_batch);
    Saved saved = std::move(found->second);
    saved_.erase(found);
    return saved;
  }

 private:
  std::map<int64_t, Saved> saved_;
};

}  // namespace fast_llm::layers
