// The GPT model: the layer list [embeddings, decoder blocks..., head] built from a validated GPT base-model config,
// with Fast-LLM's parameter names (embeddings.word_embeddings_weight, decoder.{i}.norm_1.weight,
// decoder.{i}.mixer.{query,key_value,dense}.weight, decoder.{i}.mlp.{layer_1,layer_2}.weight, head.final_norm.weight,
// head.output_weights). The engine binds the declared parameters, initialises them from their metadata and runs the
// layers; it sees this class only through engine::BaseModel.
//
// `peft: lora` adds LoRA adapters (layers/common/linear.h) to the query and value projections and to the linears with
// `apply_peft: true`, and with `freeze_others` freezes every other parameter.
// Refused at construction (NotSupportedError naming the config path): any field the config marks as not supported
// yet, mixer and MLP types without a registered layer (today: attention and the dense MLP have one),
// attention dropout, loss types other than label and z_loss.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fast_llm/engine/base_model.h"
#include "fast_llm/engine/distributed/config.h"
#include "fast_llm/layers/block/decoder_block.h"
#include "fast_llm/layers/common/linear.h"
#include "fast_llm/layers/language_model/embedding.h"
#include "fast_llm/layers/language_model/head.h"
#include "fast_llm/models/gpt/config.h"

namespace fast_llm::models::gpt {

// This process's place in the tensor-parallel group of a validated `model.distributed`.
layers::TensorParallelism tensor_parallelism(const engine::DistributedConfig& distributed);

class GPTModel : public engine::BaseModel {
 public:
  // `config` must be validated; the model copies what it needs and keeps no reference to it. `tensor_parallel`: this
  // process's place in the tensor-parallel group (tensor_parallelism(model.distributed)); the layers declare this
  // rank's part of their parameters (layers/common/tensor_parallel.h).
  explicit GPTModel(const GPTBaseModelConfig& config, layers::TensorParallelism tensor_parallel = {});

  std::vector<layers::Layer*> layers() override;
  layers::LossRowRule loss_row_rule() const override { return head_->loss_row_rule(); }
  // On which micro-batches the last block computes its output on the loss rows only (DecoderBlock::
  // compute_output_on_loss_rows_when): by default those the head computes the loss rows of alone, when the last
  // block's MLP is row-wise. An empty predicate turns it off (the last block and the head in different pipeline
  // stages, which pass every row between them); the reference models set the trained head's.
  void compute_last_block_on_loss_rows_when(layers::DecoderBlock::BatchPredicate predicate);
  bool computes_shared_prompts_once() const override {
    return loss_row_rule() == layers::LossRowRule::preference_spans && layers_compute_shared_prompts_once(true);
  }
  // The layers' part of it: every mixer causal attention (a row sees no later row of its sequence), every MLP row-wise
  // (no expert routing, whose load balancing counts the rows), no activation distillation, and no dropout when
  // `with_dropout` (a training forward; a reference model runs without). What a reference model needs to run on such
  // a micro-batch.
  bool layers_compute_shared_prompts_once(bool with_dropout) const;

  layers::LanguageModelEmbedding& embeddings() { return *embeddings_; }
  layers::DecoderBlock& block(int index) { return *blocks_.at(size_t(index)); }
  int block_count() const { return int(blocks_.size()); }
  layers::LanguageModelHead& head() { return *head_; }
  // The linear layers that have a LoRA adapter (attention projections and dense-MLP layers), in forward order.
  std::vector<layers::Linear*> lora_linears();

  // Weights that take part in matmuls: the mixer and MLP weights of every block and the output projection (counted
  // even when tied to the embeddings); embedding lookups are not matmuls.
  int64_t matmul_weight_count() const;
  // Model FLOPs per token for sequences of `sequence_length` tokens (DESIGN.md §8): 6 * matmul weights + each mixer's
  // own (causal attention, forward and backward: 6 * sequence_length * heads * head_size).
  double flops_per_token(int64_t sequence_length) const;

 private:
  std::unique_ptr<layers::LanguageModelEmbedding> embeddings_;
  std::vector<std::unique_ptr<layers::DecoderBlock>> blocks_;
  std::unique_ptr<layers::LanguageModelHead> head_;
};

}  // namespace fast_llm::models::gpt
