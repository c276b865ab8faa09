// The frozen reference models of a training run (`reference_models: {name: {model, pretrained}}`, Fast-LLM's
// distillation teachers and DPO references): each is a GPT model of its own architecture, built on the trained model's
// device with its distributed settings (compute dtype, seed), with weights only (every parameter frozen and kept in the
// compute dtype alone: no fp32 copy, no gradient buffers, no optimizer state), loaded from `pretrained` in any format
// (distributed, fast_llm, Hugging Face) or, without a path, initialised as a fresh model with the run's seed. Before
// the trained model sees a micro-batch (training or evaluation), every reference model runs forward on it (no dropout,
// nothing saved) and its logits, (tokens, vocab) fp32 (fp64 in fp64 runs), are stored in the micro-batch under the
// model's name for the head's losses (distillation, dpo): only the rows that carry a loss, (loss rows, vocab), gathered
// before the head, when the trained head computes those only (memory_parts() counts the worst case, every row). When
// blocks of the trained model distill a reference model's activations (block `distillation_model`), its blocks' mixer
// outputs are stored too (MicroBatch::reference_mixer_outputs).
//
// All micro-batches of a step are run before the step, so the step holds one (tokens, vocab) buffer per micro-batch and
// reference model: memory_parts() counts them with the weights. With data parallelism every process holds the whole
// reference model (no ZeRO sharding: it has no optimizer state to shard) and runs it on its own micro-batches. As
// Fast-LLM, reference models need pipeline and sequence-data parallelism off (refused). With micro_batch_splits they
// run on the whole micro-batch and each split reads its rows of their outputs.
#pragma once

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
  // The device memory of the weights and of the logits kept for one step, per model.
  std::vector<engine::MemoryEstimate::Part> memory_parts() const;
  // Builds the weight buffers and loads or initialises them.
  void load();
  // Stores each model's logits on each micro-batch in micro_batch.reference_logits[name]: of every row, or of its loss
  // rows only when `trained_head` computes those only (LanguageModelHead::computes_loss_rows_only, on the whole
  // micro-batch: not with micro_batch_splits, whose pieces the head computes whole).
  void run(std::span<layers::MicroBatch> micro_batches, const layers::LanguageModelHead& trained_head);

  // The weights of model `name` (tests check they never change).
  engine::MultiStage& multi_stage(const std::string& name);

 private:
  struct Model;
  const GPTTrainerConfig& config_;
  engine::DistributedConfig distributed_;  // the run's, as one process
  Device device_;
  std::vector<std::unique_ptr<Model>> models_;
};

}  // namespace fast_llm::models::gpt
