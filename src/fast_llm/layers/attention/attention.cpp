#include "fast_llm/layers/attention/attention.h"

#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/distributed/communicator.h"
#include "fast_llm/kernels/attention.h"
#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/attention_decode.h"
#include "fast_llm/kernels/embedding.h"
#include "fast_llm/kernels/pointwise.h"
#include "fast_llm/kernels/rotary.h"
#include "fast_llm/layers/common/parameter_settings.h"

namespace fast_llm::layers {

namespace {

LinearOptions projection_options(const AffineLinearConfig& config, int64_t input_size, int64_t output_size,
                                 int64_t hidden_size, double lr_scale, std::optional<LoraOptions> lora,
                                 const TensorParallelism& tensor_parallel, TensorParallelMode mode, int blocks = 1) {
  lr_scale = combine_lr_scales(lr_scale, config.lr_scale);
  FLM_ASSERT(config.bias.enabled.has_value(), "{}: bias.enabled is resolved at validation", config.path());
  return {.input_size = input_size,
          .output_size = output_size,
          .bias = *config.bias.enabled,
          .transposed_weight = false,
          .weight = parameter_settings(config.weight, default_weight_initialization(hidden_size), lr_scale),
          .bias_settings = parameter_settings(config.bias, default_bias_initialization(), lr_scale,
                                              /*default_weight_decay=*/false),
          .lora = std::move(lora),
          .tensor_parallel = tensor_parallel,
          .tensor_parallel_mode = tensor_parallel.enabled() ? mode : TensorParallelMode::none,
          .tensor_blocks = blocks};
}

// key_value's adapter, as Fast-LLM's: over the value half by default, the key half too with key_layer.apply_peft (one
// adapter over the contiguous rows it covers).
std::optional<LoraOptions> key_value_lora(const LoraConfig* lora, const AttentionConfig& config) {
  const int64_t half = int64_t(config.head_groups) * config.head_size;
  const bool key = config.key_layer.apply_peft.value_or(false), value = config.value_layer.apply_peft.value_or(true);
  if (lora == nullptr || (!key && !value)) return std::nullopt;
  return LoraOptions{.rank = lora->rank,
                     .alpha = lora->alpha,
                     .dropout = lora->dropout,
                     .begin = key ? 0 : half,
                     .end = value ? 2 * half : half};
}

// Tensor parallelism splits the head groups over the ranks, or (multi-query attention, one group, as Fast-LLM) the
// heads of the group, with key_value whole on every rank.
bool replicated_key_value(const AttentionConfig& config, const TensorParallelism& tensor_parallel) {
  return tensor_parallel.enabled() && config.head_groups == 1;
}

const AttentionConfig& checked(const AttentionConfig& config, const TensorParallelism& tensor_parallel) {
  if (config.heads % tensor_parallel.size != 0)
    throw ConfigError(config.field_path("heads"),
                      fmt::format("{} heads do not split over tensor_parallel {}: it must divide them", config.heads,
                                  tensor_parallel.size));
  if (config.head_groups % tensor_parallel.size != 0 && !replicated_key_value(config, tensor_parallel))
    throw ConfigError(config.field_path("head_groups"),
                      fmt::format("{} head groups do not split over tensor_parallel {}: it must divide them, or there "
                                  "must be one group (multi-query attention: each rank then holds the whole key and "
                                  "value projection)",
                                  config.head_groups, tensor_parallel.size));
  if (config.dropout > 0.0)
    throw NotSupportedError("layers", fmt::format("{}: attention dropout ({}) is not supported; set it to 0",
                                                  config.field_path("dropout"), config.dropout));
  if (config.value_norm)
    throw NotSupportedError("layers", fmt::format("{}: value normalization is not supported",
                                                  config.field_path("value_norm")));
  if (config.shared_key_value)
    throw NotSupportedError("layers", fmt::format("{}: shared key and value projections are not supported",
                                                  config.field_path("shared_key_value")));
  return config;
}

// Queries, keys or values of the computed rows (rows, heads, head_size) at attention's rows: each takes its source's.
Tensor to_attention_rows(const Tensor& values, const AttentionRows& rows, Stream stream) {
  const int64_t heads = values.size(1), head_size = values.size(2);
  return kernels::gather_rows(values.reshape(Shape{values.size(0), heads * head_size}), rows.sources, stream)
      .reshape(Shape{rows.count, heads, head_size});
}

// The key or value gradients of attention's rows, followed by a row of zeros, (attention rows + 1, width), summed into
// the computed rows: each computed row's own plus that of the row repeating it (the zero row when none does).
Tensor fold_to_computed_rows(const Tensor& padded, const AttentionRows& rows, Stream stream) {
  Tensor result = kernels::gather_rows(padded, rows.kept, stream);
  const Tensor repeats = kernels::gather_rows(padded, rows.repeating, stream);
  kernels::axpy({.input = repeats, .output = result, .alpha = 1.0, .stream = stream});
  return result;
}

std::unique_ptr<Normalization> optional_norm(std::string name, const std::optional<config::Dynamic<NormalizationConfig>>& config,
                                             int64_t head_size, double lr_scale) {
  if (!config) return nullptr;
  auto norm = std::make_unique<Normalization>(std::move(name), config->get(), head_size, lr_scale);
  if (norm->is_identity()) return nullptr;
  return norm;
}

}  // namespace

Attention::Attention(std::string name, const AttentionConfig& config, int64_t hidden_size, double lr_scale,
                     std::shared_ptr<Rotary> rotary, const LoraConfig* lora, TensorParallelism tensor_parallel)
    : Mixer(std::move(name)),
      heads_(checked(config, tensor_parallel).heads / tensor_parallel.size),
      head_groups_(replicated_key_value(config, tensor_parallel) ? 1 : config.head_groups / tensor_parallel.size),
      head_size_(config.head_size),
      causal_(config.causal),
      softmax_scale_(std::pow(double(config.head_size), -config.softmax_scale_power)),
      query_(child_name("query"),
             projection_options(config.query_layer, hidden_size, int64_t(heads_) * config.head_size, hidden_size,
                                combine_lr_scales(lr_scale, config.lr_scale),
                                lora_options(lora, config.query_layer, /*default_apply=*/true, 0,
                                             int64_t(heads_) * config.head_size),
                                tensor_parallel, TensorParallelMode::column)),
      key_value_(child_name("key_value"),
                 projection_options(config.key_layer, hidden_size, 2 * int64_t(head_groups_) * config.head_size,
                                    hidden_size, combine_lr_scales(lr_scale, config.lr_scale),
                                    key_value_lora(lora, config), tensor_parallel,
                                    replicated_key_value(config, tensor_parallel) ? TensorParallelMode::replicated
                                                                                  : TensorParallelMode::column,
                                    /*blocks=*/2)),
      dense_(child_name("dense"),
             projection_options(config.dense_layer, int64_t(heads_) * config.head_size, hidden_size, hidden_size,
                                combine_lr_scales(lr_scale, config.lr_scale),
                                lora_options(lora, config.dense_layer, /*default_apply=*/false, 0, hidden_size),
                                tensor_parallel, TensorParallelMode::row)),
      rotary_(std::move(rotary)),
      tensor_parallel_(tensor_parallel) {
  if (config.window_size) window_size_ = *config.window_size;
  const double mixer_lr_scale = combine_lr_scales(lr_scale, config.lr_scale);
  add_child(query_);
  add_child(key_value_);
  add_child(dense_);
  query_norm_ = optional_norm(child_name("q_norm"), config.query_norm, head_size_, mixer_lr_scale);
  key_norm_ = optional_norm(child_name("k_norm"), config.key_norm, head_size_, mixer_lr_scale);
  if (query_norm_) add_child(*query_norm_);
  if (key_norm_) add_child(*key_norm_);
  // The per-head norms are whole on every rank, which normalises only its own heads: their gradients are partial.
  for (Normalization* norm : {query_norm_.get(), key_norm_.get()})
    if (norm != nullptr && tensor_parallel.enabled())
      for (Parameter* parameter : norm->parameters())
        parameter->meta.tensor = {.size = tensor_parallel.size, .rank = tensor_parallel.rank, .partial_gradient = true};
  if (!rotary_) rotary_ = std::make_shared<Rotary>(config.rotary.get(), head_size_);
  FLM_ASSERT(!rotary_->enabled() || int64_t(rotary_->frequencies().inverse_frequencies.size()) * 2 == head_size_,
             "{}: rotary frequencies for another head size", this->name());
}

Attention::Attention(const AttentionConfig& config, const SublayerArguments& arguments)
    : Attention(arguments.name, config, arguments.hidden_size, arguments.lr_scale,
                arguments.shared.rotary(config.rotary.get(), config.head_size), arguments.lora,
                arguments.tensor_parallel) {}

FLM_REGISTER_SUBLAYER(Mixer, Attention, AttentionConfig, "attention");

Tensor Attention::forward(LayerContext& context, const Tensor& input) {
  FLM_CHECK(!tensor_parallel_.enabled() || context.key_value_cache == nullptr, "attention",
            "{}: generation with tensor parallelism is not supported", name());
  if (context.key_value_cache != nullptr) {
    FLM_ASSERT(!context.training, "{}: a key/value cache in a training forward", name());
    return forward_cached(input, context.batch, *context.key_value_cache, context.stream);
  }
  const Tensor full_input = tensor_parallel_.gather_sequence(context, input);
  Tensor output = saved_.keep(context, [&](Saved* saved) {
    Tensor result = forward(full_input, context.batch, saved, context.stream,
                            context.training ? std::optional<uint64_t>(context.dropout_seed) : std::nullopt);
    // Sequence-tensor parallelism keeps this rank's rows of the input only (backward gathers them again).
    if (saved != nullptr) saved->input = input;
    return result;
  });
  output = tensor_parallel_.reduce(context, std::move(output));
  dense_.add_bias(output, context.stream);
  return output;
}

Tensor Attention::backward(LayerContext& context, const Tensor& grad_output) {
  return tensor_parallel_.backward_reducing_input(
      context, grad_output, saved_.take(context.batch.index, name()),
      [this](const Tensor& full_grad_output, Saved saved, Stream stream, const InputGradientReady& ready) {
        return backward(full_grad_output, std::move(saved), stream, ready);
      });
}

Attention::Projections Attention::project(const Tensor& input, Normalization::Saved* query_norm,
                                          Normalization::Saved* key_norm, Stream stream,
                                          std::optional<uint64_t> dropout_seed) {
  const int64_t tokens = input.size(0);
  // (tokens, heads, head_size) and (tokens, head_groups, head_size), each contiguous.
  Projections result{
      .query = query_.forward(input, stream, std::nullopt, dropout_seed).reshape(Shape{tokens, heads_, head_size_}),
      .key = key_value_.forward(input, stream, key_range(), dropout_seed)
                 .reshape(Shape{tokens, head_groups_, head_size_}),
      .value = key_value_.forward(input, stream, value_range(), dropout_seed)
                   .reshape(Shape{tokens, head_groups_, head_size_})};
  if (query_norm_) {
    result.query = query_norm_->forward(result.query.reshape(Shape{tokens * heads_, head_size_}), query_norm, stream)
                       .reshape(Shape{tokens, heads_, head_size_});
  }
  if (key_norm_) {
    result.key = key_norm_->forward(result.key.reshape(Shape{tokens * head_groups_, head_size_}), key_norm, stream)
                     .reshape(Shape{tokens, head_groups_, head_size_});
  }
  return result;
}

Tensor Attention::attend(const Projections& projections, const Tensor& cu_seqlens, int64_t max_seqlen,
                         int64_t query_offset, Tensor* logsumexp_out, Stream stream) const {
  const Tensor& query = projections.query;
  const int64_t tokens = query.size(0);
  Tensor output = Tensor::empty(query.shape(), query.dtype(), query.device(), stream);
  // fp64 statistics for fp64 compute (exact CPU tests), fp32 otherwise.
  const DType statistics_dtype = query.dtype() == DType::float64 ? DType::float64 : DType::float32;
  Tensor logsumexp = Tensor::empty(Shape{heads_, tokens}, statistics_dtype, query.device(), stream);
  kernels::attention_forward({.query = query,
                              .key = projections.key,
                              .value = projections.value,
                              .cu_seqlens = cu_seqlens,
                              .max_seqlen = max_seqlen,
                              .output = output,
                              .logsumexp = logsumexp,
                              .softmax_scale = softmax_scale_,
                              .causal = causal_,
                              .window_size = window_size_,
                              .query_offset = query_offset,
                              .stream = stream});
  if (logsumexp_out != nullptr) *logsumexp_out = logsumexp;
  return output;
}

Attention::KeyValues Attention::carried_key_values(const Tensor& key, const Tensor& value, const SequencePiece& piece,
                                                   Stream stream) {
  if (!causal_ && piece.splits > 1)
    throw NotSupportedError("layers", fmt::format("{}: attention without causality sees the keys of later splits, "
                                                  "which schedule.micro_batch_splits {} computes after this one; "
                                                  "use 1 (sequence_data_parallel gathers every key)",
                                                  name(), piece.splits));
  auto carry = key_value_carries_.find(piece.sequence);
  if (carry == key_value_carries_.end()) {
    FLM_ASSERT(piece.split == 0, "{}: split {} of sequence {} without the keys of the splits before it", name(),
               piece.split, piece.sequence);
    const Shape shape{piece.sequence_tokens, head_groups_, head_size_};
    carry = key_value_carries_
                .emplace(piece.sequence, KeyValues{Tensor::empty(shape, key.dtype(), key.device(), stream),
                                                   Tensor::empty(shape, value.dtype(), value.device(), stream)})
                .first;
  }
  const int64_t split_begin = int64_t(piece.split) * piece.split_tokens, split_end = piece.key_end();
  // Both gathers are started before either is waited for, so that they travel together.
  std::vector<std::unique_ptr<distributed::Work>> gathers;
  for (const auto& [part, whole] : {std::pair{&key, &carry->second.key}, std::pair{&value, &carry->second.value}}) {
    Tensor rows = whole->slice(0, split_begin, split_end);
    if (piece.sequence_data != nullptr)
      gathers.push_back(piece.sequence_data->all_gather(*part, rows, stream));
    else
      rows.copy_bytes_from(*part, stream);
  }
  for (const auto& gather : gathers) gather->wait(stream);
  KeyValues result{carry->second.key.slice(0, 0, split_end), carry->second.value.slice(0, 0, split_end)};
  // The saved state of each split holds its rows; the map lets go after the last split.
  if (piece.split + 1 == piece.splits) key_value_carries_.erase(carry);
  return result;
}

Attention::KeyValues Attention::piece_gradients(const Tensor& grad_key, const Tensor& grad_value,
                                                const SequencePiece& piece, Stream stream) {
  const int64_t split_begin = int64_t(piece.split) * piece.split_tokens, split_end = piece.key_end();
  // The gradients of the split's rows on this rank: with one split, its attention's own; otherwise the carry's sums.
  KeyValues split{grad_key, grad_value};
  if (piece.splits > 1) {
    auto carry = gradient_carries_.find(piece.sequence);
    if (carry == gradient_carries_.end()) {
      FLM_ASSERT(piece.split + 1 == piece.splits, "{}: backward of split {} of sequence {} before its last split's",
                 name(), piece.split, piece.sequence);
      const Shape shape{piece.sequence_tokens, head_groups_, head_size_};
      KeyValues zeros{Tensor::empty(shape, grad_key.dtype(), grad_key.device(), stream),
                      Tensor::empty(shape, grad_value.dtype(), grad_value.device(), stream)};
      kernels::fill({.tensor = zeros.key, .value = 0.0, .stream = stream});
      kernels::fill({.tensor = zeros.value, .value = 0.0, .stream = stream});
      carry = gradient_carries_.emplace(piece.sequence, std::move(zeros)).first;
    }
    for (const auto& [gradient, sum] :
         {std::pair{&grad_key, &carry->second.key}, std::pair{&grad_value, &carry->second.value}}) {
      Tensor rows = sum->slice(0, 0, split_end);
      kernels::axpy({.input = *gradient, .output = rows, .alpha = 1.0, .stream = stream});
    }
    split = {carry->second.key.slice(0, split_begin, split_end), carry->second.value.slice(0, split_begin, split_end)};
    if (piece.split == 0) gradient_carries_.erase(carry);
  }
  if (piece.sequence_data == nullptr) return split;
  // Every rank of the group holds its own queries' share of the split's key gradients: summed, each keeps its rows.
  const int64_t rows = piece.split_tokens / piece.sequence_data->size();
  KeyValues own{Tensor::empty(Shape{rows, head_groups_, head_size_}, grad_key.dtype(), grad_key.device(), stream),
                Tensor::empty(Shape{rows, head_groups_, head_size_}, grad_value.dtype(), grad_value.device(), stream)};
  const auto keys = piece.sequence_data->reduce_scatter(split.key, own.key, distributed::ReduceOp::sum, stream);
  const auto values = piece.sequence_data->reduce_scatter(split.value, own.value, distributed::ReduceOp::sum, stream);
  keys->wait(stream);
  values->wait(stream);
  return own;
}

Tensor Attention::forward(const Tensor& input, const MicroBatch& batch, Saved* saved, Stream stream,
                          std::optional<uint64_t> dropout_seed) {
  const std::optional<SequencePiece>& piece = batch.sequence_piece;
  const std::optional<AttentionRows>& attention_rows = batch.attention_rows;
  FLM_ASSERT(!piece || !attention_rows, "{}: a sequence piece with shared prompt rows", name());
  Normalization::Saved query_norm_saved, key_norm_saved;
  Projections projections = project(input, &query_norm_saved, &key_norm_saved, stream, dropout_seed);
  if (attention_rows)
    for (Tensor* tensor : {&projections.query, &projections.key, &projections.value})
      *tensor = to_attention_rows(*tensor, *attention_rows, stream);
  const int64_t tokens = projections.query.size(0);  // attention's rows
  if (rotary_->enabled()) {
    // The tables' rows of the tokens' rows in the sequence.
    const int64_t begin = piece ? piece->begin : 0;
    const Rotary::Tables tables = rotary_->tables(begin + tokens, input.device(), stream, input.dtype());
    const Tensor cos = tables.cos.slice(0, begin, begin + tokens), sin = tables.sin.slice(0, begin, begin + tokens);
    for (Tensor* tensor : {&projections.query, &projections.key})
      kernels::rotary_apply({.tensor = *tensor, .cos = cos, .sin = sin, .inverse = false, .stream = stream});
  }
  if (piece) {
    KeyValues keys = carried_key_values(projections.key, projections.value, *piece, stream);
    projections.key = std::move(keys.key);
    projections.value = std::move(keys.value);
  }
  const Tensor& cu_seqlens = piece ? piece->key_cu_seqlens : batch.cu_seqlens;
  const int64_t max_seqlen = piece ? piece->key_max_seqlen : batch.max_seqlen;
  Tensor logsumexp;
  Tensor output = attend(projections, cu_seqlens, max_seqlen, piece ? piece->begin : 0, &logsumexp, stream);
  Tensor flat_output = output.reshape(Shape{tokens, int64_t(heads_) * head_size_});
  if (attention_rows) flat_output = kernels::gather_rows(flat_output, attention_rows->kept, stream);
  Tensor result = dense_.forward(flat_output, stream, std::nullopt, dropout_seed);
  if (saved != nullptr) {
    *saved = Saved{.input = input,
                   .query = projections.query,
                   .key = projections.key,
                   .value = projections.value,
                   .output = output,
                   .logsumexp = logsumexp,
                   .cu_seqlens = cu_seqlens,
                   .max_seqlen = max_seqlen,
                   .piece = piece,
                   .attention_rows = attention_rows,
                   .query_norm = std::move(query_norm_saved),
                   .key_norm = std::move(key_norm_saved),
                   .dropout_seed = dropout_seed};
  }
  return result;
}

Tensor Attention::forward_cached(const Tensor& input, const MicroBatch& batch, KeyValueCache& cache, Stream stream) {
  const int64_t tokens = input.size(0);
  const Device device = input.device();
  Projections projections = project(input, nullptr, nullptr, stream);
  if (rotary_->enabled()) {
    // The rows of the tables at each token's position in its own sequence (gathered once per step).
    const KeyValueCache::PositionTables* tables = cache.step_rotary(rotary_.get());
    if (tables == nullptr) {
      const Rotary::Tables full = rotary_->tables(cache.capacity(), device, stream, input.dtype());
      KeyValueCache::PositionTables gathered{.cos = kernels::gather_rows(full.cos, batch.positions, stream),
                                             .sin = kernels::gather_rows(full.sin, batch.positions, stream)};
      tables = &cache.keep_step_rotary(rotary_.get(), std::move(gathered));
    }
    for (Tensor* tensor : {&projections.query, &projections.key})
      kernels::rotary_apply({.tensor = *tensor, .cos = tables->cos, .sin = tables->sin, .inverse = false,
                             .stream = stream});
  }
  KeyValueCache::LayerCache& layer = cache.layer(this, head_groups_, head_size_, stream);
  Tensor output;
  if (cache.step() == KeyValueCache::Step::decode) {
    FLM_ASSERT(tokens == cache.batch_size(), "{}: a decode step of {} tokens for {} sequences", name(), tokens,
               cache.batch_size());
    output = Tensor::empty(projections.query.shape(), projections.query.dtype(), device, stream);
    kernels::attention_decode({.query = projections.query,
                               .key = projections.key,
                               .value = projections.value,
                               .key_cache = layer.key,
                               .value_cache = layer.value,
                               .lengths = cache.device_lengths(),
                               .output = output,
                               .softmax_scale = softmax_scale_,
                               .window_size = window_size_,
                               .stream = stream});
  } else {
    output = attend(projections, batch.cu_seqlens, batch.max_seqlen, /*query_offset=*/0, nullptr, stream);
    // Prompt b is document b: its keys and values go to rows [0, length) of sequence b.
    int64_t begin = 0;
    for (int64_t sequence = 0; sequence < cache.batch_size(); ++sequence) {
      const int64_t length = cache.prompt_lengths()[size_t(sequence)];
      layer.key.select(0, sequence).slice(0, 0, length).copy_bytes_from(
          projections.key.slice(0, begin, begin + length), stream);
      layer.value.select(0, sequence).slice(0, 0, length).copy_bytes_from(
          projections.value.slice(0, begin, begin + length), stream);
      begin += length;
    }
    FLM_ASSERT(begin == tokens, "{}: prompts of {} tokens in a prefill of {}", name(), begin, tokens);
  }
  return dense_.forward(output.reshape(Shape{tokens, int64_t(heads_) * head_size_}), stream);
}

Tensor Attention::backward(const Tensor& grad_output, Saved saved, Stream stream,
                           const InputGradientReady& input_gradient_ready) {
  FLM_ASSERT(saved.input.defined(), "{}: backward without a saved forward", name());
  const int64_t tokens = saved.input.size(0);
  const Device device = saved.input.device();
  const DType dtype = saved.query.dtype();
  const std::optional<AttentionRows> attention_rows = std::move(saved.attention_rows);
  Tensor grad_query = Tensor::empty(saved.query.shape(), dtype, device, stream);
  // With shared prompt rows, the key and value gradients of the attention rows are followed by a row of zeros: what a
  // computed row that no row repeats adds (fold_to_computed_rows).
  const auto key_value_gradient = [&](const Tensor& like, Tensor& padded) {
    if (!attention_rows) return Tensor::empty(like.shape(), dtype, device, stream);
    const int64_t rows = like.size(0), width = like.numel() / rows;
    padded = Tensor::empty(Shape{rows + 1, width}, dtype, device, stream);
    Tensor zero_row = padded.slice(0, rows, rows + 1);
    kernels::fill({.tensor = zero_row, .value = 0.0, .stream = stream});
    return padded.slice(0, 0, rows).reshape(like.shape());
  };
  Tensor padded_grad_key, padded_grad_value;
  Tensor grad_key = key_value_gradient(saved.key, padded_grad_key);
  Tensor grad_value = key_value_gradient(saved.value, padded_grad_value);
  // With rotary, the kernel returns the gradients of the query and key before their rotation (tables of the key rows).
  Rotary::Tables rotary_tables;
  if (rotary_->enabled()) rotary_tables = rotary_->tables(saved.key.size(0), device, stream, dtype);
  {
    Tensor flat_output = saved.output.reshape(Shape{saved.output.size(0), int64_t(heads_) * head_size_});
    // The dense projection's input, gathered again rather than kept from the forward (a copy of the output per layer).
    if (attention_rows) flat_output = kernels::gather_rows(flat_output, attention_rows->kept, stream);
    Tensor grad_attention = dense_.backward(grad_output, flat_output, stream, std::nullopt, saved.dropout_seed);
    // A repeated row's output is not used: its gradient is zero.
    if (attention_rows) grad_attention = kernels::scatter_rows(grad_attention, attention_rows->positions, stream);
    grad_attention = grad_attention.reshape(saved.output.shape());
    kernels::attention_backward({.grad_output = grad_attention,
                                 .query = saved.query,
                                 .key = saved.key,
                                 .value = saved.value,
                                 .output = saved.output,
                                 .logsumexp = saved.logsumexp,
                                 .cu_seqlens = saved.cu_seqlens,
                                 .max_seqlen = saved.max_seqlen,
                                 .grad_query = grad_query,
                                 .grad_key = grad_key,
                                 .grad_value = grad_value,
                                 .softmax_scale = softmax_scale_,
                                 .causal = causal_,
                                 .window_size = window_size_,
                                 .query_offset = saved.piece ? saved.piece->begin : 0,
                                 .rotary_cos = rotary_->enabled() ? &rotary_tables.cos : nullptr,
                                 .rotary_sin = rotary_->enabled() ? &rotary_tables.sin : nullptr,
                                 .stream = stream});
  }
  // Only the projections' input and the norms' state are read from here on (the stream-ordered allocator reuses the
  // memory of the rest for the gradients below).
  saved.query = saved.key = saved.value = saved.output = saved.logsumexp = Tensor();
  if (saved.piece) {
    KeyValues own = piece_gradients(grad_key, grad_value, *saved.piece, stream);
    grad_key = std::move(own.key);
    grad_value = std::move(own.value);
  }
  if (attention_rows) {
    // A repeated row's query gradient is zero (so is its output's); its key and value gradients add to its source's.
    grad_query = kernels::gather_rows(grad_query.reshape(Shape{grad_query.size(0), int64_t(heads_) * head_size_}),
                                      attention_rows->kept, stream)
                     .reshape(Shape{tokens, heads_, head_size_});
    grad_key = fold_to_computed_rows(padded_grad_key, *attention_rows, stream)
                   .reshape(Shape{tokens, head_groups_, head_size_});
    grad_value = fold_to_computed_rows(padded_grad_value, *attention_rows, stream)
                     .reshape(Shape{tokens, head_groups_, head_size_});
    padded_grad_key = padded_grad_value = Tensor();
  }
  if (query_norm_) {
    grad_query =
        query_norm_->backward(grad_query.reshape(Shape{tokens * heads_, head_size_}), saved.query_norm, stream);
  }
  if (key_norm_) {
    grad_key = key_norm_->backward(grad_key.reshape(Shape{tokens * head_groups_, head_size_}), saved.key_norm, stream);
  }
  saved.query_norm = saved.key_norm = Normalization::Saved();
  Tensor grad_input = Tensor::empty(saved.input.shape(), saved.input.dtype(), device, stream);
  const Tensor grad_query_rows = grad_query.reshape(Shape{tokens, int64_t(heads_) * head_size_});
  const Tensor grad_key_rows = grad_key.reshape(Shape{tokens, int64_t(head_groups_) * head_size_});
  const Tensor grad_value_rows = grad_value.reshape(Shape{tokens, int64_t(head_groups_) * head_size_});
  // With a caller waiting for the input gradient, it comes first and the parameter gradients after it.
  const bool split = bool(input_gradient_ready);
  query_.backward(grad_query_rows, saved.input, &grad_input, /*accumulate_grad_input=*/false, stream, std::nullopt,
                  saved.dropout_seed, /*parameter_gradients=*/!split);
  key_value_.backward(grad_key_rows, saved.input, &grad_input, /*accumulate_grad_input=*/true, stream, key_range(),
                      saved.dropout_seed, /*parameter_gradients=*/!split);
  key_value_.backward(grad_value_rows, saved.input, &grad_input, /*accumulate_grad_input=*/true, stream,
                      value_range(), saved.dropout_seed, /*parameter_gradients=*/!split);
  if (!split) return grad_input;
  input_gradient_ready(grad_input);
  query_.backward(grad_query_rows, saved.input, nullptr, false, stream, std::nullopt, saved.dropout_seed);
  key_value_.backward(grad_key_rows, saved.input, nullptr, false, stream, key_range(), saved.dropout_seed);
  key_value_.backward(grad_value_rows, saved.input, nullptr, false, stream, value_range(), saved.dropout_seed);
  return grad_input;
}

int64_t Attention::matmul_weight_count() const {
  return query_.input_size() * query_.output_size() + key_value_.input_size() * key_value_.output_size() +
         dense_.input_size() * dense_.output_size();
}

double Attention::flops(const MicroBatch& batch) const {
  const int64_t tokens = batch.num_tokens();
  double result = 6.0 * double(tokens) * double(matmul_weight_count());
  std::vector<int64_t> lengths = batch.sequence_lengths;
  if (lengths.empty() && batch.cu_seqlens.defined()) {
    // Reading a device tensor here would make the host wait for the step: GPU batches carry their lengths.
    FLM_CHECK(batch.cu_seqlens.device().is_cpu(), "attention",
              "FLOP count of a micro-batch on {} without host sequence lengths", batch.cu_seqlens.device().str());
    const int32_t* data = batch.cu_seqlens.data_as<int32_t>();
    const int64_t stride = batch.cu_seqlens.stride(0);
    for (int64_t document = 0; document + 1 < batch.cu_seqlens.numel(); ++document)
      lengths.push_back(int64_t(data[(document + 1) * stride]) - data[document * stride]);
  } else if (lengths.empty()) {
    lengths.push_back(tokens);
  }
  result += 12.0 * double(heads_) * double(head_size_) * double(attention_pair_count(lengths, causal_, window_size_));
  return result;
}

double Attention::mixing_flops_per_token(int64_t sequence_length) const {
  const double width = double(heads_) * double(head_size_);
  if (causal_ && !window_size_) return 6.0 * double(sequence_length) * width;
  // Same accounting as flops(): 12 * width per attended pair, per token of the sequence.
  return 12.0 * width *
         double(attention_pair_count(std::span(&sequence_length, 1), causal_, window_size_)) / double(sequence_length);
}

int64_t attention_pair_count(std::span<const int64_t> document_lengths, bool causal, std::optional<int64_t> window_size) {
  int64_t pairs = 0;
  for (int64_t length : document_lengths) {
    if (!window_size && !causal) {
      pairs += length * length;
    } else if (!window_size || length <= *window_size) {
      pairs += length * (length + 1) / 2;
    } else {
      // A window never shows later keys (causal or not): the first `window` queries see 1..window keys, the others
      // `window` each.
      const int64_t window = *window_size;
      pairs += window * (window + 1) / 2 + (length - window) * window;
    }
  }
  return pairs;
}

}  // namespace fast_llm::layers
