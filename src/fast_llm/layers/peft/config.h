// Parameter-efficient fine-tuning (`peft:` of the base model), as Fast-LLM's PeftConfig: `none` (the default) or
// `lora`, which adds low-rank adapters to the query and value projections (and to other linear layers that set
// `apply_peft: true`) and by default freezes everything else (models/gpt/model.cpp, layers/common/linear.h).
#pragma once

#include <string>
#include <string_view>

#include "fast_llm/config/config.h"

namespace fast_llm::layers {

struct PeftConfig : config::Config {
  static constexpr std::string_view kDefaultType = "none";
  void visit(config::Visitor& v) override {}
};

struct NoPeftConfig : PeftConfig {};

struct LoraConfig : PeftConfig {
  int rank = 8;
  double alpha = 8.0;
  double dropout = 0.0;
  bool freeze_others = true;
  void visit(config::Visitor& v) override;
};

}  // namespace fast_llm::layers
