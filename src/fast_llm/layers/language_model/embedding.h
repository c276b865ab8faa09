// Language-model embeddings (Fast-LLM's LanguageModelEmbedding), the first Layer: reads the micro-batch's tokens (its
// input is ignored) and returns the residual stream (tokens, hidden) in the compute dtype:
//   y = dropout(embedding_scale * (W_word[tokens] + W_position[positions]))
// position embeddings only when `position_embeddings.enabled` (positions restart at each document: batch.positions).
// Parameters: `embeddings.word_embeddings_weight` [vocab, hidden] and `embeddings.position_embeddings_weight`
// [num_position_embeddings, hidden], both N(0, hidden_size^-0.5) by default. With tied weights the head refers to the
// word embeddings Parameter (declared here only, so it is bound and updated once).
// Backward scatters the gradient into the tables (+=) and returns an empty tensor (the input has no gradient).
// Tensor parallelism, with `vocab_parallel` (the default): each rank holds rows [rank * vocab / size, (rank + 1) * vocab /
// size) of the word embeddings; tokens outside its slice give zeros, and the output is summed over the group
// (all-reduce, or reduce-scatter over the sequence with sequence-tensor parallelism; with dropout, all-reduced first so
// that the masks are the one-process ones); the position embeddings are whole on every rank and added by rank 0.
// Without it the tables are whole on every rank, which computes the whole output. Either way, with sequence-tensor
// parallelism the layer returns this rank's rows, and backward gathers every rank's rows of the gradient first.
#pragma once

#include <string>

#include "fast_llm/layers/common/tensor_parallel.h"
#include "fast_llm/layers/language_model/config.h"
#include "fast_llm/layers/layer.h"
#include "fast_llm/layers/saved_per_micro_batch.h"

namespace fast_llm::layers {

class LanguageModelEmbedding : public Layer {
 public:
  // Refused: full_precision_residual.
  LanguageModelEmbedding(std::string name, const LanguageModelEmbeddingsConfig& config, int64_t hidden_size,
                         double lr_scale, TensorParallelism tensor_parallel = {});

  Tensor forward(LayerContext& context, const Tensor& input) override;
  Tensor backward(LayerContext& context, const Tensor& grad_output) override;
  bool uses_dropout() const override { return dropout_ > 0.0; }

  Parameter& word_embeddings() { return *word_embeddings_; }
  Parameter* position_embeddings() { return position_embeddings_; }

 private:
  struct Saved {
    Tensor tokens;
    Tensor positions;
    uint64_t dropout_seed = 0;
  };

  int64_t hidden_size_;
  double dropout_;
  double embedding_scale_;
  Parameter* word_embeddings_ = nullptr;
  Parameter* position_embeddings_ = nullptr;
  TensorParallelism tensor_parallel_;
  bool vocab_parallel_ = false;
  int64_t vocab_begin_ = 0;  // the first row of this rank's slice of the word embeddings
  SavedPerMicroBatch<Saved> saved_;
};

}  // namespace fast_llm::layers
