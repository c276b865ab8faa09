// The Hugging Face `mixtral` format on tiny checkpoints the test writes itself: config.json -> a `type: moe` MLP with
// Mixtral's defaults, each expert's w1 / w3 / w2 at its rows of layer_1 / layer_2 and the gate as the router,
// HF -> ours -> HF byte-identical (sharded, with the index) with an equivalent config.json, `convert` through fast_llm
// and distributed, the errors (missing expert, models the format cannot hold), and the end-to-end path: import a
// Mixtral checkpoint, train two steps, export it, and load the export back to the trained model.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "checkpoint/checkpoint_test_util.h"
#include "fast_llm/config/merge.h"
#include "fast_llm/engine/checkpoint/convert.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/engine/checkpoint/metadata.h"
#include "fast_llm/layers/attention/config.h"
#include "fast_llm/layers/block/config.h"
#include "fast_llm/layers/block/sequence_config.h"
#include "fast_llm/layers/mlp/config.h"
#include "fast_llm/models/gpt/conversion/huggingface.h"
#include "fast_llm/models/gpt/model_type.h"
#include "fast_llm/models/gpt/training.h"
#include "models/config_test_util.h"

namespace fast_llm::models::gpt {
namespace {

using engine::CheckpointFormat;
using engine::ConvertConfig;
using nlohmann::json;
using testing::error_of;
using testing::same_bytes;

constexpr int64_t kHidden = 8, kIntermediate = 6, kExperts = 4, kLayers = 2;

std::filesystem::path directory(const std::string& name) { return testing::fresh_directory("mixtral_test", name); }

// A tiny MixtralConfig as transformers writes it (rope_theta and rms_norm_eps left to Mixtral's defaults).
json mixtral_config() {
  return {{"architectures", {"MixtralForCausalLM"}},
          {"model_type", "mixtral"},
          {"hidden_size", kHidden},
          {"intermediate_size", kIntermediate},
          {"num_hidden_layers", kLayers},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"head_dim", 4},
          {"hidden_act", "silu"},
          {"max_position_embeddings", 64},
          {"num_local_experts", kExperts},
          {"num_experts_per_tok", 2},
          {"router_aux_loss_coef", 0.02},
          {"router_jitter_noise", 0.0},
          {"output_router_logits", false},
          {"sliding_window", 16},
          {"tie_word_embeddings", false},
          {"attention_dropout", 0.0},
          {"vocab_size", 32},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"torch_dtype", "float32"},
          {"transformers_version", "4.57.0"},
          {"initializer_range", 0.02},
          {"use_cache", true}};
}

std::string layer_prefix(int64_t layer) { return "model.layers." + std::to_string(layer) + "."; }
std::string expert_prefix(int64_t layer, int64_t expert) {
  return layer_prefix(layer) + "block_sparse_moe.experts." + std::to_string(expert) + ".";
}

// The tensors of mixtral_config(): the Llama family's without its dense MLP, plus the gate and every expert.
std::map<std::string, Shape> mixtral_tensors(const json& config) {
  std::map<std::string, Shape> tensors = testing::llama_tensors(config, false, false, false);
  std::erase_if(tensors, [](const auto& item) { return item.first.find(".mlp.") != std::string::npos; });
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    tensors[layer_prefix(layer) + "block_sparse_moe.gate.weight"] = Shape{kExperts, kHidden};
    for (int64_t expert = 0; expert < kExperts; ++expert) {
      tensors[expert_prefix(layer, expert) + "w1.weight"] = Shape{kIntermediate, kHidden};
      tensors[expert_prefix(layer, expert) + "w3.weight"] = Shape{kIntermediate, kHidden};
      tensors[expert_prefix(layer, expert) + "w2.weight"] = Shape{kHidden, kIntermediate};
    }
  }
  return tensors;
}

testing::HfCheckpointSpec mixtral_spec() {
  const json config = mixtral_config();
  return {config, mixtral_tensors(config), DType::float32};
}

