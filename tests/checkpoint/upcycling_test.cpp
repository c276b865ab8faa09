// Upcycling a dense Llama checkpoint into a mixture of experts through `pretrained` (conversion/upcycling.h): every
// expert is a copy of the dense MLP and the router is the configured initialization, so at step 0 the upcycled model's
// logits are the dense model's (top-k softmax scores sum to one); MLPs that do not match are refused naming the field;
// docs/moe.md's recipe (one step at learning rate 0 with a mixtral export) saves the upcycled model unchanged.
#include <gtest/gtest.h>

#include "checkpoint/checkpoint_test_util.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/models/gpt/conversion/huggingface.h"
#include "fast_llm/models/gpt/conversion/reference_outputs.h"
#include "fast_llm/models/gpt/conversion/upcycling.h"
#include "fast_llm/models/gpt/model_type.h"
#include "fast_llm/models/gpt/training.h"
#include "models/config_test_util.h"

namespace fast_llm::models::gpt {
namespace {

using nlohmann::json;
using testing::error_of;

std::filesystem::path directory(const std::string& name) { return testing::fresh_directory("upcycling_test", name); }

json dense_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", 8},
          {"intermediate_size", 12},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"head_dim", 4},
          {"hidden_act", "silu"},
          {"max_position_embeddings", 64},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"tie_word_embeddings", false},
          {"vocab_size", 16}};
}

constexpr const char* kMoe = "{type: moe, experts: 4, experts_per_token: 2, intermediate_size: 12, gated: true, "
                             "activation: silu, add_linear_biases: false}";

// `model_outputs` of the checkpoint at `model` (fp64), with `mlp` (YAML) as the run's MLP when set.
Tensor logits_of(const std::filesystem::path& root, const std::filesystem::path& model, const std::string& mlp) {
  const std::string output = (root / (mlp.empty() ? "dense.safetensors" : "moe.safetensors")).string();
  const std::string base_model = mlp.empty() ? "" : ", base_model: {decoder: {block: {mlp: " + mlp + "}}}";
  ModelOutputsConfig config;
  testing::ScopedEnvironment environment(testing::single_process());
  engine::load_config_with_pretrained(
      config,
      YAML::Load("{pretrained: {format: llama, path: '" + model.string() + "'}, tokens: '" +
                 (root / "tokens.safetensors").string() + "', output: '" + output +
                 "', gradients: false, model: {distributed: {compute_dtype: float64, optimization_dtype: float64, "
                 "use_cuda: false}" +
                 base_model + "}}"),
      gpt_model_type());
  write_model_outputs(config);
  return engine::SafetensorsFile(output).read("logits");
}

TEST(Upcycling, TheUpcycledModelComputesTheDenseModelsLogits) {
  const auto root = directory("logits");
  testing::write_hf_checkpoint(root / "dense",
                               {dense_config(), testing::llama_tensors(dense_config(), false, false, false)});
  Tensor tokens = Tensor::empty(Shape{2, 6}, DType::int64);
  const int64_t ids[] = {1, 5, 9, 2, 15, 0, 3, 3, 7, 11, 4, 8};
  std::copy(std::begin(ids), std::end(ids), tokens.data_as<int64_t>());
  engine::write_safetensors(root / "tokens.safetensors", {{.name = "tokens", .dtype = DType::int64,
                                                           .shape = Shape{2, 6}, .values = [&] { return tokens; }}});
  const Tensor dense = logits_of(root, root / "dense", "");
  const Tensor moe = logits_of(root, root / "dense", kMoe);
  ASSERT_EQ(dense.shape(), moe.shape());
  double largest = 0.0;
  for (int64_t i = 0; i < dense.numel(); ++i) {
    largest = std::max(largest, std::abs(dense.data_as<double>()[i]));
    EXPECT_NEAR(moe.data_as<double>()[i], dense.data_as<double>()[i],
                1e-12 * std::max(1.0, std::abs(dense.data_as<double>()[i])))
        << i;
  }
  EXPECT_GT(largest, 0.0);
  // Sinkhorn's scores (softmax over every expert, taken at the chosen ones) do not sum to one: the logits move.
  const Tensor sinkhorn = logits_of(root, root / "dense",
                                    "{type: moe, experts: 4, experts_per_token: 2, intermediate_size: 12, gated: true, "
                                    "activation: silu, add_linear_biases: false, routing: sinkhorn}");
  double moved = 0.0;
  for (int64_t i = 0; i < dense.numel(); ++i)
    moved = std::max(moved, std::abs(sinkhorn.data_as<double>()[i] - dense.data_as<double>()[i]));
  EXPECT_GT(moved, 1e-6);
}

