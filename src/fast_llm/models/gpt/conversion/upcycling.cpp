// Dense -> mixture-of-experts upcycling of pretrained weights (upcycling.h).
#include "fast_llm/models/gpt/conversion/upcycling.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fast_llm/config/config.h"
#include "fast_llm/core/error.h"
#include "fast_llm/engine/checkpoint/safetensors.h"
#include "fast_llm/engine/distributed/config.h"
#include "fast_llm/engine/multi_stage/initialization.h"
#include "fast_llm/layers/block/config.h"
#include "fast_llm/layers/block/sequence_config.h"
#include "fast_llm/layers/mlp/config.h"
#include "fast_llm/models/gpt/model.h"

namespace fast_llm::models::gpt {

namespace {

constexpr std::string_view kComponent = "upcycling";

// The MLP of a fixed decoder (Hugging Face checkpoints have one block config for all blocks), or null.
const layers::MlpBaseConfig* block_mlp(const GPTBaseModelConfig& config) {
  const auto* decoder = dynamic_cast<const layers::FixedBlockSequenceConfig*>(&config.decoder.get());
  if (decoder == nullptr) return nullptr;
  const auto* block = dynamic_cast<const layers::DecoderBlockConfig*>(&decoder->block.get());
  if (block == nullptr) return nullptr;
  return &block->mlp.get();
}

const layers::MoeMlpConfig* moe_mlp(const GPTBaseModelConfig& config) {
  return dynamic_cast<const layers::MoeMlpConfig*>(block_mlp(config));
}

const layers::MlpConfig* dense_mlp(const GPTBaseModelConfig& config) {
  const layers::MlpBaseConfig* mlp = block_mlp(config);
  if (mlp == nullptr || dynamic_cast<const layers::MoeMlpConfig*>(mlp) != nullptr) return nullptr;
  return dynamic_cast<const layers::MlpConfig*>(mlp);
}

// Refuses (naming the fields) a pair of models that differ in more than the MLP's type and its experts.
void check_upcyclable(const GPTBaseModelConfig& checkpoint, const GPTBaseModelConfig& model) {
  const layers::MlpConfig& dense = *dense_mlp(checkpoint);
  const layers::MoeMlpConfig& moe = *moe_mlp(model);
  const std::string mlp_path = "model.base_model.decoder.block.mlp";
  std::vector<std::string> problems;
  if (moe.intermediate_size != dense.intermediate_size)
    problems.push_back(fmt::format("{}.intermediate_size: {} != the checkpoint's {}", mlp_path, moe.intermediate_size,
                                   dense.intermediate_size));
  if (moe.gated != dense.gated)
    problems.push_back(fmt::format("{}.gated: {} != the checkpoint's {}", mlp_path, moe.gated, dense.gated));
  if (moe.activation != dense.activation)
    problems.push_back(fmt::format("{}.activation: {} != the checkpoint's {}", mlp_path,
                                   config::enum_name(*moe.activation), config::enum_name(*dense.activation)));
  if (dense.add_linear_biases || dense.layer_1.bias.enabled.value_or(false) ||
      dense.layer_2.bias.enabled.value_or(false))
    problems.push_back(fmt::format("the checkpoint's MLP has biases, which experts do not have ({}.add_linear_biases)",
                                   mlp_path));
  // Everything else is the checkpoint's model: compare with the MoE's MLP put back to the dense one.
  YAML::Node same = model.to_yaml(config::WriteOptions{.verbose = config::kVerboseEverything});
  const YAML::Node dense_yaml = checkpoint.to_yaml(config::WriteOptions{.verbose = config::kVerboseEverything});
  same["decoder"]["block"]["mlp"] = YAML::Clone(dense_yaml["decoder"]["block"]["mlp"]);
  GPTBaseModelConfig rest;
  rest.load(same, "model.base_model");
  rest.validate("model.base_model");
  for (const std::string& difference : config::compare_architecture(rest, checkpoint))
    problems.push_back(difference + " (this run != the checkpoint)");
  if (!problems.empty())
    throw Error(kComponent, fmt::format("the dense checkpoint cannot be upcycled into this run's mixture of experts:\n"
                                        "  {}",
                                        fmt::join(problems, "\n  ")));
}

bool is_expert_weight(const std::string& name) {
  return name.ends_with(".mlp.layer_1.weight") || name.ends_with(".mlp.layer_2.weight");
}

}  // namespace

bool is_upcycling(const GPTBaseModelConfig& checkpoint, const GPTBaseModelConfig& model) {
  return moe_mlp(model) != nullptr && dense_mlp(checkpoint) != nullptr;
}

std::shared_ptr<engine::TensorSource> upcycle_weights(std::shared_ptr<const engine::TensorSource> dense,
                                                      const GPTBaseModelConfig& checkpoint,
                                                      const GPTBaseModelConfig& model) {
  FLM_ASSERT(is_upcycling(checkpoint, model), "upcycling a pair of models that is not dense -> mixture of experts");
  check_upcyclable(checkpoint, model);
  const int64_t experts = moe_mlp(model)->experts;
  auto result = std::make_shared<engine::TensorList>(
      fmt::format("{} upcycled to {} experts", dense->describe(), experts));
  GPTModel built(model);
  for (layers::Layer* layer : built.layers())
    for (layers::Parameter* parameter : layer->parameters()) {
      const layers::ParameterMeta meta = parameter->meta;
      const std::string key = engine::state_key(meta.name, engine::kWeightsShard);
      if (meta.name.ends_with(".mlp.router.weight")) {
        // The configured initialization, element by element as a fresh model under the default seed.
        const uint64_t stream = engine::parameter_seed(engine::DistributedConfig().seed, meta.name);
        result->add(key, {DType::float32, meta.shape}, [meta, stream] {
          Tensor router = Tensor::empty(meta.shape, DType::float32);
          engine::fill_initialization(meta.initialization, stream, 0, meta.shape.numel(), router.data_as<float>());
          return router;
        });
        continue;
      }
      if (!dense->contains(key))
        throw Error(kComponent, fmt::format("{}: no tensor '{}' for parameter {}", dense->describe(), key, meta.name));
      const engine::TensorSpec spec = dense->spec(key);
      if (!is_expert_weight(meta.name)) {
        result->add(key, spec, [dense, key] { return dense->load(key); });
        continue;
      }
      // Every expert a copy of the dense projection: its rows repeated `experts` times.
      if (!(spec.shape.rank() == 2 && meta.shape == Shape{spec.shape[0] * experts, spec.shape[1]}))
        throw Error(kComponent, fmt::format("{}: '{}' has shape {}; {} experts of it make {}, not {}",
                                            dense->describe(), key, spec.shape.str(), experts,
                                            Shape{spec.shape[0] * experts, spec.shape[1]}.str(), meta.shape.str()));
      result->add(key, {spec.dtype, meta.shape}, [dense, key, experts, shape = meta.shape, dtype = spec.dtype] {
        Tensor one = dense->load(key).to(Device::cpu());
        Tensor all = Tensor::empty(shape, dtype);
        for (int64_t expert = 0; expert < experts; ++expert)
          all.slice(0, expert * one.size(0), (expert + 1) * one.size(0)).copy_bytes_from(one);
        return all;
      });
    }
  return result;
}

}  // namespace fast_llm::models::gpt
