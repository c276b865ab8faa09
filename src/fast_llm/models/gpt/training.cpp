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

// This rank's share of a dimension that tensor parallelism splits (the config was checked to divide it).
int64_t split(int64_t size, int tensor_parallel) { return size / tensor_parallel; }

// Bytes per token of what lies on the sequence shards with sequence-tensor parallelism (each rank keeps 1 / tp of the
// rows), rounded up.
struct Sharding {
  int tensor_parallel = 1;
  bool sequence = false;
  int64_t operator()(int64_t bytes) const { return sequence ? (bytes + tensor_parallel - 1) / tensor_parallel : bytes; }
};

// An MLP's share of a block's activations (training.h), per token, on this tensor rank.
struct MlpActivations {
  int64_t kept_values = 0;         // in the compute dtype
  int64_t kept_routing_bytes = 0;  // the MoE's routing: logits and scores (fp32), experts and rows (int32)
  int64_t working_bytes = 0;       // its backward's gradients and recomputed buffers
};

MlpActivations mlp_activations(const layers::MlpBaseConfig& config, int64_t hidden, int64_t compute,
                               int tensor_parallel) {
  MlpActivations result;
  if (const auto* hybrid = dynamic_cast<const layers::HybridMoeMlpConfig*>(&config)) {
    const MlpActivations dense = mlp_activations(hybrid->dense, hidden, compute, tensor_parallel);
    const MlpActivations routed = mlp_activations(hybrid->routed, hidden, compute, tensor_parallel);
    return {.kept_values = dense.kept_values + routed.kept_values,
            .kept_routing_bytes = routed.kept_routing_bytes,
            .working_bytes = std::max(dense.working_bytes, routed.working_bytes) + compute * hidden};
  }
  const auto* mlp = dynamic_cast<const layers::MlpConfig*>(&config);
  if (mlp == nullptr) return result;
  // Tensor parallelism splits the intermediate columns (a mixture of experts is refused with it).
  const int64_t intermediate = split(mlp->intermediate_size, tensor_parallel);
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
  // The 4h are whole sequences with sequence-tensor parallelism too (the backward gathers the input again).
  result.working_bytes = compute * (4 * hidden + first_projection + intermediate);
  return result;
}

}  // namespace

engine::ModelActivations model_activations(const GPTTrainerConfig& config) {
  const GPTBaseModelConfig& model = config.model.base_model;
  const engine::DistributedConfig& distributed = config.model.distributed;
  const int64_t compute = int64_t(dtype_size(distributed.compute_dtype));
  const int64_t statistic = std::max<int64_t>(compute, 4);
  const int64_t hidden = model.hidden_size;
  const int tensor_parallel = distributed.tensor_parallel;
  const Sharding shard{.tensor_parallel = tensor_parallel,
                       .sequence = distributed.sequence_tensor_parallel && tensor_parallel > 1};
  // Cut into pieces, attention carries the keys and values of the whole sequence.
  const bool pieces = config.schedule.micro_batch_splits > 1 || distributed.sequence_data_parallel > 1;
  engine::ModelActivations result;
  result.micro_batch_bytes_per_token = 3 * 8;
  // The embeddings keep nothing large; their output is built whole before sequence-tensor parallelism shards it.
  result.layers.push_back({.working = compute * hidden, .output = shard(compute * hidden)});
  const layers::BlockSequenceConfig& decoder = model.decoder.get();
  for (int index = 0; index < decoder.block_count(); ++index) {
    // The model was built from the same config, so every block is a decoder block with an attention mixer and a
    // dense MLP, a mixture of experts or both (GPTModel refuses the others).
    const auto& block = static_cast<const layers::DecoderBlockConfig&>(decoder.block_at(index));
    engine::LayerActivations layer;
    // Input, residual after the mixer and both normalised inputs: on the sequence shard with sequence-tensor
    // parallelism (the mixer and the MLP keep their shard of the input and gather it again in backward).
    int64_t values = 0, sharded_values = 4 * hidden, statistics = 2 * statistic, key_values = 0;
    if (const auto* attention = block.mixer.as<layers::AttentionConfig>()) {
      // This rank's heads, and its head groups (all of them on every rank when there is one).
      const int64_t heads = split(attention->heads, tensor_parallel);
      const int64_t groups =
          attention->head_groups % tensor_parallel == 0 ? split(attention->head_groups, tensor_parallel)
                                                        : attention->head_groups;
      values += 2 * heads * attention->head_size;
      key_values = 2 * groups * attention->head_size;
      if (!pieces) values += key_values;
      layer.kept += statistic * heads;
      result.step_bytes_per_token = std::max<int64_t>(result.step_bytes_per_token, 2 * attention->head_size * 4);
    }
    const MlpActivations mlp = mlp_activations(block.mlp.get(), hidden, compute, tensor_parallel);
    values += mlp.kept_values;
    layer.kept += compute * values + shard(compute * sharded_values) + shard(statistics) + mlp.kept_routing_bytes;
    layer.working = std::max(mlp.working_bytes, compute * (values + sharded_values));
    if (pieces) {
      // The carry of the sequence's keys and values, and in backward their gradient carry beside the gradients of
      // the rows a piece attended to.
      layer.kept_per_sequence_token = compute * key_values;
      layer.backward_per_sequence_token = 2 * compute * key_values;
    }
    layer.output = shard(compute * hidden);
    result.layers.push_back(layer);
  }
  const int splits = std::max(1, model.head.cross_entropy_splits);
  // The reference losses' gradient takes one more chunk of logits beside the label losses' (head.h).
  int64_t logits_chunks = 1;
  for (const auto& [name, loss] : model.head.losses)
    if (loss.is<layers::DistillationLossConfig>() || loss.is<layers::DpoLossConfig>()) logits_chunks = 2;
  const int64_t vocab = model.embeddings.vocab_parallel ? split(model.embeddings.vocab_size, tensor_parallel)
                                                        : int64_t(model.embeddings.vocab_size);
  // The head gathers the sequence first: its final norm's input and the gradient of its output are whole rows.
  result.layers.push_back(
      {.kept = compute * 2 * hidden + statistic,
       .working = compute * (2 * hidden + logits_chunks * ((vocab + splits - 1) / splits))});
  return result;
}

void train(const GPTTrainerConfig& config, const std::function<void(engine::Trainer&)>& inspect,
           const std::function<void(ReferenceModels&)>& inspect_references) {
  config.kernels.apply();
  engine::warn_pretrained_architecture(config.model, config.pretrained, config.run.experiment_dir);
  // Declares the parameters only; the trainer checks the run can start and fit before it allocates them.
  GPTModel model(config.model.base_model, tensor_parallelism(config.model.distributed));
  // Pipeline stages pass every row of a micro-batch between them: the last block may sit in another stage than the head.
  if (config.model.distributed.pipeline_parallel > 1) model.compute_last_block_on_loss_rows_when({});
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
                           .activations = model_activations(config),
                           .prepare_micro_batches =
                               references.empty() ? std::function<void(std::span<layers::MicroBatch>)>()
                                                  : [&references, &model](std::span<layers::MicroBatch> micro_batches) {
                                                      references.run(micro_batches, model.head());
                                                    },
                           .extra_device_memory = references.memory_parts(),
                           .prepares_shared_prompts = references.compute_shared_prompts_once()},
                          model, data, config.to_yaml_string());
  references.load();
  trainer.run();
  if (inspect) inspect(trainer);
  if (inspect_references) inspect_references(references);
}

}  // namespace fast_llm::models::gpt
