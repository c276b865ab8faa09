// A model cut into stages: consecutive layers grouped by `model.multi_stage.layers_per_stage`, each stage with its
// own flat buffers (stage.h). This is what the schedule runs and the optimizer updates.
//
// Stages are cut greedily, as Fast-LLM does: a stage closes after the layer that brings it to at least
// layers_per_stage layers, and after the last layer (so a value below 1 puts each layer in its own stage).
// ZeRO (model.multi_stage.zero_stage), with several data-parallel ranks: each stage keeps this rank's shard of the
// master weights and Adam state (stage 1), and its full gradient buffer (stage 2) or full weight buffer (stage 3) is
// one of num_grad_buffers / num_weight_buffers buffers that the stages share in turn (stage s uses buffer s % count),
// so the full buffers of only that many stages exist at once. The schedule calls the hooks below around each stage's
// forward and backward:
//   - gradients: when a depth-first group's backward of a stage is done, they are reduce-scattered into the stage's
//     shard (stage 1: after the last group; stage 2: after every group, added up in the shard, so the shared buffer is
//     free for the next stage), on the data-parallel group's stream or thread, while the backward goes on with other
//     stages; the compute stream waits for a reduction only before the buffer is written again (the next stage that
//     shares it) and before the optimizer reads the shards;
//   - weights (stages 1 and 2): after the optimizer step each stage's are gathered from the shards while the next
//     forward runs the stages before it, which wait for it only when they reach it;
//   - weights (stage 3): gathered from the shards into the stage's buffer before its forward and backward, and the
//     next stage's (in that direction) started at once, so its gather runs while this stage computes; after an
//     optimizer step the gathered weights are stale and are gathered again at their next use.
// A stage whose parameters another stage's layer reads (the embeddings, when the head's output weights are tied to
// them) keeps its own full buffers, gathered and reduced as in stage 1. With one data-parallel rank there is nothing to
// shard and each stage has its own buffers.
// Pipeline parallelism (a pipeline group of several ranks): stage s lives on pipeline rank s % pipeline_parallel, and
// only this rank's stages have buffers, shards and optimizer state here (the other stages' layers exist but own no
// memory; ZeRO's shared buffers go round this rank's stages in turn). A stage whose parameters a layer of a stage on
// another rank reads (tied embeddings: the head on the last stage's rank) is held on that rank too, as a copy with its
// own buffers and optimizer state that runs no layers: after the backward the copies' gradients and the owner's are
// all-reduced over those ranks (the tie group), so every copy takes the same update as the owner and stays equal to
// it; the gradient norm counts the owner's only, and checkpoints hold the owner's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fast_llm/core/device.h"
#include "fast_llm/engine/base_model.h"
#include "fast_llm/engine/distributed/config.h"
#include "fast_llm/engine/multi_stage/config.h"
#include "fast_llm/engine/multi_stage/stage.h"

namespace fast_llm::engine {

// The device a run computes on: CUDA device `local_rank` when `use_cuda` and a GPU is visible, else the CPU (an
// explicit `use_cuda: true` without a GPU is an error).
Device resolve_device(const DistributedConfig& distributed);

// The dtype of the full gradient buffers: fp32 with full_precision_gradients (fp64 when computing in fp64), else the
// compute dtype.
DType gradient_dtype(const MultiStageConfig& multi_stage, const DistributedConfig& distributed);

// The settings every stage of a model shares, from the configs (which must be validated).
StageSettings stage_settings(const MultiStageConfig& multi_stage, const DistributedConfig& distributed, Device device,
                             bool training);
// The layers of each stage, cut as described above.
std::vector<std::vector<layers::Layer*>> split_into_stages(const std::vector<layers::Layer*>& layers,
                                                           double layers_per_stage);

// How many full weight and gradient buffers the stages share (0: each stage has its own).
struct SharedBufferCounts {
  int weights = 0, gradients = 0;
};
SharedBufferCounts shared_buffer_counts(const MultiStageConfig& multi_stage, int data_parallel, size_t num_stages,
                                        bool training);
// Per stage: whether a layer of another stage reads one of its parameters (tied weights); such a stage keeps its own
// full buffers under ZeRO-2 and 3.
std::vector<bool> stages_lending_parameters(const std::vector<std::vector<layers::Layer*>>& stages);
// Per stage: whether pipeline rank `pipeline_rank` of `pipeline_parallel` holds its buffers: its own stages, and the
// stages lending parameters to one of them (the copies of tied weights, see the file comment).
std::vector<bool> stages_held(const std::vector<std::vector<layers::Layer*>>& stages, int pipeline_parallel,
                              int pipeline_rank);
// Bytes of every buffer of the stages of `stages` this pipeline rank holds (their own and the shared ones), computed
// without building them.
int64_t multi_stage_buffer_bytes(const std::vector<std::vector<layers::Layer*>>& stages,
                                 const MultiStageConfig& multi_stage, const StageSettings& settings);

class MultiStage {
 public:
  // `training` false builds weights only (no gradient buffers, no optimizer state). Both configs must be validated.
  // `data_group` (not owned, outliving this) is the data-parallel group, needed when there are several ranks.
  // `pipeline_group` (likewise) places the stages on its ranks; without it this process holds every stage (the
  // reference models, generation and evaluation, which run the whole model in one process). `tensor_group` likewise
  // the tensor-parallel group, needed with tensor_parallel above 1 (the model's layers are then built for this tensor
  // rank: layers/common/tensor_parallel.h); with both, each stage's layers are split over the tensor group.
  MultiStage(BaseModel& model, const MultiStageConfig& multi_stage, const DistributedConfig& distributed,
             Device device, bool training = true, distributed::Communicator* data_group = nullptr,
             distributed::Communicator* pipeline_group = nullptr, distributed::Communicator* tensor_group = nullptr);
  // Waits for the collectives still on their way (they write into this model's buffers).
  ~MultiStage();
  MultiStage(const MultiStage&) = delete;
  MultiStage& operator=(const MultiStage&) = delete;

