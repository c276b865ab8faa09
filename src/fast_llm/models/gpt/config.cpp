// Field lists of the GPT model configs.
#include "fast_llm/models/gpt/config.h"

#include "fast_llm/models/gpt/model_type.h"

namespace fast_llm::models::gpt {

using config::Hint;
using config::Visitor;

void GPTBaseModelConfig::visit(Visitor& v) {
  layers::LanguageModelConfig::visit(v);
  v(peft, "peft", "Parameter-efficient fine-tuning; `none` by default.", Hint::architecture);
  v(use_megatron_initialization, "use_megatron_initialization",
    "Initialize exactly as Megatron-LM does, to compare runs with it (testing).", Hint::testing,
    config::not_supported_yet(false, "Megatron-LM initialization"));
}

void GPTModelConfig::visit(Visitor& v) {
  v(base_model, "base_model", "The model itself: embeddings, decoder, head.", Hint::core);
  v(multi_stage, "multi_stage", "Stages and ZeRO sharding.", Hint::core);
  v(distributed, "distributed", "Process layout, data types and seeds.", Hint::core);
}

const engine::ModelType& GPTModelConfig::model_type() const { return gpt_model_type(); }

}  // namespace fast_llm::models::gpt