GPTBaseModelConfig base_model(const YAML::Node& node) {
  GPTBaseModelConfig config;
  config.load(node, "model.base_model");
  config.validate("model.base_model");
  return config;
}

const layers::DecoderBlockConfig& block_of(const GPTBaseModelConfig& config) {
  const auto& decoder = dynamic_cast<const layers::FixedBlockSequenceConfig&>(config.decoder.get());
  return dynamic_cast<const layers::DecoderBlockConfig&>(decoder.block.get());
}

Tensor load_weights(const engine::TensorSource& source, const std::string& parameter) {
  return source.load(engine::state_key(parameter, engine::kWeightsShard));
}

TEST(Mixtral, ImportsTheConfigWithMixtralsDefaults) {
  const auto path = directory("import_config");
  testing::write_hf_checkpoint(path, mixtral_spec());
  HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(path, CheckpointFormat::auto_, false);
  EXPECT_EQ(checkpoint.format->format, CheckpointFormat::mixtral);
  GPTBaseModelConfig config = base_model(checkpoint.base_model);
  const auto& block = block_of(config);
  const auto* mlp = block.mlp.as<layers::MoeMlpConfig>();
  ASSERT_NE(mlp, nullptr);
  EXPECT_EQ(mlp->experts, kExperts);
  EXPECT_EQ(mlp->shared_experts, 0);
  EXPECT_EQ(mlp->experts_per_token, 2);
  EXPECT_EQ(mlp->intermediate_size, kIntermediate);
  EXPECT_TRUE(mlp->gated);
  EXPECT_FALSE(mlp->add_linear_biases);
  EXPECT_EQ(mlp->auxiliary_loss_coefficient, 0.02);
  EXPECT_EQ(mlp->routing, layers::RoutingType::aux_loss);
  const auto& mixer = *block.mixer.as<layers::AttentionConfig>();
  EXPECT_EQ(mixer.window_size, 16);
  EXPECT_FALSE(*mixer.query_layer.bias.enabled);
  // MixtralConfig's own defaults, not Mistral's or Llama's: rope_theta 1e6, rms_norm_eps 1e-5, no sliding window,
  // 8 experts, 2 per token, router_aux_loss_coef 0.001.
  json bare = mixtral_config();
  for (const char* key : {"sliding_window", "num_local_experts", "num_experts_per_tok", "router_aux_loss_coef",
                          "router_jitter_noise"})
    bare.erase(key);
  GPTBaseModelConfig defaults = base_model(import_hf_config(mixtral_format(), bare, "bare"));
  const auto& default_block = block_of(defaults);
  const auto* default_mlp = default_block.mlp.as<layers::MoeMlpConfig>();
  EXPECT_EQ(default_mlp->experts, 8);
  EXPECT_EQ(default_mlp->experts_per_token, 2);
  EXPECT_EQ(default_mlp->auxiliary_loss_coefficient, 0.001);
  EXPECT_EQ(default_mlp->jitter_eps, 0.0);
  const auto& default_mixer = *default_block.mixer.as<layers::AttentionConfig>();
  EXPECT_EQ(default_mixer.window_size, std::nullopt);
  EXPECT_EQ(dynamic_cast<const layers::DefaultRotaryConfig&>(default_mixer.rotary.get()).theta, 1e6);
  EXPECT_EQ(default_block.normalization.as<layers::RmsNormalizationConfig>()->epsilon, 1e-5);
  // The jitter is read.
  json jittery = mixtral_config();
  jittery["router_jitter_noise"] = 0.1;
  EXPECT_EQ(block_of(base_model(import_hf_config(mixtral_format(), jittery, "jittery")))
                .mlp.as<layers::MoeMlpConfig>()
                ->jitter_eps,
            0.1);
}

