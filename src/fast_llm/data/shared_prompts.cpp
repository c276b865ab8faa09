#include "fast_llm/data/shared_prompts.h"

#include <algorithm>

#include "fast_llm/core/error.h"

namespace fast_llm::data {
namespace {

// The attention segment holding input row `row` (< micro_batch_size).
int64_t segment_of(const Batch& batch, int64_t row) {
  const auto after = std::upper_bound(batch.cu_seqlens.begin(), batch.cu_seqlens.end(), int32_t(row));
  return int64_t(after - batch.cu_seqlens.begin()) - 1;
}

template <class T>
std::vector<T> kept(const std::vector<T>& values, const std::vector<int64_t>& kept_rows) {
  std::vector<T> result;
  if (values.empty()) return result;
  result.reserve(kept_rows.size());
  for (int64_t row : kept_rows) result.push_back(values[size_t(row)]);
  return result;
}

}  // namespace

std::optional<SharedPromptBatch> share_prompt_rows(const Batch& batch) {
  FLM_ASSERT(batch.predicted_tokens == 1, "shared prompt rows of a batch with {} predicted tokens",
             batch.predicted_tokens);
  const int64_t rows = batch.micro_batch_size;
  // For each row of a rejected sequence that repeats its chosen sequence's row, that row; -1 elsewhere.
  std::vector<int64_t> repeats(size_t(rows), -1);
  bool any = false;
  for (const PreferenceRows& pair : batch.preference_pairs) {
    if (pair.chosen_begin >= pair.rejected_begin || pair.rejected_begin >= rows) continue;
    const int64_t chosen = segment_of(batch, pair.chosen_begin), rejected = segment_of(batch, pair.rejected_begin);
    if (chosen >= rejected) continue;
    const int64_t chosen_start = batch.cu_seqlens[size_t(chosen)], rejected_start = batch.cu_seqlens[size_t(rejected)];
    const int64_t limit = std::min(pair.chosen_begin - chosen_start, pair.rejected_begin - rejected_start);
    for (int64_t offset = 0; offset < limit; ++offset) {
      const size_t original = size_t(chosen_start + offset), repeat = size_t(rejected_start + offset);
      if (batch.tokens[original] != batch.tokens[repeat] || batch.positions[original] != batch.positions[repeat])
        break;
      repeats[repeat] = int64_t(original);
      any = true;
    }
  }
  if (!any) return std::nullopt;

  // Computed rows before each original row: a kept row's index among them, and where the pairs' row ranges go.
  std::vector<int64_t> computed_before(size_t(rows) + 1, 0);
  for (int64_t row = 0; row < rows; ++row)
    computed_before[size_t(row) + 1] = computed_before[size_t(row)] + (repeats[size_t(row)] < 0 ? 1 : 0);
  const int64_t computed = computed_before[size_t(rows)];
  SharedPromptBatch result;
  result.attention_sources.resize(size_t(rows));
  result.attention_positions.resize(size_t(rows));
  result.kept_rows.reserve(size_t(computed));
  result.repeating_rows.assign(size_t(computed), rows);
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t repeated = repeats[size_t(row)];
    if (repeated < 0) {
      result.kept_rows.push_back(row);
      result.attention_sources[size_t(row)] = result.attention_positions[size_t(row)] = computed_before[size_t(row)];
    } else {
      FLM_ASSERT(repeats[size_t(repeated)] < 0, "shared prompt row {} repeats row {}, which is itself repeated", row,
                 repeated);
      const int64_t source = computed_before[size_t(repeated)];
      result.attention_sources[size_t(row)] = source;
      result.attention_positions[size_t(row)] = computed;
      result.repeating_rows[size_t(source)] = row;
    }
  }

  Batch& out = result.batch;
  out.sample_index = batch.sample_index;
  out.micro_batch_size = computed;
  out.predicted_tokens = 1;
  out.tokens = kept(batch.tokens, result.kept_rows);
  out.labels = kept(batch.labels, result.kept_rows);
  out.label_counts = batch.label_counts;
  out.lengths = batch.lengths;
  out.cu_seqlens = batch.cu_seqlens;
  out.max_seqlen = batch.max_seqlen;
  out.positions = kept(batch.positions, result.kept_rows);
  out.num_documents = batch.num_documents;
  out.num_padding = batch.num_padding;
  out.num_sample_documents = batch.num_sample_documents;
  for (const PreferenceRows& pair : batch.preference_pairs) {
    const auto at = [&](int64_t row) { return computed_before[size_t(row)]; };
    out.preference_pairs.push_back({.chosen_begin = at(pair.chosen_begin),
                                    .chosen_end = at(pair.chosen_end),
                                    .rejected_begin = at(pair.rejected_begin),
                                    .rejected_end = at(pair.rejected_end)});
  }
  out.advantages = kept(batch.advantages, result.kept_rows);
  out.old_log_probabilities = kept(batch.old_log_probabilities, result.kept_rows);
  out.label_documents = kept(batch.label_documents, result.kept_rows);
  return result;
}

}  // namespace fast_llm::data
