// `train gpt`: builds the GPT model, the data and the trainer from a validated GPTTrainerConfig and runs it. The config
// is read with the pretrained checkpoint's model config under it (engine/checkpoint/loading.h,
// load_config_with_pretrained with gpt_model_type()); the trainer loads and saves checkpoints itself.
#pragma once

#include <cstdint>
#include <functional>

#include "fast_llm/engine/schedule/activation_memory.h"
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

// What each layer of the GPT model (embeddings, blocks, head) keeps and works with on this rank's layout, per token of
// an input of the schedule (a micro-batch, or a piece of one with micro_batch_splits and sequence-data parallelism):
// what the trainer's memory check at start-up counts as activations, walking this rank's steps of the schedule
// (engine/schedule/activation_memory.h). In bytes of the compute dtype unless said (h: hidden size; "/ tp": this
// tensor rank's share; "shard": / tp with sequence_tensor_parallel, whole otherwise):
//   a block keeps:       its input and the residual stream after the mixer, both normalised inputs (4h, shard), query
//                        and attention output (2 x heads x head_size / tp), key and value (2 x head_groups x head_size
//                        / tp; whole with a single head group; cut into pieces, attention keeps them for the whole
//                        sequence instead, per token of the micro-batch), the MLP's first projection (2 x
//                        intermediate / tp gated, 1 x otherwise) and activation (intermediate / tp) unless
//                        `recompute_level` drops them; the softmax statistic per head (/ tp) and two norm statistics
//                        (shard) (fp32; fp64 in fp64 runs);
//   its working memory:  the larger of the gradients of what it keeps (the statistics aside; the 4h whole) and the
//                        MLP's backward (4h, the first projection and the activation, which recomputation brings
//                        back); cut into pieces, a backward also holds the gradient carry of the sequence's keys and
//                        values and the gradients of the rows a piece attended to (2 x the keys and values);
//   its output:          h (shard), what goes to the next stage;
//   the head keeps:      its input and the gradient of its final norm's output (2h: it gathers the sequence) and a
//                        norm statistic; working: the norm's output and a gradient (2h) and a chunk of logits,
//                        vocab_size (/ tp when vocab_parallel) / cross_entropy_splits, two with a distillation or dpo
//                        loss;
//   the embeddings:      keep nothing; working h.
// Besides the layers: each micro-batch's tokens, labels and positions (3 x 8 bytes per token) and the rotary tables
// (2 x head_size fp32 per token, once). A mixture of experts keeps, per token and per slot (shared + top_k experts),
// the permuted input (h, unless recompute_level drops it), the first projection and the activation (as the dense MLP
// per token), plus its routing (the routed logits and the slots' scores fp32, experts and rows int32); its backward
// works on the gradients of the permuted buffers and the scaled activation. hybrid_moe counts both parts.
engine::ModelActivations model_activations(const GPTTrainerConfig& config);

}  // namespace fast_llm::models::gpt
