// Which rows of a micro-batch carry a loss (layers/language_model/loss_rows.h finds them): the model states its rule
// (engine::BaseModel::loss_row_rule), so the engine can hand it to the batch uploader without knowing the head.
#pragma once

namespace fast_llm::layers {

enum class LossRowRule {
  labelled,          // every row whose label is >= 0
  preference_spans,  // the labelled rows inside a preference pair's chosen or rejected span
};

}  // namespace fast_llm::layers