GPTBaseModelConfig base_model(const json& hf, const std::string& mlp) {
  YAML::Node node = import_hf_config(llama_format(), hf, "config.json");
  if (!mlp.empty()) node["decoder"]["block"]["mlp"] = YAML::Load(mlp);
  GPTBaseModelConfig config;
  config.load(node, "model.base_model");
  config.validate("model.base_model");
  return config;
}

TEST(Upcycling, ExpertsAreCopiesAndTheRouterIsTheConfiguredInitialization) {
  const auto path = directory("weights");
  auto tensors = testing::write_hf_checkpoint(path, {dense_config(), testing::llama_tensors(dense_config(), false,
                                                                                            false, false)});
  HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(path, engine::CheckpointFormat::llama, true);
  const GPTBaseModelConfig dense = base_model(dense_config(), "");
  const GPTBaseModelConfig moe = base_model(dense_config(), kMoe);
  ASSERT_TRUE(is_upcycling(dense, moe));
  EXPECT_FALSE(is_upcycling(dense, dense));
  EXPECT_FALSE(is_upcycling(moe, moe));
  auto dense_state = import_hf_weights(*checkpoint.format, checkpoint.tensors, dense);
  auto state = upcycle_weights(dense_state, dense, moe);
  const auto weights = [](const engine::TensorSource& source, const std::string& name) {
    return source.load(engine::state_key(name, engine::kWeightsShard));
  };
  for (const char* name : {"decoder.1.mlp.layer_1.weight", "decoder.0.mlp.layer_2.weight"}) {
    const Tensor one = weights(*dense_state, name), all = weights(*state, name);
    ASSERT_EQ(all.size(0), 4 * one.size(0)) << name;
    for (int64_t expert = 0; expert < 4; ++expert)
      EXPECT_TRUE(testing::same_bytes(all.slice(0, expert * one.size(0), (expert + 1) * one.size(0)).to(Device::cpu()),
                                      one))
          << name << " expert " << expert;
  }
  EXPECT_TRUE(testing::same_bytes(weights(*state, "decoder.0.mixer.query.weight"),
                                  tensors.at("model.layers.0.self_attn.q_proj.weight")));
  // The router: [experts, hidden], N(0, hidden^-0.5) by default, different per layer.
  const Tensor router_0 = weights(*state, "decoder.0.mlp.router.weight");
  const Tensor router_1 = weights(*state, "decoder.1.mlp.router.weight");
  ASSERT_EQ(router_0.shape(), (Shape{4, 8}));
  double sum_squares = 0.0;
  for (int64_t i = 0; i < router_0.numel(); ++i) sum_squares += double(router_0.data_as<float>()[i]) *
                                                                   router_0.data_as<float>()[i];
  EXPECT_GT(sum_squares / 32.0, 0.125 / 4.0);
  EXPECT_LT(sum_squares / 32.0, 0.125 * 4.0);
  EXPECT_FALSE(testing::same_bytes(router_0, router_1));
  // A zero router on request: then every token's scores are uniform over its experts.
  const Tensor zero = weights(*upcycle_weights(dense_state, dense,
                                               base_model(dense_config(),
                                                          "{type: moe, experts: 4, experts_per_token: 2, "
                                                          "intermediate_size: 12, gated: true, activation: silu, "
                                                          "add_linear_biases: false, router: {weight: "
                                                          "{initialization: {type: fill, value: 0}}}}")),
                              "decoder.1.mlp.router.weight");
  for (int64_t i = 0; i < zero.numel(); ++i) ASSERT_EQ(zero.data_as<float>()[i], 0.0f);
}

