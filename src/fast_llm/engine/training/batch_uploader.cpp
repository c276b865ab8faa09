// Host batches -> micro-batches on the compute device.
#include "fast_llm/engine/training/batch_uploader.h"

#include <cstring>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/data/shared_prompts.h"
#include "fast_llm/layers/language_model/loss_rows.h"

namespace fast_llm::engine {
namespace {

// Byte layout of a packed batch: tokens, labels, positions, the loss rows' positions (tokens each), the loss rows and
// their labels (loss rows each), when its pairs share their prompt rows the attention rows' sources and positions
// (attention rows each) and the kept and repeating rows (tokens each; all int64), then cu_seqlens (int32), then when
// the batch has token data advantages, old log-probabilities (float32) and label documents (int32); every part is
// aligned to its type because the int64 parts come first.
struct Layout {
  int64_t tokens = 0, segments = 0;  // segments + 1 cu_seqlens entries
  int64_t loss_rows = 0;
  int64_t attention_rows = 0;  // 0: the batch's rows are attention's (no shared prompt rows)
  bool token_data = false;
  size_t labels() const { return size_t(tokens) * 8; }
  size_t positions() const { return 2 * size_t(tokens) * 8; }
  size_t loss_row_positions() const { return 3 * size_t(tokens) * 8; }
  size_t loss_rows_offset() const { return 4 * size_t(tokens) * 8; }
  size_t loss_labels() const { return loss_rows_offset() + size_t(loss_rows) * 8; }
  size_t attention_sources() const { return loss_labels() + size_t(loss_rows) * 8; }
  size_t attention_positions() const { return attention_sources() + size_t(attention_rows) * 8; }
  size_t kept_rows() const { return attention_positions() + size_t(attention_rows) * 8; }
  size_t repeating_rows() const { return kept_rows() + (attention_rows > 0 ? size_t(tokens) * 8 : 0); }
  size_t cu_seqlens() const { return repeating_rows() + (attention_rows > 0 ? size_t(tokens) * 8 : 0); }
  size_t advantages() const { return cu_seqlens() + size_t(segments + 1) * 4; }
  size_t old_log_probabilities() const { return advantages() + size_t(tokens) * 4; }
  size_t label_documents() const { return old_log_probabilities() + size_t(tokens) * 4; }
  size_t bytes() const { return token_data ? label_documents() + size_t(tokens) * 4 : advantages(); }
};

}  // namespace

BatchUploader::BatchUploader(Device device, Stream compute_stream, int slots, layers::LossRowRule loss_row_rule,
                             bool share_prompt_rows)
    : device_(device),
      compute_stream_(compute_stream),
      loss_row_rule_(loss_row_rule),
      share_prompt_rows_(share_prompt_rows && loss_row_rule == layers::LossRowRule::preference_spans) {
  FLM_CHECK(slots >= 1, "training", "the batch uploader needs at least one slot, got {}", slots);
  if (device_.is_cpu()) return;
  upload_stream_ = create_stream(device_);
  slots_.resize(size_t(slots));
  for (Slot& slot : slots_) slot.copied = std::make_unique<Event>(device_);
}

layers::MicroBatch BatchUploader::upload(const std::shared_ptr<const data::Batch>& original) {
  FLM_CHECK(original->predicted_tokens == 1, "training",
            "batches with {} predicted tokens (multi-token prediction) are not supported", original->predicted_tokens);
  // With shared prompt rows, the computed rows are uploaded as the batch (the maps' owner keeps them alive).
  std::shared_ptr<const data::Batch> batch = original;
  std::shared_ptr<const data::SharedPromptBatch> shared;
  if (share_prompt_rows_)
    if (std::optional<data::SharedPromptBatch> rows = data::share_prompt_rows(*original)) {
      shared = std::make_shared<const data::SharedPromptBatch>(std::move(*rows));
      batch = std::shared_ptr<const data::Batch>(shared, &shared->batch);
      if (!logged_shared_prompt_rows_)
        log_main("Preference pairs share their prompt rows: the layers compute them once ({} of the {} rows of the "
                 "first such micro-batch)",
                 batch->micro_batch_size, original->micro_batch_size);
      logged_shared_prompt_rows_ = true;
    }
  const int64_t attention_rows = shared ? int64_t(shared->attention_sources.size()) : 0;
  const int64_t tokens = batch->micro_batch_size;
  const int64_t segments = int64_t(batch->cu_seqlens.size()) - 1;
  FLM_ASSERT(int64_t(batch->tokens.size()) == tokens && int64_t(batch->positions.size()) == tokens &&
                 int64_t(batch->labels.size()) >= tokens && segments >= 0,
             "batch of sample {} has inconsistent sizes", batch->sample_index);
  const std::span<const int64_t> labels = batch->labels_at(1);
  const bool token_data = batch->has_token_data();
  FLM_ASSERT(!token_data || (int64_t(batch->advantages.size()) == tokens &&
                             int64_t(batch->old_log_probabilities.size()) == tokens &&
                             int64_t(batch->label_documents.size()) == tokens),
             "batch of sample {} has token data of inconsistent sizes", batch->sample_index);
  layers::MicroBatch result{.index = 0, .max_seqlen = batch->max_seqlen};
  result.num_documents = batch->num_sample_documents;
  result.sequence_lengths.assign(batch->lengths.begin(), batch->lengths.end());
  for (const data::PreferenceRows& pair : batch->preference_pairs)
    result.preference_pairs.push_back({.chosen_begin = pair.chosen_begin,
                                       .chosen_end = pair.chosen_end,
                                       .rejected_begin = pair.rejected_begin,
                                       .rejected_end = pair.rejected_end});
  // The rows the head may compute alone (layers/language_model/loss_rows.h), found here where the labels are on the
  // host; the pairs in their numbering.
  auto loss_rows =
      std::make_shared<layers::LossRows>(layers::find_loss_rows(labels, result.preference_pairs, loss_row_rule_));
  result.loss_preference_pairs = loss_rows->preference_pairs;
  const int64_t loss_row_count = int64_t(loss_rows->rows.size());

  if (device_.is_cpu()) {
    std::shared_ptr<void> owner = std::const_pointer_cast<data::Batch>(batch);
    result.loss_rows = Tensor::from_blob(loss_rows->rows.data(), Shape{loss_row_count}, DType::int64, Device::cpu(),
                                         loss_rows);
    result.loss_labels = Tensor::from_blob(loss_rows->labels.data(), Shape{loss_row_count}, DType::int64,
                                           Device::cpu(), loss_rows);
    result.loss_row_positions = Tensor::from_blob(loss_rows->positions.data(), Shape{tokens}, DType::int64,
                                                  Device::cpu(), loss_rows);
    auto wrap = [&](const void* values, int64_t count, DType dtype) {
      return Tensor::from_blob(const_cast<void*>(values), Shape{count}, dtype, Device::cpu(), owner);
    };
    result.tokens = wrap(batch->tokens.data(), tokens, DType::int64);
    result.labels = wrap(labels.data(), tokens, DType::int64);
    result.positions = wrap(batch->positions.data(), tokens, DType::int64);
    result.cu_seqlens = wrap(batch->cu_seqlens.data(), segments + 1, DType::int32);
    // `owner` is the shared batch's, which holds the maps too.
    if (shared)
      result.attention_rows = layers::AttentionRows{.count = attention_rows,
                                                    .sources = wrap(shared->attention_sources.data(), attention_rows,
                                                                    DType::int64),
                                                    .positions = wrap(shared->attention_positions.data(),
                                                                      attention_rows, DType::int64),
                                                    .kept = wrap(shared->kept_rows.data(), tokens, DType::int64),
                                                    .repeating = wrap(shared->repeating_rows.data(), tokens,
                                                                      DType::int64)};
    if (token_data) {
      result.advantages = wrap(batch->advantages.data(), tokens, DType::float32);
      result.old_log_probabilities = wrap(batch->old_log_probabilities.data(), tokens, DType::float32);
      result.label_documents = wrap(batch->label_documents.data(), tokens, DType::int32);
    }
    return result;
  }

  const Layout layout{.tokens = tokens,
                      .segments = segments,
                      .loss_rows = loss_row_count,
                      .attention_rows = attention_rows,
                      .token_data = token_data};
  Slot& slot = slots_[next_slot_];
  next_slot_ = (next_slot_ + 1) % slots_.size();
  // The slot's previous copy must have read the buffer before it is overwritten.
  if (slot.in_flight) slot.copied->synchronize();
  if (!slot.buffer.defined() || slot.buffer.nbytes() < layout.bytes())
    slot.buffer = Tensor::empty_pinned(Shape{int64_t(layout.bytes())}, DType::uint8);
  auto* host = static_cast<char*>(slot.buffer.data());
  std::memcpy(host, batch->tokens.data(), size_t(tokens) * 8);
  std::memcpy(host + layout.labels(), labels.data(), size_t(tokens) * 8);
  std::memcpy(host + layout.positions(), batch->positions.data(), size_t(tokens) * 8);
  std::memcpy(host + layout.loss_row_positions(), loss_rows->positions.data(), size_t(tokens) * 8);
  std::memcpy(host + layout.loss_rows_offset(), loss_rows->rows.data(), size_t(loss_row_count) * 8);
  std::memcpy(host + layout.loss_labels(), loss_rows->labels.data(), size_t(loss_row_count) * 8);
  if (shared) {
    std::memcpy(host + layout.attention_sources(), shared->attention_sources.data(), size_t(attention_rows) * 8);
    std::memcpy(host + layout.attention_positions(), shared->attention_positions.data(), size_t(attention_rows) * 8);
    std::memcpy(host + layout.kept_rows(), shared->kept_rows.data(), size_t(tokens) * 8);
    std::memcpy(host + layout.repeating_rows(), shared->repeating_rows.data(), size_t(tokens) * 8);
  }
  std::memcpy(host + layout.cu_seqlens(), batch->cu_seqlens.data(), size_t(segments + 1) * 4);
  if (token_data) {
    std::memcpy(host + layout.advantages(), batch->advantages.data(), size_t(tokens) * 4);
    std::memcpy(host + layout.old_log_probabilities(), batch->old_log_probabilities.data(), size_t(tokens) * 4);
    std::memcpy(host + layout.label_documents(), batch->label_documents.data(), size_t(tokens) * 4);
  }

  // Allocated in the upload stream's pool, used on the compute stream: recorded there, so its memory returns to the
  // pool only after the compute work queued when the last view of it goes.
  Tensor packed = Tensor::empty(Shape{int64_t(layout.bytes())}, DType::uint8, device_, upload_stream_);
  packed.record_stream(compute_stream_);
  copy_bytes(packed.data(), device_, host, Device::cpu(), layout.bytes(), upload_stream_);
  slot.copied->record(upload_stream_);
  slot.in_flight = true;
  slot.copied->wait(compute_stream_);

  std::shared_ptr<void> owner = packed.storage();
  auto* device_bytes = static_cast<char*>(packed.data());
  auto view = [&](size_t offset, int64_t count, DType dtype) {
    return Tensor::from_blob(device_bytes + offset, Shape{count}, dtype, device_, owner);
  };
  result.tokens = view(0, tokens, DType::int64);
  result.labels = view(layout.labels(), tokens, DType::int64);
  result.positions = view(layout.positions(), tokens, DType::int64);
  result.loss_row_positions = view(layout.loss_row_positions(), tokens, DType::int64);
  result.loss_rows = view(layout.loss_rows_offset(), loss_row_count, DType::int64);
  result.loss_labels = view(layout.loss_labels(), loss_row_count, DType::int64);
  result.cu_seqlens = view(layout.cu_seqlens(), segments + 1, DType::int32);
  if (shared)
    result.attention_rows = layers::AttentionRows{.count = attention_rows,
                                                  .sources = view(layout.attention_sources(), attention_rows,
                                                                  DType::int64),
                                                  .positions = view(layout.attention_positions(), attention_rows,
                                                                    DType::int64),
                                                  .kept = view(layout.kept_rows(), tokens, DType::int64),
                                                  .repeating = view(layout.repeating_rows(), tokens, DType::int64)};
  if (token_data) {
    result.advantages = view(layout.advantages(), tokens, DType::float32);
    result.old_log_probabilities = view(layout.old_log_probabilities(), tokens, DType::float32);
    result.label_documents = view(layout.label_documents(), tokens, DType::int32);
  }
  return result;
}

}  // namespace fast_llm::engine
