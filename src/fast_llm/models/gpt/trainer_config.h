// The top-level configuration of `fast-llm train gpt` (Fast-LLM's GPTTrainerConfig): every section of the YAML file.
//
//   training, data, optimizer, schedule, model: {base_model, multi_stage, distributed}, pretrained, run, profiling,
//   reference_models, callbacks, and our `kernels` section.
#pragma once

#include <map>
#include <string>

#include "fast_llm/config/config.h"
#include "fast_llm/data/config.h"
#include "fast_llm/engine/checkpoint/config.h"
#include "fast_llm/engine/optimizer/config.h"
#include "fast_llm/engine/schedule/config.h"
#include "fast_llm/engine/training/config.h"
#include "fast_llm/engine/training/run_config.h"
#include "fast_llm/kernels/config.h"
#include "fast_llm/models/gpt/config.h"

namespace fast_llm::models::gpt {

// A frozen model run beside the trained one (distillation, DPO): `reference_models.<name>: {model, pretrained}`. Its
// `model.base_model` is its architecture (taken from `pretrained` as the trained model's, load_config); it runs on the
// trained model's device with its distributed settings (models/gpt/reference_models.h). Without `pretrained.path` it is
// initialised as a fresh model with the run's seed.
struct ReferenceModelConfig : config::Config {
  GPTModelConfig model;
  engine::CheckpointLoadConfig pretrained;
  void visit(config::Visitor& v) override;
};

// A training callback (`callbacks.<name>`); Fast-LLM's only type is `streaming` (PipelineRL weight broadcast).
struct CallbackConfig : config::Config {
  static constexpr std::string_view kDefaultType = "";
  void visit(config::Visitor& v) override {}
};

struct GPTTrainerConfig : config::Config {
  engine::TrainingConfig training;
  data::GPTDataConfig data;
  engine::OptimizerConfig optimizer;
  engine::ScheduleConfig schedule;
  GPTModelConfig model;
  engine::CheckpointLoadConfig pretrained;
  engine::RunConfig run;
  engine::ProfilingConfig profiling;
  std::map<std::string, ReferenceModelConfig> reference_models;
  std::map<std::string, config::Dynamic<CallbackConfig>> callbacks;
  kernels::KernelsConfig kernels;

  void visit(config::Visitor& v) override;

 protected:
  void check() const override;

 private:
  // Every loss's reference_model names a model of reference_models with the trained model's vocabulary, every reference
  // model is read by a loss, and dpo has whole documents.
  void check_reference_models() const;
};

}  // namespace fast_llm::models::gpt
