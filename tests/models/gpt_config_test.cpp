// The GPT model config against Fast-LLM's contract: the Mistral-7B example loads unchanged, defaults are Fast-LLM's
// (values hard-coded from reference/fast-llm.md and Fast-LLM's config classes), errors name full paths, everything
// written reads back the same, features without behaviour are reported at the right path, and architecture
// comparison looks at architecture fields only.
#include <gtest/gtest.h>

#include <cmath>

#include "config_test_util.h"
#include "fast_llm/layers/attention/config.h"
#include "fast_llm/layers/block/config.h"
#include "fast_llm/layers/block/sequence_config.h"
#include "fast_llm/layers/common/normalization_config.h"
#include "fast_llm/layers/mlp/config.h"
#include "fast_llm/layers/peft/config.h"
#include "fast_llm/models/gpt/config.h"

namespace fast_llm::models::gpt {
namespace {

using layers::AttentionConfig;
using layers::DecoderBlockConfig;
using layers::FixedBlockSequenceConfig;
using layers::MlpConfig;
using testing::config_error;
using testing::ScopedEnvironment;

// The `model:` section of Fast-LLM's examples/mistral.yaml.
constexpr const char* kMistral = R"(
base_model:
  embeddings: {vocab_size: 32000, dropout: 0.0}
  decoder:
    block:
      mixer: {type: attention, rotary: {type: default, theta: 10000}, heads: 32, head_groups: 8,
              head_size: 128, add_linear_biases: false, window_size: 4096, dropout: 0.0}
      mlp: {intermediate_size: 14336, add_linear_biases: false, gated: true, activation: silu}
      normalization: {type: rms_norm, epsilon: 1.0e-05}
      dropout: 0.0
    num_blocks: 32
  head: {normalization: {type: rms_norm, epsilon: 1.0e-05}}
  hidden_size: 4096
  tied_embedding_weight: false
multi_stage: {zero_stage: 2}
distributed: {compute_dtype: bf16, seed: 984059}
)";

class GPTConfigTest : public ::testing::Test {
 protected:
  GPTModelConfig load(const std::string& text, const std::vector<std::string>& overrides = {}) {
    return testing::load_config<GPTModelConfig>(text, "model", overrides);
  }
  std::string error(const std::string& text, const std::vector<std::string>& overrides = {}) {
    return config_error<GPTModelConfig>(text, "model", overrides);
  }
  std::vector<std::string> unsupported(const std::string& text) { return load(text).unsupported_fields(); }

  static const DecoderBlockConfig& block(const GPTModelConfig& config) {
    return dynamic_cast<const DecoderBlockConfig&>(config.base_model.decoder->block_at(0));
  }
  static const AttentionConfig& attention(const GPTModelConfig& config) {
    return dynamic_cast<const AttentionConfig&>(block(config).mixer.get());
  }
  static const MlpConfig& mlp(const GPTModelConfig& config) {
    return dynamic_cast<const MlpConfig&>(block(config).mlp.get());
  }

