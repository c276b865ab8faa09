#include "fast_llm/models/gpt/model.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/attention/attention.h"
#include "fast_llm/layers/mlp/mlp.h"
#include "fast_llm/layers/common/parameter_settings.h"

namespace fast_llm::models::gpt {

layers::TensorParallelism tensor_parallelism(const engine::DistributedConfig& distributed) {
  return {.rank = distributed.tensor_rank(),
          .size = distributed.tensor_parallel,
          .sequence_parallel = distributed.sequence_tensor_parallel};
}

GPTModel::GPTModel(const GPTBaseModelConfig& config, layers::TensorParallelism tensor_parallel) {
  FLM_ASSERT(config.validated(), "GPTModel built from a config that was not validated");
  if (auto unsupported = config.unsupported_fields(); !unsupported.empty())
    throw NotSupportedError("gpt", fmt::format("the model config uses features that are not supported yet:\n  {}",
                                               fmt::join(unsupported, "\n  ")));
  const auto* lora = dynamic_cast<const layers::LoraConfig*>(&config.peft.get());
  FLM_ASSERT(lora != nullptr || config.peft.is<layers::NoPeftConfig>(), "{}: unknown PEFT type '{}'",
             config.field_path("peft"), config.peft.type());

  const int64_t hidden_size = config.hidden_size;
  const double lr_scale = layers::combine_lr_scales(1.0, config.lr_scale);
  embeddings_ = std::make_unique<layers::LanguageModelEmbedding>("embeddings", config.embeddings, hidden_size, lr_scale,
                                                                 tensor_parallel);

  const layers::BlockSequenceConfig& decoder = config.decoder.get();
  const double decoder_lr_scale = layers::combine_lr_scales(lr_scale, decoder.lr_scale);
  // What the blocks share (the rotary tables of equal frequencies).
  layers::SharedResources shared;
  for (int index = 0; index < decoder.block_count(); ++index) {
    const auto* block = dynamic_cast<const layers::DecoderBlockConfig*>(&decoder.block_at(index));
    if (block == nullptr)
      throw NotSupportedError("gpt", fmt::format("{}: block {} is not a decoder block", decoder.path(), index));
    blocks_.push_back(std::make_unique<layers::DecoderBlock>(fmt::format("decoder.{}", index), *block, hidden_size,
                                                             decoder_lr_scale, &shared, lora, tensor_parallel));
  }

  head_ = std::make_unique<layers::LanguageModelHead>(
      "head", config.head, hidden_size, config.embeddings.vocab_size, lr_scale,
      config.tied_embedding_weight ? &embeddings_->word_embeddings() : nullptr, tensor_parallel,
      config.embeddings.vocab_parallel);

  compute_last_block_on_loss_rows_when(
      [head = head_.get()](const layers::MicroBatch& batch) { return head->computes_loss_rows_only(batch); });

  // LoRA's freeze_others (Fast-LLM's apply_weight): every weight but the adapters' is frozen, so the engine gives it no
  // gradient, no optimizer state and no place in the gradient norm (engine/multi_stage/stage.h).
  if (lora != nullptr && lora->freeze_others)
    for (layers::Layer* layer : layers())
      for (layers::Parameter* parameter : layer->parameters()) parameter->meta.frozen = !parameter->meta.peft;
}

std::vector<layers::Layer*> GPTModel::layers() {
  std::vector<layers::Layer*> result;
  result.reserve(blocks_.size() + 2);
  result.push_back(embeddings_.get());
  for (auto& block : blocks_) result.push_back(block.get());
  result.push_back(head_.get());
  return result;
}

void GPTModel::compute_last_block_on_loss_rows_when(layers::DecoderBlock::BatchPredicate predicate) {
  if (blocks_.empty() || !blocks_.back()->mlp().row_wise()) return;
  blocks_.back()->compute_output_on_loss_rows_when(std::move(predicate));
}

bool GPTModel::layers_compute_shared_prompts_once(bool with_dropout) const {
  if (with_dropout && (embeddings_->uses_dropout() || head_->uses_dropout())) return false;
  return std::all_of(blocks_.begin(), blocks_.end(), [&](const std::unique_ptr<layers::DecoderBlock>& block) {
    const auto* attention = dynamic_cast<const layers::Attention*>(&block->mixer());
    return attention != nullptr && attention->causal() && block->mlp().row_wise() &&
           !(with_dropout && block->uses_dropout()) && !block->distills_activations();
  });
}

std::vector<layers::Linear*> GPTModel::lora_linears() {
  std::vector<layers::Linear*> result;
  auto add = [&](layers::Linear& linear) {
    if (linear.lora()) result.push_back(&linear);
  };
  for (auto& block : blocks_) {
    if (auto* attention = dynamic_cast<layers::Attention*>(&block->mixer())) {
      add(attention->query());
      add(attention->key_value());
      add(attention->dense());
    }
    if (auto* mlp = dynamic_cast<layers::Mlp*>(&block->mlp())) {
      add(mlp->layer_1());
      add(mlp->layer_2());
    }
  }
  return result;
}

int64_t GPTModel::matmul_weight_count() const {
  int64_t count = head_->matmul_weight_count();
  for (const auto& block : blocks_) count += block->matmul_weight_count();
  return count;
}

double GPTModel::flops_per_token(int64_t sequence_length) const {
  double mixing = 0.0;
  for (const auto& block : blocks_) mixing += block->mixer().mixing_flops_per_token(sequence_length);
  return 6.0 * double(matmul_weight_count()) + mixing;
}

}  // namespace fast_llm::models::gpt
