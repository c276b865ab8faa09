// `train gpt`: builds the GPT model, the data and the trainer from a validated GPTTrainerConfig and runs it. The config
// is read with the pretrained checkpoint's model config under it (engine/checkpoint/loading.h,
// load_config_with_pretrained with gpt_model_type()); the trainer loads and saves checkpoints itself.
#pragma once

#include <functional>

#include "fast_llm/models/gpt/trainer_config.h"

namespace fast_llm::engine {
class Trainer;
}

namespace fast_llm::models::gpt {

// Applies the kernel selection (and plugins), builds the model, samples the data and trains. The config must be
// validated and free of unsupported values (cli::require_supported). `inspect`, when given, sees the trainer after
// the run, before it and the model go (tests read its weights and counters).
void train(const GPTTrainerConfig& config, const std::function<void(engine::Trainer&)>& inspect = {});

}  // namespace fast_llm::models::gpt
