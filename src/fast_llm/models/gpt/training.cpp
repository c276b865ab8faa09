#include "fast_llm/models/gpt/training.h"

#include "fast_llm/data/data.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/engine/training/trainer.h"
#include "fast_llm/models/gpt/model.h"

namespace fast_llm::models::gpt {

void train(const GPTTrainerConfig& config, const std::function<void(engine::Trainer&)>& inspect) {
  config.kernels.apply();
  engine::warn_pretrained_architecture(config.model, config.pretrained, config.run.experiment_dir);
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
                           .profiling = &config.profiling},
                          model, data, config.to_yaml_string());
  trainer.run();
  if (inspect) inspect(trainer);
}

}  // namespace fast_llm::models::gpt
