#include "fast_llm/models/gpt/training.h"

#include "fast_llm/data/data.h"
#include "fast_llm/engine/training/trainer.h"
#include "fast_llm/models/gpt/conversion/checkpoint.h"
#include "fast_llm/models/gpt/model.h"

namespace fast_llm::models::gpt {

void train(const GPTTrainerConfig& config, const std::function<void(engine::Trainer&)>& inspect) {
  config.kernels.apply();
  warn_pretrained_architecture(config);
  GPTModel model(config.model.base_model);
  data::GPTData data(config.data,
                     data::DataSetup{.experiment_directory = config.run.experiment_dir,
                                     .vocab_size = config.model.base_model.embeddings.vocab_size});
  engine::Trainer trainer({.training = config.training,
                           .schedule = config.schedule,
                           .optimizer = config.optimizer,
                           .multi_stage = config.model.multi_stage,
                           .distributed = config.model.distributed,
                           .run = config.run,
                           .profiling = &config.profiling},
                          model, data, config.to_yaml_string(), trainer_hooks(config));
  trainer.run();
  if (inspect) inspect(trainer);
}

}  // namespace fast_llm::models::gpt
