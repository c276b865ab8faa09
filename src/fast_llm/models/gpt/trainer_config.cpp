#include "fast_llm/models/gpt/trainer_config.h"

#include <fmt/format.h>

#include <set>

#include "fast_llm/layers/block/config.h"
#include "fast_llm/layers/language_model/loss_config.h"

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
  v(reference_models, "reference_models",
    "Frozen models run forward on every micro-batch beside the trained one, for the head's distillation and dpo "
    "losses.",
    Hint::feature);
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
  check_reference_models();
  // Sequence-tensor parallelism splits every micro-batch's tokens evenly over the tensor-parallel ranks.
  const engine::DistributedConfig& distributed = model.distributed;
  if (distributed.sequence_tensor_parallel && data.micro_batch_size % distributed.tensor_parallel != 0)
    throw ConfigError(data.field_path("micro_batch_size"),
                      fmt::format("{} tokens do not split over the {} ranks of model.distributed.tensor_parallel, as "
                                  "sequence_tensor_parallel needs: use a multiple of {}",
                                  data.micro_batch_size, distributed.tensor_parallel, distributed.tensor_parallel));
  if (training.train_iters > 0 && !data.datasets.contains("training"))
    throw ConfigError(data.path().empty() ? "data.datasets" : data.path() + ".datasets",
                      "training needs a dataset named `training`");
}

void GPTTrainerConfig::check_reference_models() const {
  const layers::LanguageModelHeadConfig& head = model.base_model.head;
  std::set<std::string> used;
  for (const auto& [name, loss] : head.losses) {
    std::string reference;
    if (const auto* distillation = loss.as<layers::DistillationLossConfig>()) reference = distillation->reference_model;
    if (const auto* dpo = loss.as<layers::DpoLossConfig>()) {
      reference = dpo->reference_model.value_or("");
      // A pair's chosen and rejected spans live in one document: a document cut at a sample boundary would lose part
      // of a pair.
      if (data.truncate_documents)
        throw ConfigError(data.field_path("truncate_documents"),
                          fmt::format("the dpo loss `{}` needs whole documents (each holds a chosen / rejected pair): "
                                      "set it to false",
                                      name));
    }
    if (reference.empty()) continue;
    const std::string field = head.field_path("losses." + name + ".reference_model");
    const auto found = reference_models.find(reference);
    if (found == reference_models.end())
      throw ConfigError(field, fmt::format("no reference model named '{}' in `reference_models`{}", reference,
                                           reference_models.empty() ? " (there is none)" : ""));
    const int vocab = found->second.model.base_model.embeddings.vocab_size;
    if (vocab != model.base_model.embeddings.vocab_size)
      throw ConfigError(field, fmt::format("reference model '{}' has a vocabulary of {}, the trained model {}: their "
                                           "logits must match",
                                           reference, vocab, model.base_model.embeddings.vocab_size));
    used.insert(reference);
  }
  // Activation distillation: the reference model's block of the same name has a mixer output of the same width.
  const layers::BlockSequenceConfig& decoder = model.base_model.decoder.get();
  for (int index = 0; index < decoder.block_count(); ++index) {
    const auto* block = dynamic_cast<const layers::DecoderBlockConfig*>(&decoder.block_at(index));
    if (block == nullptr || !block->distillation_model) continue;
    const std::string field = block->field_path("distillation_model");
    const auto found = reference_models.find(*block->distillation_model);
    if (found == reference_models.end())
      throw ConfigError(field, fmt::format("no reference model named '{}' in `reference_models`{}",
                                           *block->distillation_model,
                                           reference_models.empty() ? " (there is none)" : ""));
    const GPTBaseModelConfig& reference = found->second.model.base_model;
    if (reference.decoder.get().block_count() <= index || reference.hidden_size != model.base_model.hidden_size)
      throw ConfigError(field, fmt::format("block {} distills block {} of reference model '{}', which has {} blocks of "
                                           "width {} (this model: width {})",
                                           index, index, *block->distillation_model,
                                           reference.decoder.get().block_count(), reference.hidden_size,
                                           model.base_model.hidden_size));
    used.insert(*block->distillation_model);
  }
  for (const auto& [name, reference] : reference_models) {
    const std::string path = (this->path().empty() ? std::string() : this->path() + ".") + "reference_models." + name;
    if (!used.contains(name))
      throw ConfigError(path, "neither a loss of model.base_model.head.losses nor a block's distillation_model reads "
                              "this reference model");
    // Its logits are its head's projection times its logits_scale_factor (LanguageModelHead::logits), without a cap.
    if (reference.model.base_model.head.final_logit_softcap)
      throw ConfigError(path + ".model.base_model.head.final_logit_softcap",
                        "a reference model's logits are not soft-capped: reference models with a final_logit_softcap "
                        "are not supported");
    if (reference.pretrained.path && !reference.pretrained.model_weights)
      throw ConfigError(path + ".pretrained.model_weights", "a reference model is its weights: it must load them");
  }
}

}  // namespace fast_llm::models::gpt