  BaseModel& model() { return model_; }
  Device device() const { return settings_.device; }
  const StageSettings& settings() const { return settings_; }
  // Every layer, in forward order.
  const std::vector<layers::Layer*>& layers() const { return layers_; }
  std::vector<std::unique_ptr<Stage>>& stages() { return stages_; }
  const std::vector<std::unique_ptr<Stage>>& stages() const { return stages_; }
  // Whether this rank runs stage `stage`'s layers (its pipeline rank: it owns the stage, whose shard counts in the
  // gradient norm and goes into checkpoints), and whether it holds its buffers (its own stages and the copies of tied
  // weights; Stage::allocated).
  bool runs(size_t stage) const { return runs_[stage]; }
  bool holds(size_t stage) const { return stages_[stage]->allocated(); }
  // The pipeline group (null: one pipeline rank).
  distributed::Communicator* pipeline_group() const { return pipeline_group_; }

  // Parameters (trainable + frozen) and the trainable ones, counted without padding.
  int64_t num_parameters() const;
  int64_t num_trainable_parameters() const;
  // The parameter named `name` (Fast-LLM's dotted name), or nullptr.
  layers::Parameter* find_parameter(const std::string& name) const;

  // Fresh initialisation of every stage (Stage::initialize_weights).
  void initialize_weights();
  void zero_gradients(Stream stream = {});
  // Stage::begin_gradients / finish_gradients over every stage.
  void begin_gradients(Stream stream = {});
  void finish_gradients(Stream stream = {});
  // Every stage's gradients into its shard: a cast, or (several data-parallel ranks) the reduce-scatter of the stages
  // whose gradients the schedule has not reduced yet.
  void copy_gradients_to_shards(Stream stream = {});
  // Every stage's compute weights from its master shard (stages that share weight buffers gather at their next use).
  void copy_weights_from_shards(Stream stream = {});
  // After an optimizer step, stage `stage`'s compute weights from its master shard, trainable region only: a cast
  // (one data-parallel rank), or a gather that the stage's next forward waits for (several), or nothing (ZeRO-3: it
  // is gathered at its next use).
  void refresh_weights(size_t stage, Stream stream);
  // The master shards changed (an optimizer step, a load): weights gathered into shared buffers are stale.
  void invalidate_gathered_weights();
  // `stream` waits for every collective still on its way.
  void wait_for_collectives(Stream stream);

  // The schedule's hooks (see the file comment), for stage `stage` of a depth-first group of micro-batches.
  void before_forward(size_t stage, Stream stream, bool training);
  void before_backward(size_t stage, Stream stream);
  void after_backward(size_t stage, bool first_group, bool last_group, Stream stream);

  const SharedBufferCounts& shared_buffers() const { return shared_counts_; }

 private:
  // Makes `stage`'s weights ready in its shared buffer (gathering them unless they are there or on their way), then
  // `stream` waits for them; `prefetch` only starts the gather.
  void gather_weights(size_t stage, Stream stream, bool prefetch);
  // Takes a shared gradient buffer over for `stage` (ZeRO-2), once the reductions of its other stages are done.
  void begin_shared_gradients(size_t stage, Stream stream);
  // Whether a layer of the stage adds to parameter gradients in its forward (layers::Layer).
  bool gradients_in_forward(size_t stage) const;
  // The next stage this rank runs after (`step` 1) or before (-1) `stage`, or -1.
  int64_t next_run_stage(size_t stage, int step) const;
  // Sums the gradients of the stages tied across pipeline ranks over the tie group (every holder gets the sum).
  void reduce_tied_gradients(Stream stream);

  BaseModel& model_;
  StageSettings settings_;
  std::vector<layers::Layer*> layers_;
  std::vector<std::unique_ptr<Stage>> stages_;
  SharedBufferCounts shared_counts_;
  std::vector<Tensor> shared_weights_, shared_gradients_;
  // Per stage: the shared weight / gradient buffer it uses (-1: its own buffers).
  std::vector<int64_t> weight_buffer_of_, gradient_buffer_of_;
  distributed::Communicator* pipeline_group_ = nullptr;
  std::vector<bool> runs_;
  // Per stage: its parameters are read by a stage of another pipeline rank (it is held on both); and the group of the
  // ranks holding such stages (null when there is none).
  std::vector<bool> tied_across_ranks_;
  std::unique_ptr<distributed::Communicator> tie_group_;
  // Per shared weight buffer: the stage whose weights it holds or is receiving (-1: none), and that gather.
  std::vector<int64_t> weight_occupant_;
  std::vector<PendingCollectives> pending_gathers_;
  // Per stage: the gather of its own full buffer after an optimizer step (waited for before its forward), and the
  // reduction of its gradients (waited for before the optimizer reads the shards or the buffer is written again).
  std::vector<PendingCollectives> pending_refreshes_, pending_reductions_;
  // Per stage: the schedule reduced its gradients this step.
  std::vector<bool> gradients_reduced_;
};

}  // namespace fast_llm::engine
