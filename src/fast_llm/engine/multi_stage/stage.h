// A stage: consecutive layers whose parameters live in flat buffers (DESIGN.md §4.2).
//
// Layout of a stage's parameter space (elements, one index space shared by every buffer):
//
//   [ trainable parameters, grouped by optimizer settings | padding ][ frozen parameters | padding ]
//   <--------------------- trainable_size --------------------------><--------- frozen_size ------>
//
// Each parameter starts at a multiple of kParameterAlignment elements (vectorised kernels and cuBLAS like aligned
// views); the gaps hold zeros that nothing reads: their gradients stay 0, so Adam leaves them at 0 and they add
// nothing to the gradient norm. Each region is padded to a multiple of kParameterAlignment * data_parallel so it
// splits into equal shards, rank r holding [r * shard, (r + 1) * shard) of the region.
//
// Buffers:
//   weight_buffer  (trainable_size + frozen_size)  compute dtype, full: what layers read (Parameter::weight views)
//   grad_buffer    (trainable_size)                gradient dtype, full: what layers accumulate into (+=)
//   weight_shard   (trainable shard + frozen shard) optimization dtype: master weights of this rank's shard
//   frozen_shard   (frozen shard)                   the frozen part of weight_shard, or with
//                  store_frozen_weights_in_optimization_precision: false (and a compute dtype other than the
//                  optimization dtype) a buffer of its own in the compute dtype, weight_shard then holding the
//                  trainable shard only: a frozen weight keeps only its compute-dtype copy (unless the stage shares
//                  its full weight buffer, ZeRO-3, frozen_shard is this rank's part of weight_buffer's frozen region
//                  itself, and gathering the region is in place)
//   grad_shard     (trainable shard)                optimization dtype: this rank's reduced gradients
//   exp_avg, exp_avg_sq (trainable shard)           optimization dtype: Adam state
// With one data-parallel rank and equal dtypes the shard and the full buffer are the same memory (views), so nothing
// is copied; otherwise `copy_weights_from_shard` casts master -> compute weights and `copy_gradients_to_shard` casts
// full gradients -> shard. With several data-parallel ranks (ZeRO-1: every rank keeps the full compute weights and
// gradients, and the master weights and Adam state of its shard) those two go through the data-parallel group:
// `copy_gradients_to_shard` reduce-scatters the full gradients (summed over the ranks) into each rank's shard, and
// `copy_weights_from_shard` casts each rank's master shard and all-gathers the parts into every rank's full buffer.
// ZeRO-2 and 3 go further (multi_stage.h): a stage's full gradient buffer, or its full weight buffer, is a view of a
// buffer it shares with other stages (SharedStageBuffers), used only while the schedule works on the stage: gradients
// are reduce-scattered (and added up over depth-first groups) as soon as a group's backward of the stage is done, and
// weights are gathered just before the stage's forward or backward. After an optimizer step the compute weights are
// refreshed by adam_step itself where they line up with the master shard (`trainable_compute_weight_shard`), which
// saves reading the master weights again.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fast_llm/core/device.h"
#include "fast_llm/core/dtype.h"
#include "fast_llm/distributed/communicator.h"
#include "fast_llm/layers/layer.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::engine {

inline constexpr int64_t kParameterAlignment = 64;

// The pipeline rank stage `stage` lives on (Fast-LLM's placement: round robin).
inline int stage_pipeline_rank(size_t stage, int pipeline_parallel) { return int(stage % size_t(pipeline_parallel)); }

// Where one parameter sits in its stage.
struct ParameterSlot {
  layers::Parameter* parameter = nullptr;
  int64_t offset = 0;  // first element in the stage index space
  int64_t numel = 0;
};

// How a parameter's values relate over the tensor-parallel group: one part each (split), the same on every rank
// (replicated), or the same with a gradient each rank computes a part of (partial: summed over the group).
enum class TensorRole { split, replicated, partial };
TensorRole tensor_role(const layers::ParameterMeta& meta);

// A range of the trainable region whose parameters share optimizer settings and tensor role (always `split` without
// tensor parallelism); Adam runs one launch per group range.
struct ParameterGroup {
  bool weight_decay = true;
  double lr_scale = 1.0;
  TensorRole tensor_role = TensorRole::split;
  int64_t begin = 0;  // stage index space, [begin, end)
  int64_t end = 0;
};

