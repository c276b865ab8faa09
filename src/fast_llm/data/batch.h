// One packed micro-batch on the host, built from a sample's documents (reference/fast-llm.md §4, §5.4).
//
// A sample holds `micro_batch_size + predicted_tokens` tokens: its documents back to back, then padding (token 0,
// never a label) when documents are not truncated. Inputs are the first `micro_batch_size` tokens; the labels at
// distance d (1 = next token, d > 1 for extra prediction heads) of input t are token t + d. A label is -100 (ignored)
// when it is padding, lies in a loss-masking span, or is among the first d tokens of its document (no prediction
// across documents), as Fast-LLM's `_set_target_inputs`.
//
// Attention segments (`lengths`, `cu_seqlens`) cover the inputs: each document's part of [0, micro_batch_size), then
// the padding as one more segment of its own, so varlen attention never mixes documents and padding.
//
// Preference data (DPO): a document's i-th chosen span and i-th rejected span make a pair (Fast-LLM's preparation
// writes one of each per document: prompt + chosen answer + EOS, then BOS + prompt + rejected answer + EOS, the chosen
// span ending at the first EOS). A document with one pair whose chosen span comes first is cut into two attention
// segments where the chosen span ends, so that each answer is scored after its own prompt only, as TRL scores the two
// sequences of a pair (Fast-LLM attends across them); the second segment's first token (BOS) is not a label. Each pair
// is given as the rows of the inputs whose labels are the spans' tokens: token t of a document is the label of input
// t - 1, so a span [begin, end) of a document at offset o is rows [o + max(begin, 1) - 1, o + end - 1) (a document's
// first token is never a label), cut at micro_batch_size.
// Policy-gradient token data (GRPO / GSPO), when the documents carry it: the advantage and old log-probability of label
// t are the values of token t + 1 (shifted as the labels are, Fast-LLM's `get_cropped_data(label_begin, label_end)`),
// 0 at padding; `label_documents[t]` is the document (0-based, in the sample) that label t belongs to, -1 at padding.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "fast_llm/data/dataset.h"

namespace fast_llm::data {

inline constexpr int64_t kIgnoredLabel = -100;

struct BatchOptions {
  int64_t micro_batch_size = 2048;
  int64_t predicted_tokens = 1;
  bool use_loss_masking_spans = true;
};

// One chosen / rejected pair, as half-open ranges of input rows (see above).
struct PreferenceRows {
  int64_t chosen_begin = 0, chosen_end = 0;
  int64_t rejected_begin = 0, rejected_end = 0;
};

struct Batch {
  int64_t sample_index = 0;       // index of the sample in its sampled dataset
  int64_t micro_batch_size = 0;
  int64_t predicted_tokens = 1;
  std::vector<int64_t> tokens;      // (micro_batch_size) input tokens; 0 at padding
  std::vector<int64_t> labels;      // (predicted_tokens, micro_batch_size) row d-1: labels at distance d; -100 masked
  std::vector<int64_t> label_counts;  // (predicted_tokens) unmasked labels per distance
  std::vector<int32_t> lengths;     // attention segments over the inputs: documents, then padding if any
  std::vector<int32_t> cu_seqlens;  // (segments + 1) cumulative lengths, from 0 to micro_batch_size
  int32_t max_seqlen = 0;           // longest segment
  std::vector<int64_t> positions;   // (micro_batch_size) position of each input within its segment
  int64_t num_documents = 0;        // documents with at least one input token (padding excluded)
  int64_t num_padding = 0;          // padded input tokens
  std::vector<PreferenceRows> preference_pairs;  // the documents' chosen / rejected pairs, in document order
  // Documents in the whole sample, inputs and trailing labels (Fast-LLM's `num_documents`, the divisor of GSPO's loss
  // and of the policy metrics): one more than num_documents when a document starts at the last label.
  int64_t num_sample_documents = 0;
  // Token data at distance 1, each (micro_batch_size) or empty (the documents carry none).
  std::vector<float> advantages;
  std::vector<float> old_log_probabilities;
  std::vector<int32_t> label_documents;
  bool has_token_data() const { return !advantages.empty(); }

  // Unmasked labels at distance `distance` (1: the cross-entropy label count Fast-LLM normalises by, summed by the
  // trainer over all micro-batches of a step).
  int64_t num_labels(int64_t distance = 1) const { return label_counts[size_t(distance - 1)]; }
  std::span<const int64_t> labels_at(int64_t distance) const {
    return std::span<const int64_t>(labels).subspan(size_t((distance - 1) * micro_batch_size),
                                                    size_t(micro_batch_size));
  }
};

// Packs `documents` (at most micro_batch_size + predicted_tokens tokens in all) into a batch, padding the rest.
Batch make_batch(const std::vector<Document>& documents, const BatchOptions& options, int64_t sample_index = 0);

}  // namespace fast_llm::data
