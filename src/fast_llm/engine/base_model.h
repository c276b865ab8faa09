// What the engine knows of a model: an ordered list of layers. Stages, buffers, the schedule, the optimizer and the
// trainer work on this interface only; they never see a concrete model (DESIGN.md §3).
#pragma once

#include <vector>

#include "fast_llm/layers/loss_row_rule.h"
#include "fast_llm/layers/layer.h"

namespace fast_llm::engine {

class BaseModel {
 public:
  virtual ~BaseModel() = default;
  // Layers in forward order (for GPT: embeddings, decoder blocks, head). A parameter used by two layers (tied
  // embeddings) is declared by the first one only; the later one refers to it, so it is bound and updated once.
  virtual std::vector<layers::Layer*> layers() = 0;
  // Which rows of a micro-batch carry a loss (layers/language_model/loss_rows.h): the batch uploader finds them by it.
  virtual layers::LossRowRule loss_row_rule() const { return layers::LossRowRule::labelled; }
  // Whether a micro-batch whose preference pairs share their prompt rows may go to it as its computed rows
  // (MicroBatch::attention_rows, data/shared_prompts.h): its losses are the preference spans' alone, no layer but
  // causal attention looks across rows and none draws dropout.
  virtual bool computes_shared_prompts_once() const { return false; }
};

}  // namespace fast_llm::engine
