// `train gpt`: builds the GPT model, the data and the trainer from a validated GPTTrainerConfig and runs it. The config
// is read with the pretrained checkpoint's model config under it (engine/checkpoint/loading.h,
// load_config_with_pretrained with gpt_model_type()); the trainer loads and saves checkpoints itself.
#pragma once

#include <cstdint>
#include <functional>

#include "fast_llm/models/gpt/trainer_config.h"

namespace fast_llm::engine {
class Trainer;
}

namespace fast_llm::models::gpt {

class ReferenceModels;

// Applies the kernel selection (and plugins), builds the model and its reference models (reference_models.h), samples
// the data and trains. The config must be
// validated and free of unsupported values (cli::require_supported). `inspect` and `inspect_references`, when given,
// see the trainer and the reference models after the run, before they go (tests read their weights and counters).
void train(const GPTTrainerConfig& config, const std::function<void(engine::Trainer&)>& inspect = {},
           const std::function<void(ReferenceModels&)>& inspect_references = {});

// Bytes one token of a micro-batch takes at the peak of a training step, besides the stages' buffers: what the
// trainer's memory check at start-up counts as activations (engine/training/memory_check.h). The peak is at the start
// of the backward pass, when every layer holds what its backward reads, plus the larger of the head's working memory
// and one block's backward. Per token, in bytes of the compute dtype unless said (h: hidden size):
//   kept by each block:  its input and the residual stream after the mixer (2h), both normalised inputs (2h), query
//                        and attention output (2 x heads x head_size), key and value (2 x head_groups x head_size),
//                        the MLP's first projection (2 x intermediate gated, 1 x otherwise) and activation
//                        (intermediate) unless `recompute_level` drops them; the softmax statistic per head and two
//                        norm statistics (fp32; fp64 in fp64 runs)
//   kept after the blocks: the last block's output (h)
//   working, the larger of: the head (final-norm output and two gradients, 3h, and a chunk of logits,
//                        vocab_size / cross_entropy_splits, two with a distillation or dpo loss) and a block's
//                        backward (the gradients of what it kept, the statistics aside, and at least those of the MLP:
//                        4h, the first projection and the activation, which recomputation brings back)
//   the micro-batch: tokens, labels and positions (3 x 8 bytes) and the rotary tables (2 x head_size fp32).
// A mixture of experts keeps, per token and per slot (shared + top_k experts), the permuted input (h, unless
// recompute_level drops it), the first projection and the activation (as the dense MLP per token), plus its routing
// (the routed logits and the slots' scores fp32, experts and rows int32); its backward works on the gradients of the
// permuted buffers and the scaled activation. hybrid_moe counts both parts.
int64_t activation_bytes_per_token(const GPTTrainerConfig& config);

}  // namespace fast_llm::models::gpt
