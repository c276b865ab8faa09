#include "fast_llm/models/gpt/training.h"

#include <algorithm>

#include "fast_llm/data/data.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/engine/multi_stage/multi_stage.h"
#include "fast_llm/engine/training/trainer.h"
#include "fast_llm/layers/attention/config.h"
#include "fast_llm/layers/block/config.h"
#include "fast_llm/layers/language_model/loss_config.h"
#include "fast_llm/layers/mlp/config.h"
#include "fast_llm/models/gpt/model.h"
#include "fast_llm/models/gpt/reference_models.h"

namespace fast_llm::models::gpt {

namespace {

// An MLP's share of activation_bytes_per_token (training.h), per token.
struct MlpActivations {
  int64_t kept_values = 0;         // in the compute dtype
  int64_t kept_routing_bytes = 0;  // the MoE's routing: logits and scores (fp32), experts and rows (int32)
  int64_t working_bytes = 0;       // its backward's gradients and recomputed buffers
};

MlpActivations mlp_activations(const layers::MlpBaseConfig& config, int64_t hidden, int64_t compute) {
  MlpActivations result;
  if (const auto* hybrid = dynamic_cast<const layers::HybridMoeMlpConfig*>(&config)) {
    const MlpActivations dense = mlp_activations(hybrid->dense, hidden, compute);
    const MlpActivations routed = mlp_activations(hybrid->routed, hidden, compute);
    return {.kept_values = dense.kept_values + routed.kept_values,
            .kept_routing_bytes = routed.kept_routing_bytes,
            .working_bytes = std::max(dense.working_bytes, routed.working_bytes) + compute * hidden};
  }
  const auto* mlp = dynamic_cast<const layers::MlpConfig*>(&config);
  if (mlp == nullptr) return result;
  const int64_t intermediate = mlp->intermediate_size;
  const int64_t first_projection = (mlp->gated ? 2 : 1) * intermediate;
  const auto level = mlp->recompute_level;
  if (const auto* moe = dynamic_cast<const layers::MoeMlpConfig*>(&config)) {
    // Every token has `slots` rows in the permuted buffers: the permuted input (unless recomputed), the first
    // projection and the unscaled activation per slot, as the dense MLP keeps them per token.
    const int64_t slots = int64_t(moe->shared_experts) + moe->experts_per_token;
    const int64_t routed = moe->experts - moe->shared_experts;
    if (level == layers::MlpRecomputeLevel::none || level == layers::MlpRecomputeLevel::activation)
      result.kept_values += slots * hidden;
    if (level != layers::MlpRecomputeLevel::full) result.kept_values += slots * first_projection;
    if (level == layers::MlpRecomputeLevel::none) result.kept_values += slots * intermediate;
    result.kept_routing_bytes = 4 * routed + slots * (4 + 4 + 4);
    // Backward: the permuted input and output gradient, the first projection, the activation and its scaled copy
    // (and their gradients, which reuse those sizes), plus the block's 4h.
    result.working_bytes = compute * (4 * hidden + slots * (2 * hidden + 2 * first_projection + 2 * intermediate));
    return result;
  }
  if (level != layers::MlpRecomputeLevel::full) result.kept_values += first_projection;
  if (level == layers::MlpRecomputeLevel::none) result.kept_values += intermediate;
  result.working_bytes = compute * (4 * hidden + first_projection + intermediate);
  return result;
}

}  // namespace

int64_t activation_bytes_per_token(const GPTTrainerConfig& config) {
  const GPTBaseModelConfig& model = config.model.base_model;
  const int64_t compute = int64_t(dtype_size(config.model.distributed.compute_dtype));
  const int64_t statistic = std::max<int64_t>(compute, 4);
  const int64_t hidden = model.hidden_size;
  const layers::BlockSequenceConfig& decoder = model.decoder.get();
  int64_t kept = 0, block_working = 0, rotary = 0;
  for (int index = 0; index < decoder.block_count(); ++index) {
    // The model was built from the same config, so every block is a decoder block with an attention mixer and a
    // dense MLP, a mixture of experts or both (GPTModel refuses the others).
    const auto& block = static_cast<const layers::DecoderBlockConfig&>(decoder.block_at(index));
    int64_t values = 4 * hidden, statistics = 2;
    if (const auto* attention = block.mixer.as<layers::AttentionConfig>()) {
      values += 2 * int64_t(attention->heads) * attention->head_size +
                2 * int64_t(attention->head_groups) * attention->head_size;
      statistics += attention->heads;
      rotary = std::max<int64_t>(rotary, 2 * int64_t(attention->head_size) * 4);
    }
    const MlpActivations mlp = mlp_activations(block.mlp.get(), hidden, compute);
    values += mlp.kept_values;
    block_working = std::max(block_working, mlp.working_bytes);
    kept += compute * values + statistic * statistics + mlp.kept_routing_bytes;
    block_working = std::max(block_working, compute * values);
  }
  const int64_t splits = std::max(1, model.head.cross_entropy_splits);
  // The reference losses' gradient takes one more chunk of logits beside the label losses' (head.h).
  int64_t logits_chunks = 1;
  for (const auto& [name, loss] : model.head.losses)
    if (loss.is<layers::DistillationLossConfig>() || loss.is<layers::DpoLossConfig>()) logits_chunks = 2;
  const int64_t head_working =
      compute * (3 * hidden + logits_chunks * ((int64_t(model.embeddings.vocab_size) + splits - 1) / splits));
  return kept + compute * hidden + std::max(head_working, block_working) + 3 * 8 + rotary;
}

void train(const GPTTrainerConfig& config, const std::function<void(engine::Trainer&)>& inspect,
           const std::function<void(ReferenceModels&)>& inspect_references) {
  config.kernels.apply();
  engine::warn_pretrained_architecture(config.model, config.pretrained, config.run.experiment_dir);
  // Declares the parameters only; the trainer checks the run can start and fit before it allocates them.
  GPTModel model(config.model.base_model, tensor_parallelism(config.model.distributed));
  const Device device = engine::resolve_device(config.model.distributed);
  ReferenceModels references(config, device);
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
                           .activation_bytes_per_token = activation_bytes_per_token(config),
                           .prepare_micro_batches =
                               references.empty() ? std::function<void(std::span<layers::MicroBatch>)>()
                                                  : [&references](std::span<layers::MicroBatch> micro_batches) {
                                                      references.run(micro_batches);
                                                    },
                           .extra_device_memory = references.memory_parts()},
                          model, data, config.to_yaml_string());
  references.load();
  trainer.run();
  if (inspect) inspect(trainer);
  if (inspect_references) inspect_references(references);
}

}  // namespace fast_llm::models::gpt
