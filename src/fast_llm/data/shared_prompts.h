// Preference pairs whose rejected sequence starts with the rows of its chosen sequence: the prompt, which both
// sequences repeat (documents prepared with `add_bos`: BOS + prompt + chosen + EOS, then BOS + prompt + rejected + EOS).
// Causal attention within each sequence and every other layer working row by row, those rows of the rejected
// sequence are the same computation as the chosen sequence's rows at the same positions: the model computes them once.
//
// A pair shares the rows [0, n) of its two attention segments (make_batch cuts a preference document into them) where
// the n tokens are equal and all before each sequence's first row that carries a loss (the row whose label is the
// answer's first token, so the prompt's last row is computed in both sequences: its two labels differ). The result is
// the micro-batch without the rejected sequences' shared rows ("computed rows"), and the maps between those and the
// original rows, which attention (the one layer looking across rows) keeps as its own rows ("attention rows"): it
// expands its queries, keys and values to them, attends as over the original batch, and takes its output back at
// the computed rows (layers/attention/attention.h).
//
// Only for batches whose losses are the preference spans alone (dpo): the shared rows carry no loss, and the step's
// label count stays the original batch's.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fast_llm/data/batch.h"

namespace fast_llm::data {

struct SharedPromptBatch {
  // The computed rows: tokens, labels, positions, token data and the preference pairs of the original batch without
  // the shared rows (micro_batch_size their count). lengths, cu_seqlens and max_seqlen stay the original ones: they
  // are attention's, over the attention rows; so do the counts of labels, documents and padding.
  Batch batch;
  // (attention rows) the computed row whose values each attention row takes: itself, or for a shared row of a
  // rejected sequence the chosen sequence's row it repeats.
  std::vector<int64_t> attention_sources;
  // (attention rows) the index among the computed rows of an attention row that is computed; the computed row count
  // for a shared row (kernels::scatter_rows's positions: zeros there).
  std::vector<int64_t> attention_positions;
  // (computed rows) the attention row of each computed row.
  std::vector<int64_t> kept_rows;
  // (computed rows) the attention row that repeats each computed row (a rejected sequence's shared row), or the
  // attention row count when none does.
  std::vector<int64_t> repeating_rows;
};

// The batch with its pairs' shared prompt rows left out, or nothing when no pair shares a row (no preference pairs,
// a document with several pairs, whose answers are one attention segment, different first tokens). One predicted
// token only.
std::optional<SharedPromptBatch> share_prompt_rows(const Batch& batch);

}  // namespace fast_llm::data
