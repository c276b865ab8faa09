// Runs the micro-batches of one step through the stages (reference/fast-llm.md §6.3).
//
// A training step holds depth_first_micro_batches x breadth_first_micro_batches micro-batches, in that order
// (micro-batch d * breadth_first + b is breadth-first slot b of depth-first group d). For each depth-first group:
// forward every micro-batch of the group stage by stage (all micro-batches through stage 0, then stage 1, ...), then
// backward stage by stage in reverse, calling the multi-stage's hooks around each stage (ZeRO: gathering its weights,
// reducing its gradients as soon as the group's backward of it is done). Gradients start the step at zero and accumulate (+=) over its micro-batches
// (without a zeroing pass: the first accumulation into each parameter writes, Stage::begin_gradients); every micro-batch sees loss_gradient_scale = loss scale / (unmasked labels in the whole step), so
// the gradients are those of the step's mean loss whatever the split (DESIGN.md §4.6). Losses add into one LossSums
// for the step (numerators: divide by the step's labels for the mean; the MoE router losses, marked normalised, add
// their value over LayerContext::micro_batches_in_step, the micro-batches of the step on all data-parallel ranks).
//
// Micro-batch m of step `iteration` gets dropout seed derive_seed(seed, phase seed shift, iteration, m'), m' its index
// in the whole step over the data-parallel ranks (m * data_parallel + data rank), so the micro-batch sees the same
// dropout whatever the layout.
// With schedule.micro_batch_splits = k or sequence_data_parallel = s, each micro-batch runs as this rank's k pieces of
// its sequence (sequence_pieces.h): the step's inputs are depth_first x breadth_first x k, in Fast-LLM's order (for a
// depth-first group, stage by stage: each breadth-first micro-batch's splits in order), and the backward takes each
// micro-batch's splits in reverse order; piece j of micro-batch m has index m * k + j (what layers key their saved state
// by). The normalised losses count the pieces of all ranks as micro-batches. Layers that draw random numbers (dropout)
// are refused with pieces: their masks are drawn over a micro-batch's rows, which the pieces would draw again.
#pragma once

#include <cstdint>
#include <span>

#include "fast_llm/engine/distributed/config.h"
#include "fast_llm/engine/multi_stage/multi_stage.h"
#include "fast_llm/engine/schedule/layer_logs.h"
#include "fast_llm/engine/schedule/config.h"
#include "fast_llm/engine/schedule/sequence_pieces.h"
#include "fast_llm/layers/context.h"

namespace fast_llm::engine {

enum class Phase { training, validation };

class ScheduleRunner {
 public:
  // The configs must be validated and outlive the runner.
  // `logs`: per-layer tensor logs (layer_logs.h), off by default.
  // `sequence_data`: the sequence-data group (ProcessGroups::sequence_data(); null when of one rank).
  ScheduleRunner(MultiStage& multi_stage, const ScheduleConfig& schedule, const DistributedConfig& distributed,
                 LayerLogSettings logs = {}, bool global_tensor_names = true,
                 distributed::Communicator* sequence_data = nullptr);

  // Micro-batches (whole sequences) in one step on this rank (depth_first x breadth_first).
  int micro_batches_per_step() const { return schedule_.sequential_micro_batches(); }

  // Forward and backward of one training step. `micro_batches` (micro_batches_per_step() of them, on the model's
  // device) hold `num_labels` unmasked labels in all; `loss_scale` multiplies the loss gradient (fp16 scaling).
  // `losses` is cleared first and holds the step's loss sums after.
  void run_training_step(std::span<layers::MicroBatch> micro_batches, int64_t num_labels, int64_t iteration,
                         double loss_scale, layers::LossSums& losses);
  // Forward only (no dropout, nothing saved), adding the losses into `losses` (not cleared, so several steps can
  // accumulate).
  void run_forward(std::span<layers::MicroBatch> micro_batches, int64_t iteration, layers::LossSums& losses);

  // Model FLOPs of forward + backward of these micro-batches (sum of the layers' flops()), this rank's share of them
  // (1 / sequence_data_parallel).
  double flops(std::span<const layers::MicroBatch> micro_batches) const;

 private:
  // `micro_batches` are the caller's (this rank's) micro-batches of the step: the context counts those of all ranks.
  layers::LayerContext make_context(const layers::MicroBatch& batch, Phase phase, int64_t iteration,
                                    double loss_gradient_scale, double loss_scale, int64_t micro_batches,
                                    layers::LossSums& losses) const;

  // The layer logs of `layer`'s output (forward) or input gradient (backward) of this rank's micro-batch `index` of
  // `count`.
  void log_layer_tensor(const layers::Layer& layer, const Tensor& tensor, bool forward, int64_t index,
                        int64_t count) const;

  // The inputs the layers see for `micro_batches`: themselves, or (cutting along the sequence) their pieces, those of
  // micro-batch m at [m * splits, (m + 1) * splits). Sets each input's index.
  std::vector<layers::MicroBatch> inputs(std::span<layers::MicroBatch> micro_batches, int64_t first_index) const;

  MultiStage& multi_stage_;
  const ScheduleConfig& schedule_;
  const DistributedConfig& distributed_;
  Stream stream_;
  LayerLogSettings logs_;
  bool global_tensor_names_;
  SequenceLayout sequence_layout_;
};

}  // namespace fast_llm::engine
