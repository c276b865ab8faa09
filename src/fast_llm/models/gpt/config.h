// The GPT model's configuration (`model:` of `fast-llm train gpt`), as Fast-LLM's GPTModelConfig: the base model
// (GPTBaseModelConfig = the language model plus PEFT), how it is split into stages (multi_stage) and the process
// layout and numerics (distributed), the last two from the engine's ModelConfig. The trainer's top-level config
// composes this with the other sections.
#pragma once

#include "fast_llm/config/config.h"
#include "fast_llm/engine/model_type.h"
#include "fast_llm/layers/language_model/config.h"
#include "fast_llm/layers/peft/config.h"

namespace fast_llm::models::gpt {

struct GPTBaseModelConfig : layers::LanguageModelConfig {
  config::Dynamic<layers::PeftConfig> peft;
  bool use_megatron_initialization = false;
  void visit(config::Visitor& v) override;
};

struct GPTModelConfig : engine::ModelConfig {
  GPTBaseModelConfig base_model;
  void visit(config::Visitor& v) override;

  const engine::ModelType& model_type() const override;
  config::Config& base_model_config() override { return base_model; }
  const config::Config& base_model_config() const override { return base_model; }
};

}  // namespace fast_llm::models::gpt
