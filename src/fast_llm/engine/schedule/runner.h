// Runs the micro-batches of one step through the stages (reference/fast-llm.md §6.3), as the list of steps that
// schedule.h builds once: each rank executes its own steps of that list in order, the same code for one process and
// for a pipeline of several.
//
// A training step holds depth_first_micro_batches x breadth_first_micro_batches micro-batches (micro-batch d *
// breadth_first + b is breadth-first slot b of depth-first group d). For each depth-first group: forward every
// micro-batch of the group stage by stage, then backward stage by stage in reverse, calling the multi-stage's hooks
// around each stage (ZeRO: gathering its weights, reducing its gradients as soon as the group's backward of it is
// done). Gradients start the step at zero and accumulate (+=) over its micro-batches (without a zeroing pass: the first
// accumulation into each parameter writes, Stage::begin_gradients); every micro-batch sees loss_gradient_scale = loss
// scale / (unmasked labels in the whole step), so the gradients are those of the step's mean loss whatever the split
// (DESIGN.md §4.6). Losses add into one LossSums for the step (numerators: divide by the step's labels for the mean;
// the MoE router losses, marked normalised, add their value over LayerContext::micro_batches_in_step, the
// micro-batches of the step on all data-parallel ranks). With a pipeline only the ranks running the stages that add a
// loss hold it (the head's: the last stage's rank); the trainer adds the sums over the ranks.
//
// Pipeline (multi_stage.pipeline_group()): a step whose input is on another rank receives it (activations forward,
// their gradients backward) on the pipeline group, and a step whose output another rank needs sends it there. A
// receive is posted as early as the order allows (once this rank has issued everything that comes before the step
// producing it), so it runs while the rank computes, and waited for only when its step starts; sends are waited for at
// the end of the step. The activations' shape crosses each stage boundary once, in a small header before the first
// one (every micro-batch has the same number of tokens and every piece of one the same share of them, so later ones
// have the same shape; the sender checks it).
//
// Micro-batch m of step `iteration` gets dropout seed derive_seed(seed, phase seed shift, iteration, m'), m' its index
// in the whole step over the data-parallel ranks (m * data_parallel + data rank), so the micro-batch sees the same
// dropout whatever the layout.
//
// With schedule.micro_batch_splits = k or sequence_data_parallel = s, each micro-batch runs as this rank's k pieces of
// its sequence (sequence_pieces.h), each piece its own step of the list (ScheduleStep::split): for a depth-first group,
// stage by stage, each breadth-first micro-batch's splits in order, and in backward each micro-batch's splits in
// reverse. Piece j of micro-batch m has index m * k + j (what layers key their saved state by); the pieces of a
// micro-batch on a stage carry their keys and values from one to the next (attention.h), and a pipeline sends and
// receives each piece's activations on its own. The normalised losses count the pieces of all ranks as micro-batches.
// Layers that draw random numbers (dropout) are refused with pieces: their masks are drawn over a micro-batch's rows,
// which the pieces would draw again.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "fast_llm/engine/distributed/config.h"
#include "fast_llm/engine/multi_stage/multi_stage.h"
#include "fast_llm/engine/schedule/layer_logs.h"
#include "fast_llm/engine/schedule/config.h"
#include "fast_llm/engine/schedule/schedule.h"
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

  // Model FLOPs of forward + backward of these micro-batches (sum of the layers' flops()), this rank's share of them:
  // the whole model's over pipeline_parallel and sequence_data_parallel (the log line's rate is per GPU).
  double flops(std::span<const layers::MicroBatch> micro_batches) const;

  // The training schedule (all ranks' steps).
  const Schedule& schedule() const { return training_schedule_; }

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
  std::vector<layers::MicroBatch> inputs(std::span<layers::MicroBatch> micro_batches) const;

  // Runs this rank's steps of `schedule`, split j of micro-batch m with contexts[m * splits + j]; `training` adds the
  // hooks and backward.
  void run_steps(const Schedule& schedule, std::vector<layers::LayerContext>& contexts, bool training);
  // Pipeline messages: the activation (or gradient) a step sends, and the one it receives.
  struct Message {
    std::unique_ptr<distributed::Work> work;
    Tensor tensor;
  };
  Message send(const ScheduleStep& step, const Tensor& tensor);
  Message post_receive(const ScheduleStep& step, const layers::MicroBatch& batch);

  MultiStage& multi_stage_;
  const ScheduleConfig& schedule_;
  const DistributedConfig& distributed_;
  Stream stream_;
  LayerLogSettings logs_;
  bool global_tensor_names_;
  SequenceLayout sequence_layout_;
  Schedule training_schedule_;
  std::optional<Schedule> forward_schedule_;
  // Per stage whose forward output crosses to another pipeline rank: its shape, as sent (or received) in the header.
  std::map<size_t, Shape> boundary_shapes_;
};

}  // namespace fast_llm::engine
