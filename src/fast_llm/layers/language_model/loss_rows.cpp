#include "fast_llm/layers/language_model/loss_rows.h"

#include "fast_llm/core/error.h"

namespace fast_llm::layers {

LossRows find_loss_rows(std::span<const int64_t> labels, std::span<const kernels::PreferencePair> preference_pairs,
                        LossRowRule rule) {
  LossRows result;
  const int64_t tokens = int64_t(labels.size());
  for (const kernels::PreferencePair& pair : preference_pairs)
    FLM_ASSERT(0 <= pair.chosen_begin && pair.chosen_begin <= pair.chosen_end && pair.chosen_end <= tokens &&
                   0 <= pair.rejected_begin && pair.rejected_begin <= pair.rejected_end && pair.rejected_end <= tokens,
               "a preference pair outside the {} rows of its micro-batch", tokens);
  // kept[t]: whether row t is a loss row under `rule`.
  std::vector<bool> kept(labels.size(), rule == LossRowRule::labelled);
  if (rule == LossRowRule::preference_spans)
    for (const kernels::PreferencePair& pair : preference_pairs) {
      for (int64_t row = pair.chosen_begin; row < pair.chosen_end; ++row) kept[size_t(row)] = true;
      for (int64_t row = pair.rejected_begin; row < pair.rejected_end; ++row) kept[size_t(row)] = true;
    }
  for (int64_t row = 0; row < tokens; ++row) kept[size_t(row)] = kept[size_t(row)] && labels[size_t(row)] >= 0;
  result.positions.resize(labels.size());
  // before[t]: loss rows among rows [0, t), for t in [0, tokens].
  std::vector<int64_t> before(labels.size() + 1, 0);
  for (int64_t row = 0; row < tokens; ++row) {
    before[size_t(row)] = int64_t(result.rows.size());
    if (!kept[size_t(row)]) continue;
    result.rows.push_back(row);
    result.labels.push_back(labels[size_t(row)]);
  }
  before[size_t(tokens)] = int64_t(result.rows.size());
  for (int64_t row = 0; row < tokens; ++row)
    result.positions[size_t(row)] = kept[size_t(row)] ? before[size_t(row)] : int64_t(result.rows.size());
  for (const kernels::PreferencePair& pair : preference_pairs)
    result.preference_pairs.push_back({.chosen_begin = before[size_t(pair.chosen_begin)],
                                       .chosen_end = before[size_t(pair.chosen_end)],
                                       .rejected_begin = before[size_t(pair.rejected_begin)],
                                       .rejected_end = before[size_t(pair.rejected_end)]});
  return result;
}

void attach_loss_rows(MicroBatch& batch, const LossRows& rows, Device device, Stream stream) {
  batch.loss_rows = Tensor::from_indices(rows.rows, DType::int64, device, stream);
  batch.loss_labels = Tensor::from_indices(rows.labels, DType::int64, device, stream);
  batch.loss_row_positions = Tensor::from_indices(rows.positions, DType::int64, device, stream);
  batch.loss_preference_pairs = rows.preference_pairs;
}

}  // namespace fast_llm::layers