  ScopedEnvironment environment_{testing::single_process()};
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_F(GPTConfigTest, MistralExampleLoadsWithItsValues) {
  GPTModelConfig config = load(kMistral);
  const auto& base = config.base_model;
  EXPECT_EQ(base.hidden_size, 4096);
  EXPECT_FALSE(base.tied_embedding_weight);
  EXPECT_EQ(base.embeddings.vocab_size, 32000);
  ASSERT_TRUE(base.decoder.is<FixedBlockSequenceConfig>());
  EXPECT_EQ(base.decoder->block_count(), 32);

  const AttentionConfig& mixer = attention(config);
  EXPECT_EQ(mixer.heads, 32);
  EXPECT_EQ(mixer.head_groups, 8);
  EXPECT_EQ(mixer.head_size, 128);
  EXPECT_EQ(mixer.window_size, 4096);
  ASSERT_TRUE(mixer.rotary.is<layers::DefaultRotaryConfig>());
  EXPECT_DOUBLE_EQ(mixer.rotary.as<layers::DefaultRotaryConfig>()->theta, 10000.0);
  // add_linear_biases: false reaches every projection (keys and values share key_layer's settings).
  for (const auto* layer : {&mixer.query_layer, &mixer.key_layer, &mixer.dense_layer})
    EXPECT_EQ(layer->bias.enabled, false);

  const MlpConfig& feed_forward = mlp(config);
  EXPECT_EQ(feed_forward.intermediate_size, 14336);
  EXPECT_TRUE(feed_forward.gated);
  EXPECT_EQ(feed_forward.activation, layers::ActivationType::silu);
  EXPECT_EQ(feed_forward.layer_1.bias.enabled, false);
  EXPECT_EQ(feed_forward.layer_2.bias.enabled, false);

  const auto* norm = block(config).normalization.as<layers::RmsNormalizationConfig>();
  ASSERT_NE(norm, nullptr);
  EXPECT_DOUBLE_EQ(norm->epsilon, 1e-5);
  EXPECT_TRUE(base.head.normalization.is<layers::RmsNormalizationConfig>());

  EXPECT_EQ(config.multi_stage.zero_stage, 2);
  EXPECT_EQ(config.multi_stage.num_grad_buffers, 2);  // ZeRO-2 double-buffers gradients
  EXPECT_FALSE(config.multi_stage.num_weight_buffers.has_value());
  EXPECT_EQ(config.distributed.compute_dtype, DType::bfloat16);
  EXPECT_EQ(config.distributed.seed, 984059);
  // The Mistral example is inside the dense scope: nothing is reported as missing.
  EXPECT_TRUE(config.unsupported_fields().empty()) << config.unsupported_fields().front();
}

TEST_F(GPTConfigTest, MistralExampleKeepsFastLlmDefaultsForWhatItLeavesOut) {
  GPTModelConfig config = load(kMistral);
  const AttentionConfig& mixer = attention(config);
  EXPECT_TRUE(mixer.causal);
  EXPECT_DOUBLE_EQ(mixer.softmax_scale_power, 0.5);
  EXPECT_FALSE(mixer.query_norm.has_value());
  EXPECT_EQ(mixer.implementation, layers::AttentionImplementation::auto_);
  EXPECT_EQ(mlp(config).recompute_level, layers::MlpRecomputeLevel::none);
  EXPECT_FALSE(block(config).normalization.as<layers::RmsNormalizationConfig>()->zero_centered);
  const auto& head = config.base_model.head;
  ASSERT_EQ(head.losses.size(), 1u);
  ASSERT_TRUE(head.losses.contains("cross_entropy"));
  const auto* loss = head.losses.at("cross_entropy").as<layers::LabelLossConfig>();
  ASSERT_NE(loss, nullptr);
  EXPECT_DOUBLE_EQ(loss->weight, 1.0);
  EXPECT_EQ(loss->loss_type, layers::EntropyLossType::cross_entropy);
  EXPECT_EQ(head.cross_entropy_splits, 1);
  EXPECT_DOUBLE_EQ(head.logits_scale_factor, 1.0);
  EXPECT_FALSE(head.final_logit_softcap.has_value());
  EXPECT_EQ(head.prediction_heads, 1);
  EXPECT_EQ(config.base_model.embeddings.num_position_embeddings, 2048);
  EXPECT_EQ(config.base_model.embeddings.position_embeddings.enabled, false);
  EXPECT_DOUBLE_EQ(config.base_model.embeddings.embedding_scale, 1.0);
  EXPECT_TRUE(config.base_model.embeddings.vocab_parallel);
  EXPECT_TRUE(config.base_model.peft.is<layers::NoPeftConfig>());
  EXPECT_EQ(config.distributed.optimization_dtype, DType::float32);
  EXPECT_EQ(config.distributed.world_size, 1);
  EXPECT_EQ(config.distributed.rank, 0);
  EXPECT_EQ(config.distributed.data_parallel(), 1);
  EXPECT_TRUE(config.multi_stage.full_precision_gradients);
  EXPECT_DOUBLE_EQ(config.multi_stage.layers_per_stage, 1.0);
}

TEST_F(GPTConfigTest, EmptyConfigHasFastLlmDefaults) {
  GPTModelConfig config = load("{}");
  const auto& base = config.base_model;
  EXPECT_EQ(base.hidden_size, 1024);
  EXPECT_EQ(base.embeddings.vocab_size, 49152);
  EXPECT_FALSE(base.tied_embedding_weight);
  EXPECT_EQ(base.decoder.type(), "fixed");
  EXPECT_EQ(base.decoder->block_count(), 12);
  EXPECT_EQ(base.decoder.as<FixedBlockSequenceConfig>()->block.type(), "decoder");
  const AttentionConfig& mixer = attention(config);
  EXPECT_EQ(mixer.heads, 8);
  EXPECT_EQ(mixer.head_groups, 1);  // multi-query attention by default
  EXPECT_EQ(mixer.head_size, 128);
  EXPECT_TRUE(mixer.add_linear_biases);
  EXPECT_EQ(mixer.query_layer.bias.enabled, true);
  EXPECT_EQ(mixer.rotary.type(), "none");  // no rotary unless asked
  EXPECT_FALSE(mixer.window_size.has_value());
  EXPECT_DOUBLE_EQ(mixer.dropout, 0.0);
  const auto* norm = block(config).normalization.as<layers::LayerNormalizationConfig>();
  ASSERT_NE(norm, nullptr);  // layer norm by default
  EXPECT_DOUBLE_EQ(norm->epsilon, 1e-5);
  const MlpConfig& feed_forward = mlp(config);
  EXPECT_EQ(block(config).mlp.type(), "mlp");
  EXPECT_EQ(feed_forward.intermediate_size, 4096);
  EXPECT_FALSE(feed_forward.gated);
  EXPECT_EQ(feed_forward.activation, layers::ActivationType::gelu);  // gelu when not gated
  EXPECT_TRUE(feed_forward.add_linear_biases);
  EXPECT_DOUBLE_EQ(block(config).dropout, 0.0);
  EXPECT_EQ(block(config).output_scale.enabled, false);
  EXPECT_TRUE(base.head.normalization.is<layers::LayerNormalizationConfig>());
  EXPECT_EQ(config.distributed.compute_dtype, DType::float32);  // fp32 compute by default
  EXPECT_EQ(config.distributed.seed, 1234);
  EXPECT_EQ(config.distributed.tensor_parallel, 1);
  EXPECT_EQ(config.distributed.backend, engine::DistributedBackend::nccl);
  EXPECT_DOUBLE_EQ(config.distributed.timeout, 60.0);
  // Fast-LLM's first seed-shift prime, 317767863445754100075399033823, modulo 2^64.
  EXPECT_EQ(config.distributed.dp_seed_shift.value, 12879245699748017119ull);
  EXPECT_FALSE(config.multi_stage.zero_stage.has_value());
  EXPECT_FALSE(config.multi_stage.num_grad_buffers.has_value());
  EXPECT_TRUE(config.unsupported_fields().empty());
}

TEST_F(GPTConfigTest, GatedMlpDefaultsToSiluAndRotaryVariantsResolve) {
  GPTModelConfig config = load(R"(
base_model:
  decoder:
    block:
      mlp: {gated: true}
      mixer: {rotary: {type: yarn}}
)");
  EXPECT_EQ(mlp(config).activation, layers::ActivationType::silu);
  const auto* yarn = attention(config).rotary.as<layers::YarnRotaryConfig>();
  ASSERT_NE(yarn, nullptr);
  EXPECT_DOUBLE_EQ(yarn->scale_factor, 8.0);
  EXPECT_DOUBLE_EQ(yarn->beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(yarn->beta_slow, 1.0);
  EXPECT_EQ(yarn->original_context_length, 8192);
  EXPECT_NEAR(*yarn->attention_factor, 0.1 * std::log(8.0) + 1.0, 1e-12);

  const auto llama3_config = load("{base_model: {decoder: {block: {mixer: {rotary: {type: llama3}}}}}}");
  const auto* llama3 = attention(llama3_config).rotary.as<layers::Llama3RotaryConfig>();
  ASSERT_NE(llama3, nullptr);
  EXPECT_DOUBLE_EQ(llama3->theta, 10000.0);
  EXPECT_DOUBLE_EQ(llama3->scale_factor, 8.0);
  EXPECT_DOUBLE_EQ(llama3->low_frequency_factor, 1.0);
  EXPECT_DOUBLE_EQ(llama3->high_frequency_factor, 4.0);
  EXPECT_EQ(llama3->original_context_length, 8192);
}

TEST_F(GPTConfigTest, PerLayerBiasOverridesTheBlockDefault) {
  // Qwen2's layout: no biases by default, but query/key/value with one.
  GPTModelConfig config = load(R"(
base_model:
  decoder:
    block:
      mixer:
        add_linear_biases: false
        query_layer: {bias: {enabled: true}}
        key_layer: {bias: {enabled: true}}
)");
  const AttentionConfig& mixer = attention(config);
  EXPECT_EQ(mixer.query_layer.bias.enabled, true);
  EXPECT_EQ(mixer.key_layer.bias.enabled, true);
  EXPECT_EQ(mixer.dense_layer.bias.enabled, false);
}

TEST_F(GPTConfigTest, OverridesReachNestedFields) {
  GPTModelConfig config = load(kMistral, {"base_model.decoder.block.mixer.heads=16", "distributed.seed=7",
                                          "base_model.decoder.block.mlp.intermediate_size=1024"});
  EXPECT_EQ(attention(config).heads, 16);
  EXPECT_EQ(attention(config).head_groups, 8);  // siblings kept
  EXPECT_EQ(mlp(config).intermediate_size, 1024);
  EXPECT_TRUE(mlp(config).gated);
  EXPECT_EQ(config.distributed.seed, 7);
}

TEST_F(GPTConfigTest, MisspeltKeyNamesThePathAndSuggests) {
  std::string message = error("{base_model: {hiden_size: 4096}}");
  EXPECT_TRUE(contains(message, "model.base_model.hiden_size")) << message;
  EXPECT_TRUE(contains(message, "did you mean 'hidden_size'")) << message;
  message = error("{base_model: {decoder: {block: {mixer: {head_group: 4}}}}}");
  EXPECT_TRUE(contains(message, "model.base_model.decoder.block.mixer.head_group")) << message;
  EXPECT_TRUE(contains(message, "did you mean 'head_groups'")) << message;
}

TEST_F(GPTConfigTest, InvalidValuesNameTheFullPath) {
  std::string message = error("{base_model: {decoder: {block: {mixer: {heads: 0}}}}}");
  EXPECT_TRUE(contains(message, "model.base_model.decoder.block.mixer.heads: must be greater than 0")) << message;
  message = error("{base_model: {decoder: {block: {mixer: {heads: 32, head_groups: 3}}}}}");
  EXPECT_TRUE(contains(message, "model.base_model.decoder.block.mixer.head_groups: must divide heads (32)"))
      << message;
  message = error("{base_model: {decoder: {block: {mixer: {window_size: 0}}}}}");
  EXPECT_TRUE(contains(message, "model.base_model.decoder.block.mixer.window_size: must be greater than 0"))
      << message;
  message = error("{base_model: {decoder: {block: {mixer: {causal: false, window_size: 128}}}}}");
  EXPECT_TRUE(contains(message, "mixer.window_size: a sliding window needs causal attention")) << message;
  message = error("{base_model: {decoder: {block: {dropout: 1.5}}}}");
  EXPECT_TRUE(contains(message, "model.base_model.decoder.block.dropout: must be in [0, 1]")) << message;
  message = error("{base_model: {embeddings: {vocab_size: -1}}}");
  EXPECT_TRUE(contains(message, "model.base_model.embeddings.vocab_size: must be greater than 0")) << message;
  message = error("{base_model: {hidden_size: 0}}");
  EXPECT_TRUE(contains(message, "model.base_model.hidden_size")) << message;
  message = error("{base_model: {decoder: {block: {normalization: {type: rms_norm, epsilon: 0}}}}}");
  EXPECT_TRUE(contains(message, "block.normalization.epsilon: must be greater than 0")) << message;
  message = error(
      "{base_model: {decoder: {block: {mixer: {rotary: {type: llama3, low_frequency_factor: 4, "
      "high_frequency_factor: 4}}}}}}");
  EXPECT_TRUE(contains(message, "mixer.rotary.high_frequency_factor: must be greater than low_frequency_factor"))
      << message;
  message = error("{base_model: {decoder: {block: {mixer: {implementation: flash, head_size: 512}}}}}");
  EXPECT_TRUE(contains(message, "mixer.head_size: must be at most 256")) << message;
  message = error("{base_model: {head: {final_logit_softcap: 0}}}");
  EXPECT_TRUE(contains(message, "model.base_model.head.final_logit_softcap: must be greater than 0")) << message;
  message = error("{base_model: {decoder: {block: {mlp: {type: moe, experts: 4, shared_experts: 2, "
                  "experts_per_token: 3}}}}}");
  EXPECT_TRUE(contains(message, "mlp.experts_per_token")) << message;
}

TEST_F(GPTConfigTest, WrongTypesAreErrors) {
  EXPECT_TRUE(contains(error("{base_model: {hidden_size: big}}"), "model.base_model.hidden_size: expected an integer"));
  EXPECT_TRUE(contains(error("{base_model: {decoder: {block: {mlp: {gated: maybe}}}}}"),
                       "model.base_model.decoder.block.mlp.gated: expected true or false"));
  EXPECT_TRUE(contains(error("{base_model: {decoder: {num_blocks: [1, 2]}}}"),
                       "model.base_model.decoder.num_blocks: expected an integer"));
  EXPECT_TRUE(contains(error("{base_model: {decoder: {block: {mlp: {activation: swish}}}}}"),
                       "mlp.activation: unknown value 'swish'"));
  EXPECT_TRUE(contains(error("{distributed: {compute_dtype: bf17}}"),
                       "model.distributed.compute_dtype: unknown data type 'bf17'"));
  EXPECT_TRUE(contains(error("{distributed: {compute_dtype: int32}}"),
                       "model.distributed.compute_dtype: must be a floating-point type"));
  EXPECT_TRUE(contains(error("{base_model: {embeddings: 3}}"), "model.base_model.embeddings"));
}

TEST_F(GPTConfigTest, DataTypeAliasesAreAccepted) {
  EXPECT_EQ(load("{distributed: {compute_dtype: bfloat16}}").distributed.compute_dtype, DType::bfloat16);
  EXPECT_EQ(load("{distributed: {compute_dtype: fp16}}").distributed.compute_dtype, DType::float16);
  EXPECT_EQ(load("{distributed: {compute_dtype: torch.float32}}").distributed.compute_dtype, DType::float32);
}

TEST_F(GPTConfigTest, UnknownTypeIsAnError) {
  std::string message = error("{base_model: {decoder: {block: {mlp: {type: dense}}}}}");
  EXPECT_TRUE(contains(message, "model.base_model.decoder.block.mlp.type: unknown type 'dense'")) << message;
  message = error("{base_model: {decoder: {block: {normalization: {type: rmsnorm}}}}}");
  EXPECT_TRUE(contains(message, "did you mean 'rms_norm'")) << message;
  message = error("{base_model: {head: {losses: {ce: {weight: 1.0}}}}}");
  EXPECT_TRUE(contains(message, "model.base_model.head.losses.ce.type: a type is required")) << message;
}

TEST_F(GPTConfigTest, PatternDecoder) {
  GPTModelConfig config = load(R"(
base_model:
  decoder:
    type: pattern
    blocks:
      local: {mixer: {window_size: 512}}
      global: {mixer: {rotary: {type: default}}}
    pattern: [local, local, global]
    num_blocks: 7
)");
  const auto* decoder = config.base_model.decoder.as<layers::PatternBlockSequenceConfig>();
  ASSERT_NE(decoder, nullptr);
  EXPECT_EQ(decoder->block_count(), 7);
  std::vector<std::string> names;
  for (int index = 0; index < 7; ++index) names.push_back(decoder->block_name(index));
  EXPECT_EQ(names, (std::vector<std::string>{"local", "local", "global", "local", "local", "global", "local"}));
  const auto& last = dynamic_cast<const DecoderBlockConfig&>(decoder->last_block());
  EXPECT_EQ(last.mixer.as<AttentionConfig>()->window_size, 512);

  std::string message = error("{base_model: {decoder: {type: pattern, blocks: {a: {}}, pattern: [a, b]}}}");
  EXPECT_TRUE(contains(message, "model.base_model.decoder.pattern: names blocks that are not defined in `blocks`: b"))
      << message;
  message = error("{base_model: {decoder: {type: pattern, blocks: {a: {}}}}}");
  EXPECT_TRUE(contains(message, "model.base_model.decoder.pattern: at least one block name is required")) << message;
}

TEST_F(GPTConfigTest, LossesValidate) {
  GPTModelConfig config = load("{base_model: {head: {losses: {ce: {type: label}, z: {type: z_loss, weight: 1e-4}}}}}");
  ASSERT_EQ(config.base_model.head.losses.size(), 2u);  // the default loss is not added to explicit ones
  EXPECT_DOUBLE_EQ(config.base_model.head.losses.at("z")->weight, 1e-4);
  EXPECT_TRUE(contains(error("{base_model: {head: {losses: {lm_head_loss: {type: label}}}}}"),
                       "model.base_model.head.losses.lm_head_loss: this loss name is reserved"));
  EXPECT_TRUE(contains(error("{base_model: {head: {losses: {ce: {type: label, loss_type: reverse_kl}}}}}"),
                       "head.losses.ce.loss_type: reverse_kl is not defined for labels"));
  EXPECT_TRUE(contains(error("{base_model: {head: {losses: {ce: {type: label, use_triton: true}}}}}"),
                       "head.losses.ce.use_triton"));
  EXPECT_TRUE(contains(error("{base_model: {head: {losses: {p: {type: dpo}}}}}"),
                       "head.losses.p.reference_model: is required"));
  EXPECT_TRUE(contains(error("{base_model: {head: {prediction_heads: 2, prediction_loss_coefficient: [1.0]}}}"),
                       "head.prediction_loss_coefficient: must have one entry per prediction head (2)"));
}

TEST_F(GPTConfigTest, EverythingWrittenReadsBackTheSame) {
  // A config touching every kind of field: dynamic types in maps and optionals, enums, lists, data types, seeds.
  const std::string text = R"(
base_model:
  decoder:
    type: pattern
    blocks:
      dense: {mixer: {rotary: {type: llama3}, query_norm: {type: rms_norm}}, mlp: {gated: true}}
      sparse:
        mlp: {type: moe, experts: 8, experts_per_token: 2}
        mixer: {window_size: 64}
        output_scale: {enabled: true, initialization: {type: fill, value: 0.5}}
    pattern: [dense, sparse]
    num_blocks: 4
  embeddings: {position_embeddings: {enabled: true}, word_embeddings: {weight_decay: false}}
  head: {losses: {ce: {type: label}, z: {type: z_loss}}, output_weight: {initialization: {type: normal, std: 0.02}}}
  peft: {type: lora, rank: 4}
multi_stage: {zero_stage: 3}
distributed: {compute_dtype: bf16, dp_seed_shift: 123456789012345678901234567890}
)";
  GPTModelConfig config = load(text);
  std::string written = config.to_yaml_string();
  GPTModelConfig reread = load(written);
  EXPECT_EQ(reread.to_yaml_string(), written);
  EXPECT_TRUE(compare_architecture(config, reread).empty());
  // The values survived, not only the text.
  const auto* decoder = reread.base_model.decoder.as<layers::PatternBlockSequenceConfig>();
  ASSERT_NE(decoder, nullptr);
  EXPECT_EQ(decoder->blocks.at("sparse").as<DecoderBlockConfig>()->mlp.as<layers::MoeMlpConfig>()->experts, 8);
  EXPECT_EQ(reread.multi_stage.num_weight_buffers, 2);
  const auto& word_decay = reread.base_model.embeddings.word_embeddings.weight_decay;
  ASSERT_TRUE(word_decay.has_value());
  EXPECT_FALSE(word_decay->enabled);
  // 123456789012345678901234567890 modulo 2^64.
  EXPECT_EQ(reread.distributed.dp_seed_shift.value, 14083847773837265618ull);

  // The Mistral example too, and its explicit-only form has what the file gave and nothing else.
  GPTModelConfig mistral = load(kMistral);
  std::string mistral_written = mistral.to_yaml_string();
  EXPECT_EQ(load(mistral_written).to_yaml_string(), mistral_written);
  YAML::Node explicit_only = mistral.to_yaml(config::WriteOptions{.explicit_only = true});
  EXPECT_EQ(explicit_only["base_model"]["hidden_size"].as<int>(), 4096);
  EXPECT_FALSE(explicit_only["base_model"]["embeddings"]["num_position_embeddings"]);
  EXPECT_FALSE(explicit_only["distributed"]["world_size"]);
}

TEST_F(GPTConfigTest, NotSupportedYetReportsThePath) {
  auto has = [](const std::vector<std::string>& messages, const std::string& part) {
    for (const auto& message : messages)
      if (contains(message, part)) return true;
    return false;
  };
  auto messages = unsupported("{base_model: {decoder: {block: {mlp: {type: moe, router_normalization: {}}}}}}");
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_TRUE(contains(messages[0], "base_model.decoder.block.mlp.router_normalization")) << messages[0];
  EXPECT_TRUE(contains(messages[0], "router input normalization")) << messages[0];
  // The same field inside a pattern decoder names its block.
  messages = unsupported("{base_model: {decoder: {type: pattern, blocks: {a: {}, b: {mlp: {type: moe, "
                         "router_normalization: {}}}}, pattern: [a, b]}}}");
  EXPECT_TRUE(has(messages, "base_model.decoder.blocks.b.mlp.router_normalization"));
  EXPECT_TRUE(unsupported("{base_model: {decoder: {block: {mlp: {type: moe}}}}}").empty());
  EXPECT_TRUE(has(unsupported("{base_model: {decoder: {block: {mixer: {type: mamba}}}}}"),
                  "decoder.block.mixer.type: mamba is not supported yet"));
  EXPECT_TRUE(has(unsupported("{base_model: {decoder: {block: {mixer: {value_norm: {type: rms_norm}}}}}}"),
                  "decoder.block.mixer.value_norm"));
  // MLP recomputation is supported (the dense MLP implements every level).
  EXPECT_TRUE(unsupported("{base_model: {decoder: {block: {mlp: {recompute_level: full}}}}}").empty());
  EXPECT_TRUE(has(unsupported("{base_model: {decoder: {block: {output_scale: {enabled: true}}}}}"),
                  "decoder.block.output_scale.enabled: true is not supported yet"));
  EXPECT_TRUE(unsupported("{base_model: {peft: {type: lora}}}").empty());
  EXPECT_TRUE(has(unsupported("{base_model: {head: {prediction_heads: 2}}}"), "model.base_model.head.prediction_heads"));
  // Policy-gradient losses and distillation, of the logits and of the activations, are built (docs/post-training.md).
  EXPECT_TRUE(unsupported("{base_model: {head: {losses: {pg: {type: grpo}}}}}").empty());
  EXPECT_TRUE(unsupported("{base_model: {head: {losses: {pg: {type: gspo}}}}}").empty());
  EXPECT_TRUE(unsupported("{base_model: {head: {losses: {kd: {type: distillation}}}}}").empty());
  EXPECT_TRUE(unsupported("{base_model: {decoder: {block: {distillation_model: teacher}}}}").empty());
  // Every ZeRO stage is supported.
  for (const char* zero : {"{multi_stage: {zero_stage: 1}}", "{multi_stage: {zero_stage: 2}}",
                           "{multi_stage: {zero_stage: 3}}"})
    EXPECT_TRUE(unsupported(zero).empty()) << zero;
  {
    ScopedEnvironment two_gpus({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"},
                                {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
    // Tensor and sequence-tensor parallelism are built (docs/distributed.md).
    EXPECT_TRUE(unsupported("{distributed: {tensor_parallel: 2, sequence_tensor_parallel: true}}").empty());
    // Plain data parallelism is in scope.
    EXPECT_TRUE(unsupported("{multi_stage: {zero_stage: 2}}").empty());
  }
  // In-scope features stay unmarked.
  EXPECT_TRUE(unsupported(R"(
base_model:
  tied_embedding_weight: true
  embeddings: {position_embeddings: {enabled: true}, embedding_scale: 2.0}
  decoder:
    block:
      mixer: {causal: false, query_norm: {type: rms_norm}, key_norm: {type: rms_norm}, dropout: 0.1,
              rotary: {type: yarn}, softmax_scale_power: 1.0}
      mlp: {activation: squared_relu}
      normalization: {type: rms_norm, zero_centered: true}
      dropout: 0.1
  head: {final_logit_softcap: 30.0, cross_entropy_splits: 4, logits_scale_factor: 0.5,
         losses: {ce: {type: label}, z: {type: z_loss}}}
distributed: {compute_dtype: fp16}
)")
                  .empty());
}

TEST_F(GPTConfigTest, ArchitectureComparisonIgnoresNonArchitectureFields) {
  GPTModelConfig mistral = load(kMistral);
  GPTModelConfig narrower = load(kMistral, {"base_model.hidden_size=2048"});
  auto differences = compare_architecture(mistral.base_model, narrower.base_model);
  ASSERT_EQ(differences.size(), 1u);
  EXPECT_EQ(differences[0], "model.base_model.hidden_size: 4096 != 2048");
  // Dropout and the sliding window are not architecture (the window must be given again when loading).
  GPTModelConfig other_dropout =
      load(kMistral, {"base_model.decoder.block.dropout=0.1", "base_model.decoder.block.mixer.window_size=1024",
                      "distributed.seed=1"});
  EXPECT_TRUE(compare_architecture(mistral.base_model, other_dropout.base_model).empty());
  GPTModelConfig more_heads = load(kMistral, {"base_model.decoder.block.mixer.head_groups=4"});
  differences = compare_architecture(mistral.base_model, more_heads.base_model);
  ASSERT_EQ(differences.size(), 1u);
  EXPECT_EQ(differences[0], "model.base_model.decoder.block.mixer.head_groups: 8 != 4");
}

TEST_F(GPTConfigTest, DistributedLayoutFromTheEnvironment) {
  ScopedEnvironment launcher({{"WORLD_SIZE", "8"}, {"RANK", "5"}, {"LOCAL_WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                              {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  GPTModelConfig config = load("{distributed: {tensor_parallel: 2}}");
  const auto& distributed = config.distributed;
  EXPECT_EQ(distributed.world_size, 8);
  EXPECT_EQ(distributed.rank, 5);
  EXPECT_EQ(distributed.data_parallel(), 4);
  EXPECT_EQ(distributed.tensor_rank(), 1);
  EXPECT_EQ(distributed.data_rank(), 2);
  EXPECT_EQ(distributed.pipeline_rank(), 0);
  EXPECT_EQ(distributed.local_rank(), 1);
  // The config file wins over the environment.
  EXPECT_EQ(load("{distributed: {world_size: 2, rank: 1}}").distributed.world_size, 2);

  std::string message = error("{distributed: {tensor_parallel: 3}}");
  EXPECT_TRUE(contains(message, "model.distributed.world_size: must be a multiple of tensor_parallel * "
                                "pipeline_parallel = 3 * 1 = 3, got 8"))
      << message;
  message = error("{distributed: {sequence_data_parallel: 3}}");
  EXPECT_TRUE(contains(message, "model.distributed.sequence_data_parallel: must divide the data-parallel size 8"))
      << message;
  message = error("{distributed: {tensor_parallel: 8}}");
  EXPECT_TRUE(contains(message, "model.distributed.tensor_parallel: must divide local_world_size (4)")) << message;
  message = error("{distributed: {rank: 8}}");
  EXPECT_TRUE(contains(message, "model.distributed.rank: must be less than world_size (8)")) << message;
}

TEST_F(GPTConfigTest, MalformedEnvironmentIsAnError) {
  ScopedEnvironment launcher({{"WORLD_SIZE", "eight"}, {"RANK", "0"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"},
                              {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  std::string message = error("{}");
  EXPECT_TRUE(contains(message, "model.distributed.world_size: is not set, and the launcher's environment does not give "
                                "it"))
      << message;
  EXPECT_TRUE(contains(message, "WORLD_SIZE")) << message;
  // An incomplete launch names what is missing.
  ScopedEnvironment incomplete({{"WORLD_SIZE", "2"}, {"RANK", std::nullopt}, {"MASTER_PORT", std::nullopt}});
  message = error("{}");
  EXPECT_TRUE(contains(message, "RANK")) << message;
  EXPECT_TRUE(contains(message, "MASTER_PORT")) << message;
}

}  // namespace
}  // namespace fast_llm::models::gpt