TEST(Upcycling, MlpsThatDoNotMatchAreRefusedNamingTheField) {
  const GPTBaseModelConfig dense = base_model(dense_config(), "");
  auto error = [&](const std::string& mlp, const json& hf = dense_config()) {
    return error_of(
        [&] { upcycle_weights(std::make_shared<engine::TensorList>("empty"), dense, base_model(hf, mlp)); });
  };
  std::string message = error("{type: moe, experts: 4, experts_per_token: 2, intermediate_size: 16, gated: true, "
                              "activation: silu, add_linear_biases: false}");
  EXPECT_NE(message.find("intermediate_size: 16 != the checkpoint's 12"), std::string::npos) << message;
  message = error("{type: moe, experts: 4, experts_per_token: 2, intermediate_size: 12, gated: true, "
                  "activation: gelu, add_linear_biases: false}");
  EXPECT_NE(message.find("activation"), std::string::npos) << message;
  json wider = dense_config();
  wider["num_attention_heads"] = 4;
  message = error(kMoe, wider);
  EXPECT_NE(message.find("heads"), std::string::npos) << message;
}

TEST(Upcycling, OneStepAtLearningRateZeroExportsTheUpcycledModel) {
  const auto root = directory("export");
  auto tensors = testing::write_hf_checkpoint(
      root / "dense", {dense_config(), testing::llama_tensors(dense_config(), false, false, false)});
  YAML::Node tree = YAML::Load(
      "pretrained: {format: llama, path: '" + (root / "dense").string() + "'}\n"
      "training: {train_iters: 1, num_workers: 1, export: {interval: 1, format: mixtral}}\n"
      "optimizer: {learning_rate: {base: 0.0}}\n"
      "data: {datasets: {training: {type: random}}, micro_batch_size: 16}\n"
      "model: {base_model: {decoder: {block: {mlp: " + std::string(kMoe) + "}}}, distributed: {use_cuda: false}}\n"
      "run: {experiment_dir: '" + (root / "run").string() + "'}");
  testing::ScopedEnvironment environment(testing::single_process());
  GPTTrainerConfig config;
  engine::load_config_with_pretrained(config, tree, gpt_model_type());
  train(config);
  auto exported = engine::SafetensorsSet::open_huggingface(root / "run" / "export" / "mixtral" / "1");
  for (int64_t layer = 0; layer < 2; ++layer) {
    const std::string dense = "model.layers." + std::to_string(layer) + ".mlp.";
    for (int64_t expert = 0; expert < 4; ++expert) {
      const std::string moe =
          "model.layers." + std::to_string(layer) + ".block_sparse_moe.experts." + std::to_string(expert) + ".";
      EXPECT_TRUE(testing::same_bytes(exported->load(moe + "w1.weight"), tensors.at(dense + "gate_proj.weight")));
      EXPECT_TRUE(testing::same_bytes(exported->load(moe + "w3.weight"), tensors.at(dense + "up_proj.weight")));
      EXPECT_TRUE(testing::same_bytes(exported->load(moe + "w2.weight"), tensors.at(dense + "down_proj.weight")));
    }
  }
  EXPECT_TRUE(testing::same_bytes(exported->load("lm_head.weight"), tensors.at("lm_head.weight")));
  EXPECT_EQ(testing::read_json(root / "run" / "export" / "mixtral" / "1" / "config.json")["num_local_experts"], 4);
}

}  // namespace
}  // namespace fast_llm::models::gpt
