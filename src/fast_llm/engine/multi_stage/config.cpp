// Field list of the multi-stage config.
#include "fast_llm/engine/multi_stage/config.h"

#include <fmt/format.h>

namespace fast_llm::engine {

using config::Hint;
using config::Visitor;
namespace check = config::check;

void MultiStageConfig::visit(Visitor& v) {
  v(full_precision_gradients, "full_precision_gradients",
    "Accumulate and reduce gradients in fp32 rather than the compute data type.", Hint::optional);
  v(store_frozen_weights_in_optimization_precision, "store_frozen_weights_in_optimization_precision",
    "Keep frozen weights in the optimization data type too, so saved checkpoints keep their precision; false keeps "
    "only their compute-dtype copy (less memory, e.g. for LoRA).",
    Hint::optional);
  static constexpr std::string_view debug_logs = "debug tensor logs";
  v(debug_layer_outputs, "debug_layer_outputs", "Log each layer's output (the value is the detail level).",
    Hint::logging, check::ge(0));
  v(debug_layer_gradients, "debug_layer_gradients", "Log each layer's input gradient (the value is the detail level).",
    Hint::logging, check::ge(0));
  v(debug_param_init, "debug_param_init", "Log the parameters after initialization.", Hint::logging, check::ge(0),
    config::not_supported_yet(0, debug_logs));
  v(debug_param_gradients, "debug_param_gradients", "Log the gradient shards after reduction.", Hint::logging,
    check::ge(0), config::not_supported_yet(0, debug_logs));
  v(debug_all_param_gradients, "debug_all_param_gradients", "Log every parameter's gradient after reduction.",
    Hint::logging, check::ge(0), config::not_supported_yet(0, debug_logs));
  v(debug_param_update, "debug_param_update", "Log the parameters after each update.", Hint::logging, check::ge(0),
    config::not_supported_yet(0, debug_logs));
  v(debug_global_tensors, "debug_global_tensors", "Gather whole tensors across ranks for the debug logs.",
    Hint::logging);
  v(debug_activation_memory, "debug_activation_memory", "Log memory use after each layer.", Hint::logging,
    config::not_supported_yet(false, "per-layer memory logs"));
  v(debug_tensor_parallel, "debug_tensor_parallel", "Check tensor-parallel ranks for desyncs (slow).", Hint::logging);
  v(layers_per_stage, "layers_per_stage", "Layers in each stage (may be fractional).", Hint::performance,
    check::gt(0.0));
  v(stages_per_pipeline_stage, "stages_per_pipeline_stage", "Stages on each pipeline rank; only 1 is supported.",
    Hint::wip, [](const int& value) -> std::optional<std::string> {
      if (value == 1) return std::nullopt;
      return fmt::format("must be 1, got {}", value);
    });
  v(num_weight_buffers, "num_weight_buffers",
    "Full weight buffers the stages share when weights are sharded (ZeRO-3); normally set by zero_stage 3.",
    Hint::expert, check::ge(1));
  v(num_grad_buffers, "num_grad_buffers", "Full gradient buffers the stages share when gradients are sharded (ZeRO-2); normally set by zero_stage.", Hint::expert,
    check::ge(1));
  v(zero_stage, "zero_stage",
    "ZeRO stage: 1 shards the optimizer state, 2 also the gradients, 3 also the weights. Unset: 1.",
    Hint::performance, check::in_range(1, 3));
  v(pipeline_delay, "pipeline_delay", "Estimated pipeline round-trip delay in steps (unused, as in Fast-LLM).",
    Hint::expert, check::ge(0.0));
}

void MultiStageConfig::derive() {
  // An out-of-range zero_stage is reported by its check.
  if (zero_stage && *zero_stage >= 2 && *zero_stage <= 3) num_grad_buffers = 2;
  if (zero_stage && *zero_stage == 3) num_weight_buffers = 2;
}

}  // namespace fast_llm::engine
