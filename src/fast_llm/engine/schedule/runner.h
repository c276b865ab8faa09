// Runs the micro-batches of one step through the stages (reference/fast-llm.md §6.3) by executing this rank's steps of
// the list schedule.h builds once (Fast-LLM's breadth-first order): the same code for one process, a pipeline of
// several and pieces of sequences (sequence_pieces.h: piece j of micro-batch m has index m * k + j, what layers key
// their saved state by). Around each stage it calls the multi-stage's hooks (ZeRO gathers and reductions).
//
// Gradients start the step at zero and accumulate (+=) over its pieces (the first accumulation into a parameter
// writes, Stage::begin_gradients); every piece sees loss_gradient_scale = loss scale / (unmasked labels in the whole
// step), so the gradients are those of the step's mean loss whatever the layout (DESIGN.md §4.6). Losses add into one
// LossSums for the step; the normalised ones (MoE router losses) over LayerContext::micro_batches_in_step, the pieces
// of the step on all ranks. Only the ranks running a stage that adds a loss hold it; the trainer sums over the ranks.
//
// Pipeline: a step whose input is on another rank receives it (activations forward, their gradients backward), posted
// as early as the common order allows and waited for when its step starts; sends are waited for at the end of the
// step. The activations' shape crosses each stage boundary once, in a small header (later ones have the same shape;
// the sender checks it). docs/distributed.md has the order and the message flow.
//
// Dropout seeds come from the micro-batch's index in the whole step over the data-parallel ranks, so a micro-batch
// sees the same dropout whatever the layout; layers that draw random numbers are refused with pieces.
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
