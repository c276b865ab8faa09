#include "fast_llm/layers/language_model/embedding.h"

#include <fmt/format.h>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/embedding.h"
#include "fast_llm/kernels/pointwise.h"
#include "fast_llm/layers/common/dropout.h"
#include "fast_llm/layers/common/parameter_settings.h"

namespace fast_llm::layers {

namespace {
constexpr uint64_t kEmbeddingDropout = 0;
}  // namespace

LanguageModelEmbedding::LanguageModelEmbedding(std::string name, const LanguageModelEmbeddingsConfig& config,
                                               int64_t hidden_size, double lr_scale, TensorParallelism tensor_parallel)
    : Layer(std::move(name)),
      hidden_size_(hidden_size),
      dropout_(config.dropout),
      embedding_scale_(config.embedding_scale),
      tensor_parallel_(tensor_parallel) {
  if (config.full_precision_residual)
    throw NotSupportedError("layers", fmt::format("{}: a full-precision residual stream is not supported",
                                                  config.field_path("full_precision_residual")));
  lr_scale = combine_lr_scales(lr_scale, config.lr_scale);
  vocab_parallel_ = tensor_parallel.enabled() && config.vocab_parallel;
  if (vocab_parallel_ && config.vocab_size % tensor_parallel.size != 0)
    throw ConfigError(config.field_path("vocab_size"),
                      fmt::format("{} does not split over tensor_parallel {} (vocab_parallel): it must divide it",
                                  config.vocab_size, tensor_parallel.size));
  const int64_t rows = vocab_parallel_ ? config.vocab_size / tensor_parallel.size : config.vocab_size;
  vocab_begin_ = vocab_parallel_ ? rows * tensor_parallel.rank : 0;
  auto word = parameter_settings(config.word_embeddings, default_weight_initialization(hidden_size), lr_scale);
  word_embeddings_ = &declare("word_embeddings_weight", Shape{rows, hidden_size}, word.initialization,
                              word.weight_decay, word.lr_scale);
  word_embeddings_->tracks_grad_start = true;
  if (config.position_embeddings.enabled.value_or(false)) {
    auto position =
        parameter_settings(config.position_embeddings, default_weight_initialization(hidden_size), lr_scale);
    position_embeddings_ = &declare("position_embeddings_weight", Shape{config.num_position_embeddings, hidden_size},
                                    position.initialization, position.weight_decay, position.lr_scale);
    position_embeddings_->tracks_grad_start = true;
  }
  for (Parameter* parameter : parameters())
    parameter->meta.tensor = {.size = tensor_parallel.size, .rank = tensor_parallel.rank};
  if (vocab_parallel_) word_embeddings_->meta.tensor.dim = 0;
}

Tensor LanguageModelEmbedding::forward(LayerContext& context, const Tensor& input) {
  const MicroBatch& batch = context.batch;
  const Stream stream = context.stream;
  const Tensor& word_weight = word_embeddings_->weight;
  // (tokens, hidden)
  Tensor output = Tensor::empty(Shape{batch.num_tokens(), hidden_size_}, word_weight.dtype(), word_weight.device(), stream);
  const std::optional<int64_t> first_row = vocab_parallel_ ? std::optional(vocab_begin_) : std::nullopt;
  kernels::embedding_forward({.indices = batch.tokens,
                              .weight = word_weight,
                              .output = output,
                              .scale = embedding_scale_,
                              .accumulate = false,
                              .first_row = first_row,
                              .stream = stream});
  // Vocabulary-parallel outputs are summed over the ranks: the position embeddings are added by one of them.
  if (position_embeddings_ != nullptr && (!vocab_parallel_ || tensor_parallel_.rank == 0)) {
    FLM_CHECK(batch.positions.defined(), "embeddings",
              "absolute position embeddings need the positions of the micro-batch's tokens");
    kernels::embedding_forward({.indices = batch.positions,
                                .weight = position_embeddings_->weight,
                                .output = output,
                                .scale = embedding_scale_,
                                .accumulate = true,
                                .stream = stream});
  }
  const bool dropout = context.training && dropout_ > 0.0;
  if (vocab_parallel_ && !dropout) {
    if (context.training)
      saved_.put(batch.index,
                 Saved{.tokens = batch.tokens, .positions = batch.positions, .dropout_seed = context.dropout_seed});
    return tensor_parallel_.reduce(context, std::move(output));
  }
  if (vocab_parallel_) tensor_parallel_.all_reduce(context, output);
  if (dropout) {
    kernels::dropout({.tensor = output,
                      .probability = dropout_,
                      .seed = dropout_seed(context.dropout_seed, name(), kEmbeddingDropout),
                      .stream = stream});
  }
  if (context.training)
    saved_.put(batch.index,
               Saved{.tokens = batch.tokens, .positions = batch.positions, .dropout_seed = context.dropout_seed});
  return tensor_parallel_.sequence_shard(output);
}

Tensor LanguageModelEmbedding::backward(LayerContext& context, const Tensor& grad_output) {
  Saved saved = saved_.take(context.batch.index, name());
  const Stream stream = context.stream;
  const Tensor full_grad_output = tensor_parallel_.gather_sequence(context, grad_output);
  Tensor grad = full_grad_output;
  if (dropout_ > 0.0) {
    grad = Tensor::empty(full_grad_output.shape(), full_grad_output.dtype(), full_grad_output.device(), stream);
    kernels::copy({.source = full_grad_output, .destination = grad, .stream = stream});
    kernels::dropout({.tensor = grad,
                      .probability = dropout_,
                      .seed = dropout_seed(saved.dropout_seed, name(), kEmbeddingDropout),
                      .stream = stream});
  }
  if (word_embeddings_->grad.defined()) {
    word_embeddings_->start_grad(stream);
    kernels::embedding_backward({.indices = saved.tokens,
                                 .grad_output = grad,
                                 .grad_weight = word_embeddings_->grad,
                                 .scale = embedding_scale_,
                                 .first_row = vocab_parallel_ ? std::optional(vocab_begin_) : std::nullopt,
                                 .stream = stream});
  }
  if (position_embeddings_ != nullptr && position_embeddings_->grad.defined()) {
    position_embeddings_->start_grad(stream);
    kernels::embedding_backward({.indices = saved.positions,
                                 .grad_output = grad,
                                 .grad_weight = position_embeddings_->grad,
                                 .scale = embedding_scale_,
                                 .stream = stream});
  }
  return Tensor();
}

}  // namespace fast_llm::layers
