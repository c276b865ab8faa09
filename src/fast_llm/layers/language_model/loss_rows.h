// The rows of a micro-batch that carry a loss, by the head's rule (LossRowRule): every row whose label (distance 1) is
// >= 0, since every loss of the head that compacts (label cross-entropy, z-loss, distillation, dpo) is masked by the
// labels; when dpo is the head's only loss, only those inside a chosen or rejected span (a pair's prompt adds nothing).
// The head then computes its logits on these rows only (LanguageModelHead::computes_loss_rows_only), and the reference
// models theirs too. Found on the host, where the labels are built, so the count is known without reading the device;
// the batch uploader sends them with the micro-batch (MicroBatch::loss_rows, loss_labels, loss_row_positions,
// loss_preference_pairs). The preference pairs are re-expressed in the compacted numbering: a span [b, e) of rows
// becomes [loss rows before b, loss rows before e); the masked rows inside a span count in no sum of dpo.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "fast_llm/kernels/dpo.h"
#include "fast_llm/layers/context.h"
#include "fast_llm/layers/loss_row_rule.h"

namespace fast_llm::layers {

struct LossRows {
  std::vector<int64_t> rows;       // ascending
  std::vector<int64_t> labels;     // labels[i] = the label of rows[i]
  std::vector<int64_t> positions;  // (tokens): row t's index among the loss rows, rows.size() for a masked row
  std::vector<kernels::PreferencePair> preference_pairs;  // in the compacted numbering
};

LossRows find_loss_rows(std::span<const int64_t> labels, std::span<const kernels::PreferencePair> preference_pairs,
                        LossRowRule rule = LossRowRule::labelled);

// Sets the loss-row fields of `batch` from `rows`, copied to `device` (tests and host-built micro-batches; the batch
// uploader packs them with the rest of the micro-batch instead).
void attach_loss_rows(MicroBatch& batch, const LossRows& rows, Device device = Device::cpu(), Stream stream = {});

}  // namespace fast_llm::layers
