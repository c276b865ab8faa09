// The generation loop of generator.h: host-side batch assembly, the model's layers run with a key/value cache in the
// context, logits to the host once per step (sampling and streaming read them there).
#include "fast_llm/models/gpt/generator.h"

#include <algorithm>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/embedding.h"
#include "fast_llm/layers/attention/key_value_cache.h"

namespace fast_llm::models::gpt {

namespace {

constexpr std::string_view kComponent = "generate";

}  // namespace

Generator::Generator(GPTModel& model, Device device, DType compute_dtype)
    : model_(model), device_(device), compute_dtype_(compute_dtype), stream_(compute_stream(device)) {}

Tensor Generator::forward(layers::LayerContext& context) {
  Tensor x = model_.embeddings().forward(context, Tensor());
  for (int block = 0; block < model_.block_count(); ++block) x = model_.block(block).forward(context, x);
  return x;
}

Tensor Generator::host_logits(const Tensor& rows) {
  Tensor logits = model_.head().logits(rows, stream_);
  if (logits.dtype() != DType::float32) {
    // fp64 compute: the sampler reads fp32 rows.
    Tensor host = logits.to(Device::cpu(), stream_);
    Tensor narrowed = Tensor::empty(host.shape(), DType::float32);
    for (int64_t index = 0; index < host.numel(); ++index)
      narrowed.data_as<float>()[index] = float(host.data_as<double>()[index]);
    return narrowed;
  }
  if (device_.is_cpu()) return logits;
  if (!pinned_logits_.defined() || pinned_logits_.shape() != logits.shape())
    pinned_logits_ = Tensor::empty_pinned(logits.shape(), DType::float32);
  pinned_logits_.copy_bytes_from(logits, stream_);
  synchronize(device_, stream_);
  return pinned_logits_;
}

std::vector<std::vector<int64_t>> Generator::generate(const std::vector<std::vector<int64_t>>& prompts,
                                                      const GenerationSettings& settings, uint64_t first_index,
                                                      const TokenCallback& on_token) {
  const int64_t batch = int64_t(prompts.size());
  std::vector<std::vector<int64_t>> completions(prompts.size());
  if (batch == 0 || settings.max_new_tokens <= 0) return completions;
  const int64_t vocab = model_.embeddings().word_embeddings().weight.size(0);
  std::vector<int64_t> lengths, tokens, positions, cu_seqlens{0}, last_rows;
  int64_t longest = 0;
  for (size_t index = 0; index < prompts.size(); ++index) {
    const std::vector<int64_t>& prompt = prompts[index];
    FLM_CHECK(!prompt.empty(), kComponent, "prompt {} is empty: generation needs at least one token to start from",
              first_index + index);
    for (int64_t token : prompt)
      FLM_CHECK(token >= 0 && token < vocab, kComponent, "prompt {} has token {}, outside the model's vocabulary of {}",
                first_index + index, token, vocab);
    lengths.push_back(int64_t(prompt.size()));
    longest = std::max(longest, int64_t(prompt.size()));
    tokens.insert(tokens.end(), prompt.begin(), prompt.end());
    for (int64_t position = 0; position < int64_t(prompt.size()); ++position) positions.push_back(position);
    cu_seqlens.push_back(cu_seqlens.back() + int64_t(prompt.size()));
    last_rows.push_back(cu_seqlens.back() - 1);
  }
  const int64_t capacity = longest + settings.max_new_tokens;
  if (const layers::Parameter* table = model_.embeddings().position_embeddings())
    FLM_CHECK(capacity <= table->meta.shape[0], kComponent,
              "a prompt of {} tokens and {} new ones need {} positions; the model's position embeddings have {}",
              longest, settings.max_new_tokens, capacity, table->meta.shape[0]);
  layers::KeyValueCache cache(batch, capacity, compute_dtype_, device_);
  std::vector<bool> finished(prompts.size(), false);
  std::vector<int64_t> next(prompts.size());

  // Chooses each sequence's next token from the step's logits (batch, vocab); returns whether any is still running.
  auto choose = [&](const Tensor& logits) {
    // sample_token is a pure function of the row, the prompt's index and the step, so the rows are sampled in parallel
    // (batch 16 at a 128k vocabulary is 2M logits to scan on the host each step); the bookkeeping and the callbacks
    // then run in order.
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t index = 0; index < batch; ++index) {
      if (finished[size_t(index)]) continue;
      const std::span<const float> row(logits.data_as<float>() + index * vocab, size_t(vocab));
      next[size_t(index)] = engine::sample_token(row, settings.sampling, first_index + uint64_t(index),
                                                 completions[size_t(index)].size());
    }
    bool running = false;
    for (size_t index = 0; index < prompts.size(); ++index) {
      if (finished[index]) continue;
      completions[index].push_back(next[index]);
      if (on_token) on_token(index, next[index]);
      finished[index] = std::find(settings.eos_token_ids.begin(), settings.eos_token_ids.end(), next[index]) !=
                            settings.eos_token_ids.end() ||
                        int64_t(completions[index].size()) >= settings.max_new_tokens;
      running = running || !finished[index];
    }
    return running;
  };

  // Prefill: every prompt at once, one document each.
  cache.begin_prefill(lengths);
  layers::MicroBatch prefill{.index = 0,
                             .tokens = Tensor::from_indices(tokens, DType::int64, device_, stream_),
                             .labels = Tensor(),
                             .positions = Tensor::from_indices(positions, DType::int64, device_, stream_),
                             .cu_seqlens = Tensor::from_indices(cu_seqlens, DType::int32, device_, stream_),
                             .max_seqlen = longest,
                             .sequence_lengths = lengths};
  layers::LayerContext prefill_context{.batch = prefill,
                                       .device = device_,
                                       .compute_dtype = compute_dtype_,
                                       .stream = stream_,
                                       .training = false,
                                       .key_value_cache = &cache};
  Tensor hidden = forward(prefill_context);  // (prompt tokens, hidden)
  const Tensor last =
      kernels::gather_rows(hidden, Tensor::from_indices(last_rows, DType::int64, device_, stream_), stream_);
  cache.advance();
  bool running = choose(host_logits(last));

  // Decode: one token per sequence and step.
  while (running) {
    cache.begin_decode(stream_);
    layers::MicroBatch step{.index = 0,
                            .tokens = Tensor::from_indices(next, DType::int64, device_, stream_),
                            .labels = Tensor(),
                            .positions = Tensor::from_indices(cache.lengths(), DType::int64, device_, stream_),
                            .cu_seqlens = Tensor(),
                            .max_seqlen = 1,
                            .sequence_lengths = {}};
    layers::LayerContext context{.batch = step,
                                 .device = device_,
                                 .compute_dtype = compute_dtype_,
                                 .stream = stream_,
                                 .training = false,
                                 .key_value_cache = &cache};
    Tensor output = forward(context);  // (batch, hidden)
    cache.advance();
    running = choose(host_logits(output));
  }
  return completions;
}

}  // namespace fast_llm::models::gpt