// Settings every stage of a model shares.
struct StageSettings {
  Device device;
  DType compute_dtype = DType::float32;
  DType gradient_dtype = DType::float32;
  DType optimization_dtype = DType::float32;
  int data_parallel = 1;
  int data_rank = 0;
  // The data-parallel group (size data_parallel, rank data_rank); needed when data_parallel > 1. Not owned.
  distributed::Communicator* data_group = nullptr;
  // The pipeline (model.distributed.pipeline_parallel): stage s lives on pipeline rank s % pipeline_parallel.
  int pipeline_parallel = 1;
  int pipeline_rank = 0;
  // Tensor parallelism (layers/common/tensor_parallel.h): every parameter is this rank's part
  // (ParameterMeta::tensor), the data-parallel group holds the ranks of the same tensor rank, and the tensor group
  // (size tensor_parallel; needed when it is above 1, not owned) sums the partial gradients of replicated parameters
  // and the gradient norm of the split ones.
  int tensor_parallel = 1;
  int tensor_rank = 0;
  distributed::Communicator* tensor_group = nullptr;
  uint64_t seed = 0;        // initialisation seed (model.distributed.seed)
  bool training = true;     // false: no gradient or optimizer buffers (inference, evaluation-only runs)
  bool store_frozen_weights_in_optimization_precision = true;
};

// Full buffers a stage uses instead of allocating its own, shared with other stages (ZeRO-2: gradients, ZeRO-3:
// weights), each at least as large as the stage's regions. Undefined: the stage allocates its own.
struct SharedStageBuffers {
  Tensor weights;    // compute dtype, >= trainable_size + frozen_size
  Tensor gradients;  // gradient dtype, >= trainable_size
};

// Collectives on their way (weights into a stage's full buffer, gradients into its shard): `wait` before their
// output is read or their input written again.
struct PendingCollectives {
  std::vector<std::unique_ptr<distributed::Work>> works;
  std::vector<Tensor> tensors;  // temporaries they read or write, kept alive until then
  // `stream` waits for them (nothing when none is pending).
  void wait(Stream stream);
};

// Elements of a stage's two regions (the layout above, padding included), from its layers' parameters alone.
struct StageRegions {
  int64_t trainable = 0;
  int64_t frozen = 0;
  bool operator==(const StageRegions&) const = default;
};
StageRegions stage_regions(const std::vector<layers::Layer*>& layers, int data_parallel);
// Bytes the buffers of a stage with `regions` allocate (those that are views of another take nothing), computed
// without building it: the memory check at the start of a run adds them up before anything is allocated.
// `shared` says which full buffers the stage takes from SharedStageBuffers (they are counted once, by the caller).
struct SharedBufferUse {
  bool weights = false, gradients = false;
};
int64_t stage_buffer_bytes(const StageRegions& regions, const StageSettings& settings, SharedBufferUse shared = {});

class Stage {
 public:
  // Lays out and allocates the buffers of `layers` and binds every parameter to its views. Parameters are not
  // initialised: call `initialize_weights` (or load a checkpoint into the shards, then `copy_weights_from_shard`).
  // `allocate` false (a stage of another pipeline rank) only lays out: no buffer, and the parameters stay unbound.
  Stage(int index, std::vector<layers::Layer*> layers, const StageSettings& settings,
        const SharedStageBuffers& shared = {}, bool allocate = true);
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  int index() const { return index_; }
  // Whether this rank holds the stage's buffers (false: a stage of another pipeline rank, layout only).
  bool allocated() const { return allocated_; }
  const std::vector<layers::Layer*>& layers() const { return layers_; }
  const std::vector<ParameterSlot>& parameters() const { return slots_; }
  const std::vector<ParameterGroup>& groups() const { return groups_; }
  const StageSettings& settings() const { return settings_; }

  bool shares_weights() const { return weights_shared_; }
  bool shares_gradients() const { return gradients_shared_; }
  int64_t trainable_size() const { return trainable_size_; }
  int64_t frozen_size() const { return frozen_size_; }
  int64_t trainable_shard_size() const { return trainable_size_ / settings_.data_parallel; }
  int64_t frozen_shard_size() const { return frozen_size_ / settings_.data_parallel; }
  // First element of data rank `rank`'s shard of each region, in the stage index space.
  int64_t trainable_shard_begin(int rank) const { return rank * trainable_shard_size(); }
  int64_t frozen_shard_begin(int rank) const { return trainable_size_ + rank * frozen_shard_size(); }
  // The groups cut to data rank `rank`'s trainable shard, in shard coordinates (empty intersections dropped).
  std::vector<ParameterGroup> shard_groups(int rank) const;

  Tensor& weight_buffer() { return weight_buffer_; }
  Tensor& grad_buffer() { return grad_buffer_; }
  Tensor& weight_shard() { return weight_shard_; }
  // This rank's shard of the frozen region, in the optimization dtype or (see the file comment) the compute dtype.
  Tensor& frozen_shard() { return frozen_shard_; }
  bool frozen_in_compute_dtype() const { return frozen_in_compute_dtype_; }
  Tensor& grad_shard() { return grad_shard_; }
  Tensor& exp_avg() { return exp_avg_; }
  Tensor& exp_avg_sq() { return exp_avg_sq_; }
  // The trainable part of the master weight shard (what Adam updates).
  Tensor trainable_weight_shard() const { return weight_shard_.slice(0, 0, trainable_shard_size()); }
  // The compute-dtype weights of the same elements as `trainable_weight_shard`, for adam_step to write the updated
  // weights into in the pass that updates the master weights (so no cast reads them again). Undefined where that
  // cannot stand in for `copy_weights_from_shard`: the weights are the master shard itself (nothing to refresh), or
  // several data-parallel ranks (the rest of the buffer comes from the other ranks' shards). Frozen weights need no
  // refresh: the optimizer never changes them.
  Tensor trainable_compute_weight_shard() const;