TEST(Mixtral, MapsEachExpertToItsRows) {
  const auto path = directory("layouts");
  auto tensors = testing::write_hf_checkpoint(path, mixtral_spec());
  HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(path, CheckpointFormat::mixtral, true);
  GPTBaseModelConfig config = base_model(checkpoint.base_model);
  auto state = import_hf_weights(*checkpoint.format, checkpoint.tensors, config);
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    const std::string mlp = "decoder." + std::to_string(layer) + ".mlp.";
    EXPECT_TRUE(same_bytes(load_weights(*state, mlp + "router.weight"),
                           tensors.at(layer_prefix(layer) + "block_sparse_moe.gate.weight")));
    // layer_1: expert e's rows [e * 2I, (e + 1) * 2I) are [w1; w3].
    Tensor layer_1 = load_weights(*state, mlp + "layer_1.weight");
    ASSERT_EQ(layer_1.shape(), (Shape{kExperts * 2 * kIntermediate, kHidden}));
    // layer_2: expert e's rows [e * I, (e + 1) * I) are w2 transposed.
    Tensor layer_2 = load_weights(*state, mlp + "layer_2.weight");
    ASSERT_EQ(layer_2.shape(), (Shape{kExperts * kIntermediate, kHidden}));
    for (int64_t expert = 0; expert < kExperts; ++expert) {
      const int64_t block = kIntermediate * kHidden;
      const float* fused = layer_1.data_as<float>() + expert * 2 * block;
      EXPECT_EQ(std::memcmp(fused, tensors.at(expert_prefix(layer, expert) + "w1.weight").data(), block * 4), 0);
      EXPECT_EQ(std::memcmp(fused + block, tensors.at(expert_prefix(layer, expert) + "w3.weight").data(), block * 4),
                0);
      const float* down = tensors.at(expert_prefix(layer, expert) + "w2.weight").data_as<float>();  // [H, I]
      for (int64_t i = 0; i < kIntermediate; ++i)
        for (int64_t h = 0; h < kHidden; ++h)
          ASSERT_EQ(layer_2.data_as<float>()[(expert * kIntermediate + i) * kHidden + h], down[h * kIntermediate + i])
              << "layer " << layer << " expert " << expert;
    }
  }
}

// transformers 5's in-memory spelling (the router as `mlp.gate`, the experts stacked: gate_up_proj [E, 2I, H] with
// each expert's gate rows first, down_proj [E, H, I]) imports to the same weights as the per-expert spelling.
TEST(Mixtral, ImportsTheFusedSpellingOfTransformers5) {
  const auto per_expert = directory("spelling_per_expert");
  auto tensors = testing::write_hf_checkpoint(per_expert, mixtral_spec());
  const auto fused = directory("spelling_fused");
  std::filesystem::create_directories(fused);
  engine::TensorList list("fused");
  for (const auto& [name, tensor] : tensors) {
    if (name.find(".block_sparse_moe.") != std::string::npos) continue;
    list.add(name, {DType::float32, tensor.shape()}, [tensor] { return tensor; });
  }
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    const Tensor gate = tensors.at(layer_prefix(layer) + "block_sparse_moe.gate.weight");
    list.add(layer_prefix(layer) + "mlp.gate.weight", {DType::float32, gate.shape()}, [gate] { return gate; });
    Tensor gate_up = Tensor::empty(Shape{kExperts, 2 * kIntermediate, kHidden}, DType::float32);
    Tensor down = Tensor::empty(Shape{kExperts, kHidden, kIntermediate}, DType::float32);
    for (int64_t expert = 0; expert < kExperts; ++expert) {
      Tensor rows = gate_up.select(0, expert);
      rows.slice(0, 0, kIntermediate).copy_bytes_from(tensors.at(expert_prefix(layer, expert) + "w1.weight"));
      rows.slice(0, kIntermediate, 2 * kIntermediate)
          .copy_bytes_from(tensors.at(expert_prefix(layer, expert) + "w3.weight"));
      down.select(0, expert).copy_bytes_from(tensors.at(expert_prefix(layer, expert) + "w2.weight"));
    }
    list.add(layer_prefix(layer) + "mlp.experts.gate_up_proj", {DType::float32, gate_up.shape()},
             [gate_up] { return gate_up; });
    list.add(layer_prefix(layer) + "mlp.experts.down_proj", {DType::float32, down.shape()}, [down] { return down; });
  }
  engine::write_safetensors_set(fused, list, list.names(), int64_t(1) << 30, engine::SafetensorsSetLayout::huggingface);
  std::ofstream(fused / "config.json") << mixtral_config().dump(2);

  auto import = [](const std::filesystem::path& path) {
    HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(path, CheckpointFormat::mixtral, true);
    return import_hf_weights(*checkpoint.format, checkpoint.tensors, base_model(checkpoint.base_model));
  };
  auto expected = import(per_expert), actual = import(fused);
  ASSERT_EQ(actual->names(), expected->names());
  for (const std::string& name : expected->names())
    EXPECT_TRUE(same_bytes(actual->load(name), expected->load(name))) << name;
}

