// config.json files as the Hugging Face hub publishes them (tests/data/hf_configs, one per family we import: Llama 2,
// Llama 3 / 3.1 / 3.2, SmolLM / SmolLM2, Mistral 7B v0.1 / v0.3, Qwen2 / Qwen2.5, Mixtral 8x7B / 8x22B v0.1) import
// unchanged: every key either maps to the model or is known to leave it unchanged. A key whose value would change the
// model is refused, naming the key and the value. The two Mixtral files were written from the published files
// (mistralai/Mixtral-8x7B-v0.1 and mistralai/Mixtral-8x22B-v0.1 on the hub), every key as published.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/attention/config.h"
#include "fast_llm/layers/attention/rotary_config.h"
#include "fast_llm/layers/block/config.h"
#include "fast_llm/layers/block/sequence_config.h"
#include "fast_llm/layers/mlp/config.h"
#include "fast_llm/models/gpt/config.h"
#include "fast_llm/models/gpt/conversion/huggingface.h"

namespace fast_llm::models::gpt {
namespace {

using json = nlohmann::json;

json read_config(const std::string& name) {
  const std::filesystem::path path = std::filesystem::path(FAST_LLM_HF_CONFIGS_DIR) / name;
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << path;
  return json::parse(file);
}

GPTBaseModelConfig import(const json& hf, const std::string& where) {
  const HfFormat* format = hf_format_for_model_type(hf.at("model_type").get<std::string>());
  if (format == nullptr) throw Error("test", "no format for " + hf.at("model_type").get<std::string>());
  GPTBaseModelConfig config;
  config.load(import_hf_config(*format, hf, where), "model.base_model");
  config.validate("model.base_model");
  return config;
}

std::string import_error(const json& hf) {
  try {
    import(hf, "config.json");
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// What each published file describes.
struct Expected {
  std::string file;
  int64_t hidden_size;
  int blocks;
  int64_t heads;
  int64_t head_groups;
  int64_t head_size;
  int64_t vocab_size;
  bool tied;
  double theta;
  std::string rotary_type;
  std::optional<int64_t> window;
  bool qkv_biases;
};

const Expected kPublished[] = {
    {"llama-2-7b.json", 4096, 32, 32, 32, 128, 32000, false, 10000.0, "default", std::nullopt, false},
    {"meta-llama-3-8b.json", 4096, 32, 32, 8, 128, 128256, false, 500000.0, "default", std::nullopt, false},
    {"llama-3.1-8b.json", 4096, 32, 32, 8, 128, 128256, false, 500000.0, "llama3", std::nullopt, false},
    {"llama-3.2-1b.json", 2048, 16, 32, 8, 64, 128256, true, 500000.0, "llama3", std::nullopt, false},
    {"smollm-135m.json", 576, 30, 9, 3, 64, 49152, true, 10000.0, "default", std::nullopt, false},
    {"smollm2-135m.json", 576, 30, 9, 3, 64, 49152, true, 100000.0, "default", std::nullopt, false},
    {"mistral-7b-v0.1.json", 4096, 32, 32, 8, 128, 32000, false, 10000.0, "default", 4096, false},
    {"mistral-7b-v0.3.json", 4096, 32, 32, 8, 128, 32768, false, 1000000.0, "default", std::nullopt, false},
    {"qwen2-0.5b.json", 896, 24, 14, 2, 64, 151936, true, 1000000.0, "default", std::nullopt, true},
    {"qwen2.5-7b-instruct.json", 3584, 28, 28, 4, 128, 152064, false, 1000000.0, "default", std::nullopt, true},
    {"mixtral-8x7b-v0.1.json", 4096, 32, 32, 8, 128, 32000, false, 1000000.0, "default", std::nullopt, false},
    {"mixtral-8x22b-v0.1.json", 6144, 56, 48, 8, 128, 32000, false, 1000000.0, "default", std::nullopt, false},
};

// The mixture of experts of the Mixtral files.
struct ExpectedExperts {
  std::string file;
  int64_t intermediate_size;
  int experts;
  int experts_per_token;
  double auxiliary_loss_coefficient;
};

const ExpectedExperts kPublishedExperts[] = {
    {"mixtral-8x7b-v0.1.json", 14336, 8, 2, 0.02},
    {"mixtral-8x22b-v0.1.json", 16384, 8, 2, 0.001},
};

TEST(HubConfigs, PublishedFilesImportUnchanged) {
  for (const Expected& expected : kPublished) {
    SCOPED_TRACE(expected.file);
    GPTBaseModelConfig config;
    try {
      config = import(read_config(expected.file), expected.file);
    } catch (const Error& error) {
      ADD_FAILURE() << error.what();
      continue;
    }
    EXPECT_EQ(config.hidden_size, expected.hidden_size);
    EXPECT_EQ(config.embeddings.vocab_size, expected.vocab_size);
    EXPECT_EQ(config.tied_embedding_weight, expected.tied);
    const auto& decoder = dynamic_cast<const layers::FixedBlockSequenceConfig&>(config.decoder.get());
    EXPECT_EQ(decoder.num_blocks, expected.blocks);
    const auto& block = dynamic_cast<const layers::DecoderBlockConfig&>(decoder.block.get());
    const auto& mixer = *block.mixer.as<layers::AttentionConfig>();
    EXPECT_EQ(mixer.heads, expected.heads);
    EXPECT_EQ(mixer.head_groups, expected.head_groups);
    EXPECT_EQ(mixer.head_size, expected.head_size);
    EXPECT_EQ(mixer.window_size, expected.window);
    EXPECT_EQ(*mixer.query_layer.bias.enabled, expected.qkv_biases);
    EXPECT_FALSE(*mixer.dense_layer.bias.enabled);
    const auto& rotary = mixer.rotary.get();
    EXPECT_EQ(mixer.rotary.type(), expected.rotary_type);
    EXPECT_EQ(dynamic_cast<const layers::DefaultRotaryConfig&>(rotary).theta, expected.theta);
  }
}

TEST(HubConfigs, PublishedMixtralFilesAreMixturesOfExperts) {
  for (const ExpectedExperts& expected : kPublishedExperts) {
    SCOPED_TRACE(expected.file);
    GPTBaseModelConfig config;
    try {
      config = import(read_config(expected.file), expected.file);
    } catch (const Error& error) {
      ADD_FAILURE() << error.what();
      continue;
    }
    const auto& decoder = dynamic_cast<const layers::FixedBlockSequenceConfig&>(config.decoder.get());
    const auto& block = dynamic_cast<const layers::DecoderBlockConfig&>(decoder.block.get());
    const auto* mlp = block.mlp.as<layers::MoeMlpConfig>();
    ASSERT_NE(mlp, nullptr);
    EXPECT_EQ(mlp->intermediate_size, expected.intermediate_size);
    EXPECT_TRUE(mlp->gated);
    EXPECT_EQ(*mlp->activation, layers::ActivationType::silu);
    EXPECT_FALSE(mlp->add_linear_biases);
    EXPECT_EQ(mlp->experts, expected.experts);
    EXPECT_EQ(mlp->shared_experts, 0);
    EXPECT_EQ(mlp->experts_per_token, expected.experts_per_token);
    EXPECT_EQ(mlp->routing, layers::RoutingType::aux_loss);
    EXPECT_EQ(mlp->auxiliary_loss_coefficient, expected.auxiliary_loss_coefficient);
    EXPECT_EQ(mlp->jitter_eps, 0.0);
    const auto* norm = block.normalization.as<layers::RmsNormalizationConfig>();
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->epsilon, 1e-5);
  }
}

// Keys whose value would change the model are refused with the key and the value; the same keys with their neutral
// value are accepted (SmolLM2 writes both is_llama_config and rope_interleaved: false).
TEST(HubConfigs, KeysThatWouldChangeTheModelAreRefused) {
  const json smollm2 = read_config("smollm2-135m.json");
  auto with = [](json hf, const std::string& key, json value) {
    hf[key] = std::move(value);
    return hf;
  };
  EXPECT_EQ(import_error(smollm2), "");
  const std::string interleaved = import_error(with(smollm2, "rope_interleaved", true));
  EXPECT_NE(interleaved.find("rope_interleaved"), std::string::npos) << interleaved;
  EXPECT_NE(interleaved.find("true"), std::string::npos) << interleaved;
  EXPECT_EQ(import_error(with(smollm2, "is_llama_config", false)), "");
  EXPECT_EQ(import_error(with(smollm2, "pretraining_tp", 4)), "");
  const std::string dropout = import_error(with(smollm2, "mlp_bias", "yes"));
  EXPECT_NE(dropout.find("mlp_bias"), std::string::npos) << dropout;
  const std::string unknown = import_error(with(smollm2, "rope_mystery", 1));
  EXPECT_NE(unknown.find("`rope_mystery` (1)"), std::string::npos) << unknown;

  // Qwen2's window settings leave the model unchanged while use_sliding_window is false, whatever their values.
  const json qwen2 = read_config("qwen2-0.5b.json");
  EXPECT_EQ(import_error(with(with(qwen2, "max_window_layers", 3), "sliding_window", 64)), "");
  const std::string window = import_error(with(qwen2, "use_sliding_window", true));
  EXPECT_NE(window.find("use_sliding_window"), std::string::npos) << window;

  // Mixtral: output_router_logits only changes what the Hugging Face model returns; an unknown router key is refused.
  const json mixtral = read_config("mixtral-8x7b-v0.1.json");
  EXPECT_EQ(import_error(with(mixtral, "output_router_logits", true)), "");
  const std::string router = import_error(with(mixtral, "router_bias", true));
  EXPECT_NE(router.find("`router_bias` (true)"), std::string::npos) << router;
  const std::string architecture = import_error(with(mixtral, "architectures", json::array({"MistralForCausalLM"})));
  EXPECT_NE(architecture.find("MixtralForCausalLM"), std::string::npos) << architecture;
}

}  // namespace
}  // namespace fast_llm::models::gpt
