#include "fast_llm/models/gpt/trainer_config.h"

namespace fast_llm::models::gpt {

using config::Hint;

void ReferenceModelConfig::visit(config::Visitor& v) {
  v(model, "model", "Architecture and layout of the reference model.", Hint::core);
  v(pretrained, "pretrained", "Checkpoint the reference model is loaded from.", Hint::core);
}

void GPTTrainerConfig::visit(config::Visitor& v) {
  v(training, "training", "The training loop: iterations, logs, checkpoints, exports, evaluators.", Hint::core);
  v(data, "data", "Datasets, sampling and batching.", Hint::core);
  v(optimizer, "optimizer", "AdamW, learning-rate schedule, gradient clipping and scaling.", Hint::core);
  v(schedule, "schedule", "Micro-batches per step and their order.", Hint::core);
  v(model, "model", "The model: architecture, stages and distributed layout.", Hint::core);
  v(pretrained, "pretrained", "A checkpoint to start from (weights, optionally optimizer state and config).",
    Hint::feature);
  v(run, "run", "Experiment directory and run-wide logging.", Hint::core);
  v(profiling, "profiling", "Profiler settings.", Hint::logging);
  v(reference_models, "reference_models", "Frozen models run beside the trained one (distillation, DPO).",
    Hint::feature,
    config::not_supported_if<std::map<std::string, ReferenceModelConfig>>(
        [](const auto& models) { return !models.empty(); }, "reference models"));
  v(callbacks, "callbacks", "Training callbacks (streaming weight broadcast).", Hint::feature,
    config::not_supported_if<std::map<std::string, config::Dynamic<CallbackConfig>>>(
        [](const auto& callbacks) { return !callbacks.empty(); }, "training callbacks"));
  v(kernels, "kernels", "Which kernel variants may run, and plugins that add more.", Hint::performance);
}

void GPTTrainerConfig::check() const {
  for (const auto& [name, evaluator] : training.evaluators) {
    if (!evaluator.is<engine::LossEvaluatorConfig>()) continue;
    // An evaluator without an interval or without iterations never runs (Fast-LLM's meaning of `iterations: null`,
    // as in its examples/mistral.yaml): it needs no dataset.
    const auto& loss = static_cast<const engine::LossEvaluatorConfig&>(evaluator.get());
    if (!loss.enabled() || !loss.iterations) continue;
    if (!data.datasets.contains(name))
      throw ConfigError(training.evaluators.empty() ? path() : training.path() + ".evaluators." + name,
                        fmt::format("a loss evaluator needs the dataset `data.datasets.{}`", name));
  }
  if (training.train_iters > 0 && !data.datasets.contains("training"))
    throw ConfigError(data.path().empty() ? "data.datasets" : data.path() + ".datasets",
                      "training needs a dataset named `training`");
}

}  // namespace fast_llm::models::gpt
