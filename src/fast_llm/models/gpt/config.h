// The GPT model's configuration (`model:` of `fast-llm train gpt`), as Fast-LLM's GPTModelConfig: the base model
// (GPTBaseModelConfig = the language model plus PEFT), how it is split into stages (multi_stage) and the process
// layout and numerics (distributed). The trainer's top-level config composes this with the other sections.
#pragma once

#include "fast_llm/config/config.h"
#include "fast_llm/engine/distributed/config.h"
#include "fast_llm/engine/multi_stage/config.h"
#include "fast_llm/layers/language_model/config.h"
#include "fast_llm/layers/peft/config.h"

namespace fast_llm::models::gpt {

struct GPTBaseModelConfig : layers::LanguageModelConfig {
  config::Dynamic<layers::PeftConfig> peft;
  bool use_megatron_initialization = false;
  void visit(config::Visitor& v) override;
};

struct GPTModelConfig : config::Config {
  GPTBaseModelConfig base_model;
  engine::MultiStageConfig multi_stage;
  engine::DistributedConfig distributed;
  void visit(config::Visitor& v) override;
};

}  // namespace fast_llm::models::gpt
