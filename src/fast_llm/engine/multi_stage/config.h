// How the model is cut into stages and sharded (`model.multi_stage`), as Fast-LLM's MultiStageConfig (and the
// StageConfig fields it inherits).
//
// Each stage owns flat buffers (DESIGN.md §4.2). Over several data-parallel ranks, zero_stage 1 shards the optimizer
// state (always the case), 2 also the gradients (num_grad_buffers = 2 full gradient buffers shared by the stages), 3
// also the weights (num_weight_buffers = 2); the buffer counts are resolved in derive() from zero_stage when it is set
// (multi_stage.h says how the stages use them).
#pragma once

#include <optional>

#include "fast_llm/config/config.h"

namespace fast_llm::engine {

struct MultiStageConfig : config::Config {
  // Stage fields.
  bool full_precision_gradients = true;
  bool store_frozen_weights_in_optimization_precision = true;
  int debug_layer_outputs = 0;
  int debug_layer_gradients = 0;
  int debug_param_init = 0;
  int debug_param_gradients = 0;
  int debug_all_param_gradients = 0;
  int debug_param_update = 0;
  bool debug_global_tensors = true;
  bool debug_activation_memory = false;
  bool debug_tensor_parallel = false;
  // Multi-stage fields.
  double layers_per_stage = 1.0;
  int stages_per_pipeline_stage = 1;
  std::optional<int> num_weight_buffers;
  std::optional<int> num_grad_buffers;
  std::optional<int> zero_stage;
  double pipeline_delay = 0.0;

  void visit(config::Visitor& v) override;

 protected:
  void derive() override;
};

}  // namespace fast_llm::engine
