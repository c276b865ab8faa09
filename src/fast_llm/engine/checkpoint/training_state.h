// What a checkpoint keeps of the training loop besides the stages' shards (metadata.yaml's `state`): the trainer
// produces it and restores from it, the checkpoint engine stores and reads it. It lives with the checkpoint engine,
// which the training loop uses, so neither depends on the other through it.
#pragma once

#include <cstdint>

#include "fast_llm/engine/optimizer/optimizer.h"

namespace fast_llm::engine {

struct TrainingState {
  int64_t completed_steps = 0;
  OptimizerState optimizer;
};

}  // namespace fast_llm::engine