TEST(Mixtral, RoundTripIsByteIdenticalWithAnEquivalentConfig) {
  const auto source = directory("round_trip_source");
  const auto target = directory("round_trip_target");
  const testing::HfCheckpointSpec spec = mixtral_spec();
  // Sharded source and target: experts of one layer land in different files.
  auto tensors = testing::write_hf_checkpoint(source, spec, 300);
  HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(source, CheckpointFormat::mixtral, true);
  GPTBaseModelConfig config = base_model(checkpoint.base_model);
  auto state = import_hf_weights(*checkpoint.format, checkpoint.tensors, config);
  write_huggingface_checkpoint(target, CheckpointFormat::mixtral, config, state, std::nullopt, 300);
  EXPECT_TRUE(std::filesystem::exists(target / "model.safetensors.index.json"));
  auto exported = engine::SafetensorsSet::open_huggingface(target);
  std::set<std::string> names(exported->names().begin(), exported->names().end()), expected;
  for (const auto& [name, tensor] : tensors) expected.insert(name);
  EXPECT_EQ(names, expected);
  for (const auto& [name, tensor] : tensors) {
    if (exported->contains(name)) {
      EXPECT_TRUE(same_bytes(exported->load(name), tensor)) << name;
    }
  }

  // config.json keeps every key that changes the model, with its value.
  const json written = testing::read_json(target / "config.json");
  for (const char* key : {"num_local_experts", "num_experts_per_tok", "router_aux_loss_coef", "router_jitter_noise",
                          "sliding_window", "intermediate_size", "hidden_size", "num_hidden_layers", "head_dim",
                          "num_key_value_heads", "vocab_size", "tie_word_embeddings", "hidden_act"}) {
    ASSERT_TRUE(written.contains(key)) << key;
    if (written[key].is_number())
      EXPECT_EQ(written[key].get<double>(), spec.config[key].get<double>()) << key;
    else
      EXPECT_EQ(written[key], spec.config[key]) << key;
  }
  EXPECT_EQ(written["model_type"], "mixtral");
  EXPECT_EQ(written["architectures"], json::array({"MixtralForCausalLM"}));
  EXPECT_EQ(written["rope_theta"].get<double>(), 1e6);
  EXPECT_EQ(written["rms_norm_eps"].get<double>(), 1e-5);
  GPTBaseModelConfig reread = base_model(import_hf_config(mixtral_format(), written, "written"));
  EXPECT_EQ(config::compare_architecture(config, reread), std::vector<std::string>{});
  EXPECT_EQ(config.to_yaml_string(), reread.to_yaml_string());
}

void convert(const std::string& input_format, const std::filesystem::path& input, const std::string& output_format,
             const std::filesystem::path& output) {
  engine::convert(testing::load_config<ConvertConfig>("{input: {format: " + input_format + ", path: '" +
                                                          input.string() + "'}, output: {format: " + output_format +
                                                          ", path: '" + output.string() + "'}, exist_ok: true}",
                                                      ""),
                  gpt_model_type());
  EXPECT_TRUE(std::filesystem::exists(output / "ok"));
}

