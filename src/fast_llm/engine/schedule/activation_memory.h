// The activation memory one rank needs at the peak of a training step, for the memory check at start-up
// (engine/training/memory_check.h), from what each layer keeps and works with on this rank's layout and from the
// rank's own steps of the schedule.
//
// The model type describes every layer of the model (ModelActivations, in the order of BaseModel::layers(); GPT's is
// models/gpt/training.h) for this rank's layout: tensor-parallel ranks keep their heads' and intermediate columns'
// share, sequence-tensor parallelism the sequence shards of what goes between the blocks, and the sizes are per
// token of an input of the schedule (a micro-batch, or a piece of one with micro_batch_splits and sequence-data
// parallelism). The engine then walks this pipeline rank's steps of the list in the runner's order
// (schedule/runner.h), with what the runner really holds at each:
//   - a forward adds its stage's kept bytes for that input (and, at a micro-batch's first piece, what its layers keep
//     for the whole sequence: attention's carried keys and values); the backward of the input drops them (the
//     whole-sequence part with the micro-batch's last piece): so the breadth-first micro-batches of a depth-first
//     group are all alive on a rank's early stages when the backward starts;
//   - each step adds its stage's working memory (the largest of its layers', the head's logits included: only the
//     rank running the head counts them), a backward step also what its layers keep for the whole sequence while
//     its pieces go back (the gradient carries);
//   - activations (and their gradients) between stages: a receive's buffer from the moment the runner posts it until
//     its step takes it, a send's until the end of the step (the runner waits for sends then), an output passed to
//     the next stage on this rank until that stage takes it;
//   - the micro-batches of the step themselves (all of this rank's: they are uploaded together) and what the model
//     keeps once per step (the rotary tables).
// A schedule without backward steps (evaluation) keeps nothing. The peak is the largest total over the steps. This is
// the estimate's upper side: a stage's kept bytes stay counted for the whole of its backward step, and its working
// memory is counted in every one of its steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fast_llm/engine/distributed/config.h"
#include "fast_llm/engine/schedule/schedule.h"

namespace fast_llm::engine {

// One layer on this rank's layout, in bytes per token of one input (micro-batch or piece) unless said.
struct LayerActivations {
  int64_t kept = 0;                     // from its forward to its backward
  int64_t kept_per_sequence_token = 0;  // per token of the whole micro-batch, from the micro-batch's first piece's
                                        // forward to its last piece's backward (carried keys and values)
  int64_t working = 0;                  // while it runs (forward or backward)
  int64_t backward_per_sequence_token = 0;  // per token of the whole micro-batch, while the backward of its stage
                                            // runs on the micro-batch's pieces (the carried keys' gradients)
  int64_t output = 0;                   // its output activation (and its gradient coming back): what crosses stages
};

struct ModelActivations {
  std::vector<LayerActivations> layers;  // one per layer, in the model's order
  int64_t micro_batch_bytes_per_token = 0;  // each micro-batch of the step on the device (tokens, labels, ...)
  int64_t step_bytes_per_token = 0;         // once per step, per token of a micro-batch (the rotary tables)
};

struct ActivationPeak {
  int64_t bytes = 0;
  std::vector<size_t> stages;  // the stages this rank runs
  int micro_batches_in_flight = 0;  // the most micro-batches a stage of this rank keeps at once
  int64_t piece_tokens = 0;         // tokens of one input of the schedule
};

// The peak for pipeline rank `pipeline_rank` of the schedule's layout. `stage_sizes`: the number of layers of each
// stage (split_into_stages); their sum is the number of layers of `model`. `tokens`: of one micro-batch;
// `sequence_data_parallel`: the ranks its pieces are shared among (each keeps one piece of every split). Throws
// Error("memory") when the layers do not match.
ActivationPeak activation_peak(const ModelActivations& model, const std::vector<size_t>& stage_sizes,
                               const Schedule& schedule, int pipeline_rank, int64_t tokens,
                               int sequence_data_parallel);

// The memory check's name for the peak, with this rank's layout: "activations of stages 0-3 on pipeline rank 0 of 2,
// 4 micro-batches of 4096 tokens in flight (pieces of 1024 tokens), tensor rank 1 of 2 (sequence-tensor
// parallel), sequence-data rank 0 of 2" (the parts of a layout of one rank left out). `distributed` must be
// validated.
std::string describe_activation_peak(const ActivationPeak& peak, const DistributedConfig& distributed, int64_t tokens);

}  // namespace fast_llm::engine
