#include "fast_llm/models/gpt/training.h"

#include <algorithm>

#include "fast_llm/data/data.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/engine/training/trainer.h"
#include "fast_llm/layers/attention/config.h"
#include "fast_llm/layers/block/config.h"
#include "fast_llm/layers/mlp/config.h"
#include "fast_llm/models/gpt/model.h"

namespace fast_llm::models::gpt {

int64_t activation_bytes_per_token(const GPTTrainerConfig& config) {
  const GPTBaseModelConfig& model = config.model.base_model;
  const int64_t compute = int64_t(dtype_size(config.model.distributed.compute_dtype));
  const int64_t statistic = std::max<int64_t>(compute, 4);
  const int64_t hidden = model.hidden_size;
  const layers::BlockSequenceConfig& decoder = model.decoder.get();
  int64_t kept = 0, block_working = 0, rotary = 0;
  for (int index = 0; index < decoder.block_count(); ++index) {
    // The model was built from the same config, so every block is a decoder block with an attention mixer and a
    // dense MLP (GPTModel refuses the others).
    const auto& block = static_cast<const layers::DecoderBlockConfig&>(decoder.block_at(index));
    int64_t values = 4 * hidden, statistics = 2;
    if (const auto* attention = block.mixer.as<layers::AttentionConfig>()) {
      values += 2 * int64_t(attention->heads) * attention->head_size +
                2 * int64_t(attention->head_groups) * attention->head_size;
      statistics += attention->heads;
      rotary = std::max<int64_t>(rotary, 2 * int64_t(attention->head_size) * 4);
    }
    if (const auto* mlp = block.mlp.as<layers::MlpConfig>()) {
      const int64_t first_projection = (mlp->gated ? 2 : 1) * int64_t(mlp->intermediate_size);
      if (mlp->recompute_level != layers::MlpRecomputeLevel::full) values += first_projection;
      if (mlp->recompute_level == layers::MlpRecomputeLevel::none) values += mlp->intermediate_size;
      block_working = std::max(block_working, compute * (4 * hidden + first_projection + mlp->intermediate_size));
    }
    kept += compute * values + statistic * statistics;
    block_working = std::max(block_working, compute * values);
  }
  const int64_t splits = std::max(1, model.head.cross_entropy_splits);
  const int64_t head_working = compute * (3 * hidden + (int64_t(model.embeddings.vocab_size) + splits - 1) / splits);
  return kept + compute * hidden + std::max(head_working, block_working) + 3 * 8 + rotary;
}

void train(const GPTTrainerConfig& config, const std::function<void(engine::Trainer&)>& inspect) {
  config.kernels.apply();
  engine::warn_pretrained_architecture(config.model, config.pretrained, config.run.experiment_dir);
  // Declares the parameters only; the trainer checks the run can start and fit before it allocates them.
  GPTModel model(config.model.base_model);
  data::GPTData data(config.data,
                     data::DataSetup{.experiment_directory = config.run.experiment_dir,
                                     .vocab_size = config.model.base_model.embeddings.vocab_size});
  engine::Trainer trainer({.training = config.training,
                           .schedule = config.schedule,
                           .optimizer = config.optimizer,
                           .model = config.model,
                           .pretrained = config.pretrained,
                           .run = config.run,
                           .profiling = &config.profiling,
                           .activation_bytes_per_token = activation_bytes_per_token(config)},
                          model, data, config.to_yaml_string());
  trainer.run();
  if (inspect) inspect(trainer);
}

}  // namespace fast_llm::models::gpt
