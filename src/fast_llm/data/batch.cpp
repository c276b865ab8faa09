#include "fast_llm/data/batch.h"

#include <algorithm>

#include "fast_llm/core/error.h"

namespace fast_llm::data {

Batch make_batch(const std::vector<Document>& documents, const BatchOptions& options, int64_t sample_index) {
  const int64_t input_size = options.micro_batch_size;
  const int64_t sample_size = input_size + options.predicted_tokens;
  FLM_CHECK(input_size > 0 && options.predicted_tokens >= 1, "data",
            "invalid batch shape: {} tokens and {} predicted tokens", input_size, options.predicted_tokens);

  // The whole sample (inputs and trailing labels): tokens, and whether each token may serve as a label.
  std::vector<int64_t> stream(size_t(sample_size), 0);
  std::vector<uint8_t> ignored(size_t(sample_size), 0);
  struct Segment {
    int64_t begin, size;
    int64_t document;  // the (non-empty) document it belongs to: a preference document is two segments
  };
  std::vector<Segment> segments;
  int64_t num_sample_documents = 0;
  std::vector<PreferenceRows> batch_pairs;
  // Token data of the whole sample, when the documents carry it (all of them or none).
  const bool token_data = std::any_of(documents.begin(), documents.end(),
                                      [](const Document& document) { return document.has_token_data(); });
  std::vector<float> advantages(token_data ? size_t(sample_size) : 0, 0.0f);
  std::vector<float> old_log_probabilities(token_data ? size_t(sample_size) : 0, 0.0f);
  int64_t offset = 0;
  for (const Document& document : documents) {
    const int64_t size = document.size();
    FLM_CHECK(offset + size <= sample_size, "data", "sample {}: documents hold more than {} tokens", sample_index,
              sample_size);
    if (size == 0) continue;
    std::copy(document.tokens.begin(), document.tokens.end(), stream.begin() + offset);
    if (token_data) {
      FLM_CHECK(int64_t(document.advantages.size()) == size && int64_t(document.old_log_probabilities.size()) == size,
                "data",
                "sample {}: a document of {} tokens has {} advantages and {} old log-probabilities (datasets with and "
                "without token data cannot be mixed)",
                sample_index, size, document.advantages.size(), document.old_log_probabilities.size());
      std::copy(document.advantages.begin(), document.advantages.end(), advantages.begin() + offset);
      std::copy(document.old_log_probabilities.begin(), document.old_log_probabilities.end(),
                old_log_probabilities.begin() + offset);
    }
    if (options.use_loss_masking_spans)
      for (const Range& span : document.loss_masking_spans) {
        FLM_ASSERT(span.begin >= 0 && span.begin <= span.end && span.end <= size, "span [{}, {}) of a {}-token document",
                   span.begin, span.end, size);
        std::fill(ignored.begin() + offset + span.begin, ignored.begin() + offset + span.end, uint8_t(1));
      }
    FLM_CHECK(document.chosen_spans.size() == document.rejected_spans.size(), "data",
              "sample {}: a document has {} chosen spans and {} rejected spans; preference pairs need as many of each",
              sample_index, document.chosen_spans.size(), document.rejected_spans.size());
    for (size_t pair = 0; pair < document.chosen_spans.size(); ++pair) {
      auto rows = [&](const Range& span) {
        const int64_t begin = std::min(input_size, offset + std::max<int64_t>(span.begin, 1) - 1);
        return std::pair<int64_t, int64_t>(begin, std::clamp<int64_t>(offset + span.end - 1, begin, input_size));
      };
      const auto [chosen_begin, chosen_end] = rows(document.chosen_spans[pair]);
      const auto [rejected_begin, rejected_end] = rows(document.rejected_spans[pair]);
      batch_pairs.push_back({.chosen_begin = chosen_begin,
                             .chosen_end = chosen_end,
                             .rejected_begin = rejected_begin,
                             .rejected_end = rejected_end});
    }
    // A preference document (one pair, the chosen part first) is two sequences, prompt + chosen and prompt +
    // rejected: split where the chosen span ends, so the rejected answer is scored without seeing the chosen one.
    const bool preference_document = document.chosen_spans.size() == 1 &&
                                     document.chosen_spans[0].end <= document.rejected_spans[0].begin &&
                                     document.chosen_spans[0].end > 0;
    if (preference_document) {
      const int64_t split = document.chosen_spans[0].end;
      segments.push_back({offset, split, num_sample_documents});
      segments.push_back({offset + split, size - split, num_sample_documents});
    } else {
      segments.push_back({offset, size, num_sample_documents});
    }
    offset += size;
    ++num_sample_documents;
  }
  std::fill(ignored.begin() + offset, ignored.end(), uint8_t(1));  // padding

  Batch batch;
  batch.sample_index = sample_index;
  batch.micro_batch_size = input_size;
  batch.predicted_tokens = options.predicted_tokens;
  batch.tokens.assign(stream.begin(), stream.begin() + input_size);
  batch.preference_pairs = std::move(batch_pairs);
  batch.labels.resize(size_t(options.predicted_tokens * input_size));
  batch.label_counts.assign(size_t(options.predicted_tokens), 0);
  for (int64_t distance = 1; distance <= options.predicted_tokens; ++distance) {
    // The d-th token of each document has no token d positions before it in the same document; the mask grows with
    // the distance (Fast-LLM updates one label array in place, distance after distance).
    for (const Segment& segment : segments)
      if (distance <= segment.size) ignored[size_t(segment.begin + distance - 1)] = 1;
    int64_t* row = batch.labels.data() + (distance - 1) * input_size;
    int64_t count = 0;
    for (int64_t position = 0; position < input_size; ++position) {
      const size_t target = size_t(position + distance);
      row[position] = ignored[target] ? kIgnoredLabel : stream[target];
      count += !ignored[target];
    }
    batch.label_counts[size_t(distance - 1)] = count;
  }

  batch.num_sample_documents = num_sample_documents;
  if (token_data) {
    batch.advantages.assign(advantages.begin() + 1, advantages.begin() + 1 + input_size);
    batch.old_log_probabilities.assign(old_log_probabilities.begin() + 1,
                                       old_log_probabilities.begin() + 1 + input_size);
    batch.label_documents.assign(size_t(input_size), -1);
    for (const Segment& segment : segments) {
      // Label t is token t + 1: the segment's tokens [begin, begin + size) are labels [begin - 1, begin + size - 1).
      const int64_t first = std::max<int64_t>(0, segment.begin - 1);
      const int64_t last = std::min(input_size, segment.begin + segment.size - 1);
      for (int64_t position = first; position < last; ++position)
        batch.label_documents[size_t(position)] = int32_t(segment.document);
    }
  }

  // Attention segments over the inputs only.
  for (const Segment& segment : segments) {
    if (segment.begin >= input_size) break;
    batch.lengths.push_back(int32_t(std::min(segment.size, input_size - segment.begin)));
    ++batch.num_documents;
  }
  if (offset < input_size) {
    batch.num_padding = input_size - offset;
    batch.lengths.push_back(int32_t(batch.num_padding));
  }
  batch.cu_seqlens.assign(1, 0);
  batch.positions.reserve(size_t(input_size));
  for (int32_t length : batch.lengths) {
    batch.cu_seqlens.push_back(batch.cu_seqlens.back() + length);
    batch.max_seqlen = std::max(batch.max_seqlen, length);
    for (int32_t position = 0; position < length; ++position) batch.positions.push_back(position);
  }
  FLM_ASSERT(batch.cu_seqlens.back() == input_size);
  return batch;
}

}  // namespace fast_llm::data
