// The GPT model type as the engine sees it (engine/model_type.h): named `gpt`, configured by GPTModelConfig, built as
// GPTModel, with the Hugging Face formats of conversion/huggingface.h (llama, mistral, qwen2, mixtral,
// auto).
#pragma once

#include "fast_llm/engine/model_type.h"

namespace fast_llm::models::gpt {

const engine::ModelType& gpt_model_type();

}  // namespace fast_llm::models::gpt