TEST(Mixtral, ConvertsThroughFastLlmAndDistributed) {
  const auto source = directory("convert_source");
  auto tensors = testing::write_hf_checkpoint(source, mixtral_spec());
  const auto fast_llm = directory("convert_fast_llm"), distributed = directory("convert_distributed");
  const auto fast_llm_again = directory("convert_fast_llm_again"), back = directory("convert_back");
  convert("auto", source, "fast_llm", fast_llm);
  convert("fast_llm", fast_llm, "distributed", distributed);
  convert("distributed", distributed, "fast_llm", fast_llm_again);
  convert("fast_llm", fast_llm_again, "mixtral", back);
  auto exported = engine::SafetensorsSet::open_huggingface(back);
  ASSERT_EQ(exported->names().size(), tensors.size());
  for (const auto& [name, tensor] : tensors) EXPECT_TRUE(same_bytes(exported->load(name), tensor)) << name;
  EXPECT_EQ(testing::read_json(back / "config.json")["num_local_experts"], kExperts);
  // A mixture of experts is not a Llama model.
  const std::string message = error_of([&] { convert("mixtral", source, "llama", directory("convert_llama")); });
  EXPECT_NE(message.find("decoder.block.mlp.type"), std::string::npos) << message;
}

TEST(Mixtral, MissingExpertsAndModelsTheFormatCannotHoldAreErrors) {
  const auto path = directory("missing_expert");
  testing::HfCheckpointSpec spec = mixtral_spec();
  spec.tensors.erase(expert_prefix(1, 3) + "w3.weight");
  testing::write_hf_checkpoint(path, spec);
  HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(path, CheckpointFormat::mixtral, true);
  GPTBaseModelConfig config = base_model(checkpoint.base_model);
  std::string message = error_of([&] { import_hf_weights(*checkpoint.format, checkpoint.tensors, config); });
  EXPECT_NE(message.find("model.layers.1.block_sparse_moe.experts.3.w3.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("missing"), std::string::npos) << message;

  // A checkpoint with more experts than config.json says has tensors nothing uses.
  const auto extra = directory("extra_expert");
  testing::HfCheckpointSpec more = mixtral_spec();
  more.config["num_local_experts"] = kExperts - 1;
  testing::write_hf_checkpoint(extra, more);
  HuggingfaceCheckpoint fewer = read_huggingface_checkpoint(extra, CheckpointFormat::mixtral, true);
  message = error_of([&] {
    import_hf_weights(*fewer.format, fewer.tensors, base_model(fewer.base_model));
  });
  EXPECT_NE(message.find("shape"), std::string::npos) << message;

  auto export_error = [](const std::string& mlp) {
    return error_of([&] {
      export_hf_config(mixtral_format(),
                       base_model(YAML::Load("{hidden_size: 8, embeddings: {vocab_size: 16}, head: {normalization: "
                                             "{type: rms_norm}}, decoder: {num_blocks: 1, block: {mixer: {heads: 2, "
                                             "head_groups: 1, head_size: 4, add_linear_biases: false, rotary: {type: "
                                             "default}}, mlp: " +
                                             mlp + ", normalization: {type: rms_norm}}}}")),
                       DType::float32);
    });
  };
  const std::string moe = "{type: moe, experts: 4, experts_per_token: 2, intermediate_size: 6, gated: true, "
                          "add_linear_biases: false";
  EXPECT_EQ(export_error(moe + "}"), "");
  message = export_error(moe + ", shared_experts: 1}");
  EXPECT_NE(message.find("shared_experts"), std::string::npos) << message;
  message = export_error(moe + ", routing: sinkhorn}");
  EXPECT_NE(message.find("routing"), std::string::npos) << message;
  message = export_error("{intermediate_size: 6, gated: true, add_linear_biases: false}");
  EXPECT_NE(message.find("decoder.block.mlp.type = moe"), std::string::npos) << message;
}

// The weights of a fast_llm checkpoint (its `model_<i>.safetensors` files).
std::unique_ptr<engine::SafetensorsSet> open_fast_llm(const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("model_") && name.ends_with(".safetensors")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  EXPECT_FALSE(files.empty()) << folder;
  return std::make_unique<engine::SafetensorsSet>(folder.string(), files);
}

// `train gpt` from `pretrained`, on random tokens, on the CPU.
void train_run(const std::filesystem::path& experiment, const std::string& config) {
  YAML::Node tree = config::merge_config_trees(
      YAML::Load("model: {distributed: {compute_dtype: fp32, use_cuda: false, seed: 4321}}\n"
                 "data: {datasets: {training: {type: random}}, micro_batch_size: 24}\n"
                 "optimizer: {learning_rate: {base: 0.01}}\n"
                 "training: {num_workers: 1, logs: {interval: 1}}"),
      YAML::Load(config));
  config::apply_override(tree, "run.experiment_dir=" + experiment.string());
  testing::ScopedEnvironment environment(testing::single_process());
  GPTTrainerConfig trainer;
  engine::load_config_with_pretrained(trainer, tree, gpt_model_type());
  train(trainer);
}

TEST(Mixtral, ImportTrainExportReimport) {
  const auto source = directory("e2e_source");
  auto tensors = testing::write_hf_checkpoint(source, mixtral_spec());
  const std::string pretrained = "pretrained: {format: mixtral, path: '" + source.string() + "'}\n";
  // Two steps from the imported Mixtral, exported as mixtral, and the same two steps exported as fast_llm.
  const auto trained = directory("e2e_trained"), trained_fast_llm = directory("e2e_trained_fast_llm");
  train_run(trained, pretrained + "training: {train_iters: 2, export: {interval: 2, format: mixtral}}");
  train_run(trained_fast_llm, pretrained + "training: {train_iters: 2, export: {interval: 2, format: fast_llm}}");
  const auto exported = trained / "export" / "mixtral" / "2";
  ASSERT_TRUE(engine::checkpoint_complete(exported));
  const json written = testing::read_json(exported / "config.json");
  EXPECT_EQ(written["model_type"], "mixtral");
  EXPECT_EQ(written["num_local_experts"], kExperts);

  // Every tensor is there, the experts changed (training reached them), and the export reads back to the trained
  // model: converting it to fast_llm gives the fast_llm export of the same run, and back to mixtral the same bytes.
  auto weights = engine::SafetensorsSet::open_huggingface(exported);
  ASSERT_EQ(weights->names().size(), tensors.size());
  int changed_experts = 0;
  for (const auto& [name, tensor] : tensors) {
    ASSERT_TRUE(weights->contains(name)) << name;
    if (name.find(".experts.") != std::string::npos && !same_bytes(weights->load(name), tensor)) ++changed_experts;
  }
  EXPECT_GT(changed_experts, 0);
  const auto as_fast_llm = directory("e2e_as_fast_llm"), back = directory("e2e_back");
  convert("mixtral", exported, "fast_llm", as_fast_llm);
  convert("fast_llm", as_fast_llm, "mixtral", back);
  auto reexported = engine::SafetensorsSet::open_huggingface(back);
  for (const std::string& name : weights->names())
    EXPECT_TRUE(same_bytes(reexported->load(name), weights->load(name))) << name;
  auto imported = open_fast_llm(as_fast_llm);
  auto reference = open_fast_llm(trained_fast_llm / "export" / "fast_llm" / "2");
  // The run's export also holds the optimizer state; the weights are the `/weights` entries.
  int compared = 0;
  for (const std::string& name : reference->names()) {
    if (!name.ends_with("/weights")) continue;
    ASSERT_TRUE(imported->contains(name)) << name;
    EXPECT_TRUE(same_bytes(imported->load(name), reference->load(name))) << name;
    ++compared;
  }
  EXPECT_EQ(compared, int(imported->names().size()));
}

}  // namespace
}  // namespace fast_llm::models::gpt