  // Fills this rank's master shard from each parameter's initialisation (element i of a parameter is a pure function
  // of (seed, parameter name, i), so any stage layout and sharding gives the same values) and zeroes the Adam state.
  void initialize_shard();
  // This rank's part of one parameter's master weights from its initialisation (the Adam state is left as it is): a
  // LoRA adapter that a base model's checkpoint does not hold starts from there.
  void initialize_parameter(const ParameterSlot& slot);
  // initialize_shard, then the result into the compute-dtype weights.
  void initialize_weights();
  // weight_buffer <- weight_shard (cast to the compute dtype). One data-parallel rank: a cast, or nothing when the two
  // are the same memory; several: this rank's part cast, then all-gathered. `frozen` false leaves the frozen region
  // (which the optimizer never changes) as it is. Nothing when the stage shares its weight buffer: those weights are
  // gathered when the stage is used (start_gather_weights).
  void copy_weights_from_shard(Stream stream = {}, bool frozen = true);
  // Several data-parallel ranks: queues the gather of the weight buffer (the trainable region only when `frozen` is
  // false) from every rank's master shard.
  PendingCollectives start_gather_weights(Stream stream, bool frozen = true);
  // grad_shard <- grad_buffer (cast to the optimization dtype); nothing when they are the same memory. Several
  // data-parallel ranks: reduce_gradients.
  void copy_gradients_to_shard(Stream stream = {});
  // Several data-parallel ranks: this rank's part of the sum over the ranks of their grad_buffer (a reduce-scatter),
  // written into grad_shard, or added to it with `accumulate`. Without `accumulate` the reduction is only queued:
  // wait for what it returns before reading grad_shard or writing grad_buffer (the accumulation waits itself, as its
  // addition follows on the stream).
  PendingCollectives reduce_gradients(Stream stream, bool accumulate);
  void zero_gradients(Stream stream = {});
  // A training step's gradients without zeroing the buffer first (4 bytes per parameter less to write, and the
  // weight-gradient gemms skip reading it): begin_gradients marks the gradient of every parameter whose layers track
  // it (layers::Parameter::tracks_grad_start) as not started, so the step's first accumulation into it writes
  // instead of adding, and finish_gradients zeroes those nothing wrote. A stage with any other parameter is zeroed
  // whole at the start, as before. The padding between parameters stays zero from allocation.
  void begin_gradients(Stream stream = {});
  void finish_gradients(Stream stream = {});
  // Tensor parallelism: sums the gradients of the `partial` groups over the tensor group, in the full gradient
  // buffer (before they are reduced over the data-parallel group). Nothing without such groups.
  void reduce_partial_gradients(Stream stream);

  // The slot of the parameter named `name`, or nullptr.
  const ParameterSlot* find(const std::string& name) const;

 private:
  // Values of elements [begin, begin + count) of a parameter, as its initialisation defines them, into `output`
  // (host memory of the optimization dtype).
  void fill_initial_values(const layers::Parameter& parameter, int64_t begin, int64_t count, void* output) const;

  int index_;
  bool allocated_ = true;
  std::vector<layers::Layer*> layers_;
  StageSettings settings_;
  std::vector<ParameterSlot> slots_;
  std::vector<ParameterGroup> groups_;
  int64_t trainable_size_ = 0;
  int64_t frozen_size_ = 0;
  bool weights_alias_shard_ = false;
  bool frozen_in_compute_dtype_ = false;
  bool gradients_alias_shard_ = false;
  bool weights_shared_ = false;
  bool gradients_shared_ = false;
  std::vector<std::pair<int64_t, int64_t>> gradient_gaps_;  // [begin, end) of the trainable region no parameter holds

  Tensor weight_buffer_;  // (trainable_size + frozen_size) compute dtype
  Tensor grad_buffer_;    // (trainable_size) gradient dtype
  Tensor weight_shard_;   // (trainable shard [+ frozen shard]) optimization dtype
  Tensor frozen_shard_;   // (frozen shard) optimization dtype (a view of weight_shard_) or compute dtype
  Tensor grad_shard_;     // (trainable shard) optimization dtype
  Tensor exp_avg_;        // (trainable shard) optimization dtype
  Tensor exp_avg_sq_;     // (trainable shard) optimization dtype
};

}  // namespace fast_llm::engine
