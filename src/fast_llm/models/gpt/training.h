// `train gpt`: builds the GPT model, the data and the trainer from a validated GPTTrainerConfig and runs it.
#pragma once

#include "fast_llm/models/gpt/trainer_config.h"

namespace fast_llm::models::gpt {

// Applies the kernel selection (and plugins), builds the model, samples the data and trains. The config must be
// validated and free of unsupported values (cli::require_supported).
void train(const GPTTrainerConfig& config);

}  // namespace fast_llm::models::gpt
