// Upcycling: a dense model's Hugging Face checkpoint as the start of a mixture of experts, through `pretrained`.
//
// A run whose MLP is `type: moe` loading (`pretrained: {format: llama | mistral | qwen2 | auto, path}`) a checkpoint
// whose MLP is dense gets every expert (shared ones included) as a copy of the dense MLP: layer_1 and layer_2 are the
// dense ones repeated `experts` times along their rows. The router, which the checkpoint does not have, gets the
// run's configured initialization of `router.weight` (N(0, hidden_size^-0.5) unless configured; a `fill` of 0 gives a
// zero router), drawn from the parameter's own stream under the default seed, so it is the router a fresh model with
// that seed has. Because every expert is the same function and the top-k softmax scores of `routing: aux_loss` sum to
// one, the upcycled model computes what the dense model computes, whatever the router (with shared experts, or with
// sinkhorn's scores, it does not). This is the dense-to-MoE step that Fast-LLM's tools/moe_add_experts.py leaves out
// (that tool adds experts to a model that already has them, copying existing experts and router rows).
//
// Everything but the MLP must be the checkpoint's model, and the MoE's MLP must match the dense one
// (intermediate_size, gated, activation, no biases): errors name the fields. The run's config replaces the
// checkpoint's MLP section when its `type` differs, so the run spells out intermediate_size, gated, activation and
// add_linear_biases (docs/moe.md).
#pragma once

#include <memory>

#include "fast_llm/engine/checkpoint/state.h"
#include "fast_llm/models/gpt/config.h"

namespace fast_llm::models::gpt {

// Whether loading the weights of `checkpoint` (the model a checkpoint holds) into `model` upcycles them: `model`'s MLP
// is a mixture of experts, `checkpoint`'s a dense MLP.
bool is_upcycling(const GPTBaseModelConfig& checkpoint, const GPTBaseModelConfig& model);

// The weights (`P/weights`) of `model` from those of the dense `checkpoint` model, computed when loaded (one
// parameter at a time). Errors when the two models differ in more than the MLP's type and experts.
std::shared_ptr<engine::TensorSource> upcycle_weights(std::shared_ptr<const engine::TensorSource> dense,
                                                      const GPTBaseModelConfig& checkpoint,
                                                      const GPTBaseModelConfig& model);

}  // namespace fast_llm::models::gpt
