#include "fast_llm/models/gpt/reference_models.h"

#include <algorithm>

#include <fmt/format.h>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/kernels/embedding.h"
#include "fast_llm/kernels/label_log_probabilities.h"
#include "fast_llm/layers/block/config.h"
#include "fast_llm/layers/language_model/loss_config.h"

namespace fast_llm::models::gpt {

struct ReferenceModels::Model {
  std::string name;
  const ReferenceModelConfig& config;
  engine::MultiStageConfig multi_stage_config;  // the config's, its weights kept in the compute dtype only
  GPTModel model;
  std::unique_ptr<engine::MultiStage> multi_stage;
  bool keeps_mixer_outputs = false;  // a block of the trained model distills its mixer outputs
};

namespace {

// Whether a block of the trained model names `reference` as its distillation_model.
bool distilled_by_blocks(const GPTTrainerConfig& config, const std::string& reference) {
  const layers::BlockSequenceConfig& decoder = config.model.base_model.decoder.get();
  for (int index = 0; index < decoder.block_count(); ++index) {
    const auto* block = dynamic_cast<const layers::DecoderBlockConfig*>(&decoder.block_at(index));
    if (block != nullptr && block->distillation_model == reference) return true;
  }
  return false;
}

// Whether a loss of type `LossConfig` of the trained head reads reference model `reference`.
template <class LossConfig>
bool head_has_loss_of(const GPTTrainerConfig& config, const std::string& reference) {
  for (const auto& [name, loss] : config.model.base_model.head.losses)
    if (const auto* typed = loss.template as<LossConfig>(); typed != nullptr && typed->reference_model == reference)
      return true;
  return false;
}

// What the trained head's losses read of reference model `reference`: its logits (a distillation loss), the
// log-probabilities of the labels (a dpo loss: kernels/dpo.h needs no more).
bool head_reads_logits(const GPTTrainerConfig& config, const std::string& reference) {
  return head_has_loss_of<layers::DistillationLossConfig>(config, reference);
}

bool head_reads_label_log_probabilities(const GPTTrainerConfig& config, const std::string& reference) {
  return head_has_loss_of<layers::DpoLossConfig>(config, reference);
}

// The run's distributed settings as one process sees them alone: a reference model is whole on every process (each
// runs it on its own micro-batches), so its weights are neither sharded nor reduced.
engine::DistributedConfig one_process(const engine::DistributedConfig& distributed) {
  engine::DistributedConfig result = distributed;
  result.world_size = 1;
  result.rank = 0;
  result.local_world_size = 1;
  return result;
}

// A reference model is never optimized, so its weights are all frozen and need only the copy its forward reads (the
// compute dtype): a bf16 run keeps 2 bytes per weight instead of 6 (the fp32 copy of
// store_frozen_weights_in_optimization_precision is for weights that may be unfrozen or exported, which these never
// are). fp32 and fp64 runs keep their one copy as before.
engine::MultiStageConfig weights_in_compute_dtype(const engine::MultiStageConfig& multi_stage) {
  engine::MultiStageConfig result = multi_stage;
  result.store_frozen_weights_in_optimization_precision = false;
  return result;
}

void freeze_every_parameter(GPTModel& model) {
  for (layers::Layer* layer : model.layers())
    for (layers::Parameter* parameter : layer->parameters()) parameter->meta.frozen = true;
}

}  // namespace

ReferenceModels::ReferenceModels(const GPTTrainerConfig& config, Device device)
    : config_(config), distributed_(one_process(config.model.distributed)), device_(device) {
  if (config.reference_models.empty()) return;
  if (config.model.distributed.sequence_data_parallel > 1)
    throw NotSupportedError("training", fmt::format("reference models need model.distributed.sequence_data_parallel 1 "
                                                    "(as Fast-LLM), got {}",
                                                    config.model.distributed.sequence_data_parallel));
  for (const auto& [name, reference] : config.reference_models) {
    models_.push_back(std::unique_ptr<Model>(
        new Model{.name = name,
                  .config = reference,
                  .multi_stage_config = weights_in_compute_dtype(reference.model.multi_stage),
                  .model = GPTModel(reference.model.base_model),
                  .multi_stage = nullptr,
                  .keeps_mixer_outputs = distilled_by_blocks(config, name)}));
    freeze_every_parameter(models_.back()->model);
  }
}

ReferenceModels::~ReferenceModels() = default;

bool ReferenceModels::compute_shared_prompts_once() const {
  return std::all_of(models_.begin(), models_.end(),
                     [](const std::unique_ptr<Model>& model) {
                       return model->model.layers_compute_shared_prompts_once(/*with_dropout=*/false);
                     });
}

std::vector<engine::MemoryEstimate::Part> ReferenceModels::memory_parts() const {
  std::vector<engine::MemoryEstimate::Part> parts;
  const engine::DistributedConfig& distributed = distributed_;
  const int64_t logits_bytes = distributed.compute_dtype == DType::float64 ? 8 : 4;
  const int64_t micro_batches = config_.schedule.sequential_micro_batches();
  for (const auto& model : models_) {
    const engine::MultiStageConfig& multi_stage = model->multi_stage_config;
    const auto stages = engine::split_into_stages(model->model.layers(), multi_stage.layers_per_stage);
    parts.push_back({fmt::format("weights of reference model {}", model->name),
                     engine::multi_stage_buffer_bytes(
                         stages, multi_stage, engine::stage_settings(multi_stage, distributed, device_, false))});
    const int64_t vocab = model->config.model.base_model.embeddings.vocab_size;
    const std::string batches = fmt::format("{} micro-batch{} of {} tokens", micro_batches,
                                            micro_batches == 1 ? "" : "es", config_.data.micro_batch_size);
    if (head_reads_logits(config_, model->name))
      parts.push_back({fmt::format("logits of reference model {} on {}", model->name, batches),
                       logits_bytes * vocab * config_.data.micro_batch_size * micro_batches});
    else if (head_reads_label_log_probabilities(config_, model->name))
      parts.push_back({fmt::format("label log-probabilities of reference model {} on {}", model->name, batches),
                       logits_bytes * config_.data.micro_batch_size * micro_batches});
    if (model->keeps_mixer_outputs) {
      const int64_t blocks = model->model.block_count();
      parts.push_back({fmt::format("mixer outputs of the {} blocks of reference model {}", blocks, model->name),
                       int64_t(dtype_size(distributed.compute_dtype)) * model->config.model.base_model.hidden_size *
                           blocks * config_.data.micro_batch_size * micro_batches});
    }
  }
  return parts;
}

void ReferenceModels::load() {
  for (auto& model : models_) {
    model->multi_stage = std::make_unique<engine::MultiStage>(model->model, model->multi_stage_config,
                                                              distributed_, device_, /*training=*/false);
    if (model->config.pretrained.path) {
      engine::load_pretrained(model->config.pretrained, model->config.model, *model->multi_stage,
                              /*optimizer_state=*/false);
      log_main("Reference model {} loaded from {}", model->name, model->config.pretrained.path->string());
    } else {
      model->multi_stage->initialize_weights();
      log_main("Reference model {} initialised (no pretrained.path)", model->name);
    }
  }
}

void ReferenceModels::run(std::span<layers::MicroBatch> micro_batches, const layers::LanguageModelHead& trained_head) {
  const Stream stream = compute_stream(device_);
  for (auto& model : models_) {
    FLM_ASSERT(model->multi_stage != nullptr, "reference model {} run before it was loaded", model->name);
    model->model.compute_last_block_on_loss_rows_when(
        [&](const layers::MicroBatch& batch) { return computes_loss_rows_only(batch, trained_head); });
    const auto& stages = model->multi_stage->stages();
    layers::LanguageModelHead& head = model->model.head();
    const bool reads_logits = head_reads_logits(config_, model->name);
    const bool reads_log_probabilities = head_reads_label_log_probabilities(config_, model->name);
    for (layers::MicroBatch& micro_batch : micro_batches) {
      layers::LayerContext context{.batch = micro_batch,
                                   .device = device_,
                                   .compute_dtype = distributed_.compute_dtype,
                                   .stream = stream,
                                   .training = false,
                                   .mixer_outputs = model->keeps_mixer_outputs
                                                        ? &micro_batch.reference_mixer_outputs[model->name]
                                                        : nullptr};
      // The trained head computes the loss rows only (the whole micro-batch, not its sequence pieces): so does this.
      const bool loss_rows_only = computes_loss_rows_only(micro_batch, trained_head);
      Tensor hidden;
      for (size_t stage = 0; stage < stages.size(); ++stage) {
        model->multi_stage->before_forward(stage, stream, /*training=*/false);
        for (layers::Layer* layer : stages[stage]->layers()) {
          if (layer == &head) break;  // the last layer: its outputs are made below
          hidden = layer->forward(context, hidden);
        }
      }
      if (!reads_logits && !reads_log_probabilities) continue;  // only its blocks' mixer outputs are read
      Tensor labels = micro_batch.labels;
      if (loss_rows_only) {
        // The last block computed the loss rows alone, unless its MLP is not row-wise.
        if (hidden.size(0) != micro_batch.loss_rows.numel())
          hidden = kernels::gather_rows(hidden, micro_batch.loss_rows, stream);
        labels = micro_batch.loss_labels;
      }
      const Tensor* logits = nullptr;  // (tokens or loss rows, vocab), kept for a distillation loss
      if (reads_logits) logits = &(micro_batch.reference_logits[model->name] = head.logits(hidden, stream));
      if (reads_log_probabilities)
        micro_batch.reference_label_log_probabilities[model->name] =
            label_log_probabilities(head, hidden, labels, logits, stream);
    }
    model->model.compute_last_block_on_loss_rows_when({});  // the predicate refers to `trained_head`
  }
}

bool ReferenceModels::computes_loss_rows_only(const layers::MicroBatch& batch,
                                              const layers::LanguageModelHead& trained_head) const {
  return config_.schedule.micro_batch_splits == 1 && trained_head.computes_loss_rows_only(batch);
}

Tensor ReferenceModels::label_log_probabilities(layers::LanguageModelHead& head, const Tensor& hidden,
                                                const Tensor& labels, const Tensor* logits, Stream stream) const {
  const int64_t rows = hidden.size(0);
  const DType dtype = distributed_.compute_dtype == DType::float64 ? DType::float64 : DType::float32;
  const int64_t row_bytes = int64_t(dtype_size(dtype)) * head.output_weights().weight.size(0);
  const int64_t chunk_rows =
      logits != nullptr ? rows : std::max<int64_t>(1, std::min(logits_chunk_rows_, kLogitsChunkBytes / row_bytes));
  Tensor result = Tensor::empty(Shape{rows}, dtype, hidden.device(), stream);
  for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
    const int64_t end = std::min(rows, begin + chunk_rows);
    const Tensor chunk =
        logits != nullptr ? logits->slice(0, begin, end) : head.logits(hidden.slice(0, begin, end), stream);
    Tensor output = result.slice(0, begin, end);
    kernels::label_log_probabilities(
        {.logits = chunk, .labels = labels.slice(0, begin, end), .output = output, .stream = stream});
  }
  return result;
}

engine::MultiStage& ReferenceModels::multi_stage(const std::string& name) {
  for (auto& model : models_)
    if (model->name == name && model->multi_stage) return *model->multi_stage;
  throw Error("reference_models", fmt::format("no loaded reference model named '{}'", name));
}

}  // namespace fast_llm::models::gpt
