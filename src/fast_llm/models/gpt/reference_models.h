// The frozen reference models of a training run (`reference_models: {name: {model, pretrained}}`, Fast-LLM's
// distillation teachers and DPO references): each is a GPT model of its own architecture, built on the trained model's
// device with its distributed settings (compute dtype, seed), with weights only (every parameter frozen and kept in the
// compute dtype alone: no fp32 copy, no gradient buffers, no optimizer state), loaded from `pretrained` in any format
// (distributed, fast_llm, Hugging Face) or, without a path, initialised as a fresh model with the run's seed. Before
// the trained model sees a micro-batch (training or evaluation), every reference model runs forward on it (no dropout,
// nothing saved) and stores in the micro-batch, under its name, what the trained head's losses read of it:
//   - a distillation loss: its logits, (tokens, vocab) fp32 (fp64 in fp64 runs), MicroBatch::reference_logits;
//   - a dpo loss: each row's log-probability of its label (kernels/label_log_probabilities.h), (tokens) fp32 (fp64),
//     MicroBatch::reference_label_log_probabilities; without a distillation loss reading the same model its logits
//     are computed chunk by chunk (at most kLogitsChunkBytes at a time) and never kept.
// Of the rows that carry a loss only, gathered before the head, when the trained head computes those only
// (memory_parts() counts the worst case, every row). When blocks of the trained model distill a reference model's
// activations (block `distillation_model`), its blocks' mixer outputs are stored too (MicroBatch::
// reference_mixer_outputs), and a model only blocks read runs no head.
//
// All micro-batches of a step are run before the step, so the step holds one (tokens, vocab) buffer per micro-batch and
// reference model a distillation loss reads: memory_parts() counts them with the weights. With data parallelism every
// process holds the whole reference model (no ZeRO sharding: it has no optimizer state to shard) and runs it on its own
// micro-batches. As Fast-LLM, reference models need pipeline and sequence-data parallelism off (refused). With
// micro_batch_splits they run on every row of the whole micro-batch and each split reads its rows of their outputs.
#pragma once

#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fast_llm/engine/multi_stage/multi_stage.h"
#include "fast_llm/engine/training/memory_check.h"
#include "fast_llm/models/gpt/model.h"
#include "fast_llm/models/gpt/trainer_config.h"

namespace fast_llm::models::gpt {

class ReferenceModels {
 public:
  // Declares the models of `config.reference_models` (the whole trainer config must be validated); load() allocates and
  // fills their weights.
  ReferenceModels(const GPTTrainerConfig& config, Device device);
  ~ReferenceModels();

  bool empty() const { return models_.empty(); }
  // Whether every model may run on a micro-batch whose preference pairs share their prompt rows
  // (GPTModel::layers_compute_shared_prompts_once).
  bool compute_shared_prompts_once() const;
  // The device memory of the weights and of the logits kept for one step, per model.
  std::vector<engine::MemoryEstimate::Part> memory_parts() const;
  // Builds the weight buffers and loads or initialises them.
  void load();
  // Stores each model's outputs (the file comment) on each micro-batch: of every row, or of its loss rows only when
  // `trained_head` computes those only (LanguageModelHead::computes_loss_rows_only, on the whole micro-batch: not with
  // micro_batch_splits, whose pieces the head computes whole).
  void run(std::span<layers::MicroBatch> micro_batches, const layers::LanguageModelHead& trained_head);
  // Tests: the chunks of logits behind the label log-probabilities hold at most `rows` rows.
  void limit_logits_chunk_rows(int64_t rows) { logits_chunk_rows_ = rows; }

  // The weights of model `name` (tests check they never change).
  engine::MultiStage& multi_stage(const std::string& name);

 private:
  struct Model;
  // The logits of one chunk of rows behind the label log-probabilities: 1 GiB, a few thousand rows at 128k words.
  static constexpr int64_t kLogitsChunkBytes = int64_t(1) << 30;

  // Whether the outputs on `batch` are of its loss rows only (run's comment); the last block of each model then computes
  // those rows alone too (GPTModel::compute_last_block_on_loss_rows_when).
  bool computes_loss_rows_only(const layers::MicroBatch& batch, const layers::LanguageModelHead& trained_head) const;
  // The label log-probabilities of the rows of `hidden` (the head's input): from `logits` when they are kept, else
  // from logits made one chunk at a time.
  Tensor label_log_probabilities(layers::LanguageModelHead& head, const Tensor& hidden, const Tensor& labels,
                                 const Tensor* logits, Stream stream) const;

  const GPTTrainerConfig& config_;
  engine::DistributedConfig distributed_;  // the run's, as one process
  Device device_;
  std::vector<std::unique_ptr<Model>> models_;
  int64_t logits_chunk_rows_ = std::numeric_limits<int64_t>::max();
};

}  // namespace fast_llm::models::gpt
