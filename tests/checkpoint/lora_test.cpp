// LoRA end to end (models/gpt/conversion/peft.h, layers/common/linear.h), on the CPU in fp64:
// - freeze_others: every non-adapter weight is frozen (no gradient view, no optimizer state, outside the trainable
//   region) and the trainable count is the adapters';
// - training LoRA on an imported Llama leaves the base weights bit for bit and moves the adapters;
// - the merged Llama export computes the logits of the model with adapters; the PEFT adapter files have PEFT's names,
//   shapes and config, and applying them by hand to the base weights gives the merged weights;
// - a LoRA run stopped at a checkpoint and restarted gives, bit for bit, the losses of the uninterrupted run;
// - frozen weights kept only in the compute dtype (store_frozen_weights_in_optimization_precision: false) take no
//   master copy, and give the losses of the run that keeps one, bit for bit, resumed too.
#include <gtest/gtest.h>

#include <fstream>

#include "checkpoint/checkpoint_test_util.h"
#include "fast_llm/config/merge.h"
#include "fast_llm/engine/checkpoint/convert.h"
#include "fast_llm/engine/checkpoint/fast_llm_format.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/engine/multi_stage/multi_stage.h"
#include "fast_llm/models/gpt/conversion/reference_outputs.h"
#include "fast_llm/models/gpt/model.h"
#include "fast_llm/models/gpt/model_type.h"
#include "fast_llm/models/gpt/training.h"
#include "models/config_test_util.h"

namespace fast_llm::models::gpt {
namespace {

using nlohmann::json;

std::filesystem::path directory(const std::string& name) { return testing::fresh_directory("lora_test", name); }

json llama_config() {
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

std::vector<double> fp64_values(const Tensor& tensor) {
  Tensor host = engine::to_host_dtype(tensor, DType::float64);
  return std::vector<double>(host.data_as<double>(), host.data_as<double>() + host.numel());
}

TEST(Lora, FreezeOthersLeavesOnlyTheAdaptersTrainable) {
  const auto config = testing::load_config<GPTModelConfig>(
      "{base_model: {hidden_size: 16, embeddings: {vocab_size: 32}, decoder: {num_blocks: 2, block: {mixer: {heads: 2, "
      "head_groups: 1, head_size: 8}, mlp: {intermediate_size: 24, layer_1: {apply_peft: true}}}}, peft: {type: lora, "
      "rank: 4}}, distributed: {use_cuda: false}}",
      "model");
  GPTModel model(config.base_model);
  engine::MultiStage multi_stage(model, config.multi_stage, config.distributed, Device::cpu());
  int64_t adapters = 0;
  std::set<std::string> adapted;
  for (layers::Layer* layer : model.layers())
    for (layers::Parameter* parameter : layer->parameters()) {
      EXPECT_EQ(parameter->meta.frozen, !parameter->meta.peft) << parameter->meta.name;
      EXPECT_EQ(parameter->grad.defined(), parameter->meta.peft) << parameter->meta.name;
      if (!parameter->meta.peft) continue;
      adapters += parameter->meta.shape.numel();
      adapted.insert(parameter->meta.name.substr(0, parameter->meta.name.rfind(".lora_")));
    }
  EXPECT_EQ(adapted, (std::set<std::string>{"decoder.0.mixer.query", "decoder.0.mixer.key_value",
                                            "decoder.0.mlp.layer_1", "decoder.1.mixer.query",
                                            "decoder.1.mixer.key_value", "decoder.1.mlp.layer_1"}));
  // query: 4 x 16 + 16 x 4, value half: 4 x 16 + 8 x 4, layer_1 (24 rows): 4 x 16 + 24 x 4; per block.
  EXPECT_EQ(adapters, 2 * ((64 + 64) + (64 + 32) + (64 + 96)));
  EXPECT_EQ(multi_stage.num_trainable_parameters(), adapters);
  EXPECT_GT(multi_stage.num_parameters(), 5 * adapters);
  for (auto& stage : multi_stage.stages()) {
    EXPECT_EQ(stage->grad_buffer().numel(), stage->trainable_size());
    EXPECT_EQ(stage->exp_avg().numel(), stage->trainable_shard_size());
  }
  // The memory check counts what the buffers take: adapters only for gradients and Adam.
  const auto full = testing::load_config<GPTModelConfig>(
      "{base_model: {hidden_size: 16, embeddings: {vocab_size: 32}, decoder: {num_blocks: 2, block: {mixer: {heads: 2, "
      "head_groups: 1, head_size: 8}, mlp: {intermediate_size: 24}}}}, distributed: {use_cuda: false}}",
      "model");
  GPTModel full_model(full.base_model);
  auto stages_of = [](GPTModel& built, const GPTModelConfig& model_config) {
    return engine::split_into_stages(built.layers(), model_config.multi_stage.layers_per_stage);
  };
  const engine::StageSettings settings =
      engine::stage_settings(config.multi_stage, config.distributed, Device::cpu(), /*training=*/true);
  EXPECT_LT(engine::multi_stage_buffer_bytes(stages_of(model, config), config.multi_stage, settings),
            engine::multi_stage_buffer_bytes(stages_of(full_model, full), full.multi_stage, settings) / 2);
}

// `fast-llm convert gpt` from `input` ({format, path}) to `output` ({format, path, ...}).
void convert(const std::string& input, const std::string& output) {
  engine::convert(testing::load_config<engine::ConvertConfig>("{input: " + input + ", output: " + output + "}", ""),
                  gpt_model_type());
}

// Logits (fp64) of the checkpoint `pretrained` ({format, path}) on fixed tokens.
std::vector<double> logits_of(const std::filesystem::path& root, const std::string& pretrained,
                              const std::string& name, bool gradients = false) {
  const std::string output = (root / (name + ".safetensors")).string();
  ModelOutputsConfig config;
  testing::ScopedEnvironment environment(testing::single_process());
  engine::load_config_with_pretrained(
      config,
      YAML::Load("{pretrained: " + pretrained + ", tokens: '" + (root / "tokens.safetensors").string() +
                 "', output: '" + output + "', gradients: " + (gradients ? "true" : "false") +
                 ", model: {distributed: {compute_dtype: float64, optimization_dtype: float64, use_cuda: false}}}"),
      gpt_model_type());
  write_model_outputs(config);
  return fp64_values(engine::SafetensorsFile(output).read("logits"));
}

TEST(Lora, TrainingOnAnImportedLlamaExportsMergedAndAdapterCheckpoints) {
  const auto root = directory("import");
  const auto base = testing::write_hf_checkpoint(root / "base",
                                                 {llama_config(), testing::llama_tensors(llama_config(), false, false,
                                                                                         false)});
  YAML::Node tree = YAML::Load(
      "pretrained: {format: llama, path: '" + (root / "base").string() + "'}\n"
      "training: {train_iters: 4, num_workers: 1, export: {interval: 4, format: fast_llm}}\n"
      "optimizer: {learning_rate: {base: 0.05}}\n"
      "data: {datasets: {training: {type: random}}, micro_batch_size: 16}\n"
      "model: {base_model: {peft: {type: lora, rank: 2, alpha: 3.0}}, distributed: {use_cuda: false, compute_dtype: "
      "float64, optimization_dtype: float64}}\n"
      "run: {experiment_dir: '" + (root / "run").string() + "'}");
  {
    testing::ScopedEnvironment environment(testing::single_process());
    GPTTrainerConfig config;
    engine::load_config_with_pretrained(config, tree, gpt_model_type());
    train(config);
  }
  const auto trained = root / "run" / "export" / "fast_llm" / "4";
  engine::FastLLMCheckpoint checkpoint = engine::open_fast_llm_checkpoint(trained);
  auto weights = [&](const std::string& parameter) { return checkpoint.state->load(parameter + "/weights"); };
  // Frozen: the imported weights, bit for bit (fp32 values held in fp64).
  EXPECT_EQ(fp64_values(weights("decoder.0.mixer.query.weight")),
            fp64_values(base.at("model.layers.0.self_attn.q_proj.weight")));
  EXPECT_EQ(fp64_values(weights("decoder.1.mlp.layer_2.weight")),
            fp64_values(base.at("model.layers.1.mlp.down_proj.weight").transpose(0, 1).to(Device::cpu())));
  EXPECT_EQ(fp64_values(weights("head.output_weights")), fp64_values(base.at("lm_head.weight")));
  // The adapters moved: B started at zero.
  double largest = 0.0;
  for (double value : fp64_values(weights("decoder.0.mixer.key_value.lora_1.weight")))
    largest = std::max(largest, std::abs(value));
  EXPECT_GT(largest, 1e-4);

  const std::string fast_llm = "{format: fast_llm, path: '" + trained.string() + "'}";
  convert(fast_llm, "{format: llama, path: '" + (root / "merged").string() + "'}");
  convert(fast_llm, "{format: llama, peft: adapter, path: '" + (root / "adapter").string() + "'}");

  // The merged model computes the adapted model's logits.
  Tensor tokens = Tensor::empty(Shape{2, 6}, DType::int64);
  const int64_t ids[] = {1, 5, 9, 2, 15, 0, 3, 3, 7, 11, 4, 8};
  std::copy(std::begin(ids), std::end(ids), tokens.data_as<int64_t>());
  engine::write_safetensors(root / "tokens.safetensors", {{.name = "tokens", .dtype = DType::int64,
                                                           .shape = Shape{2, 6}, .values = [&] { return tokens; }}});
  const std::vector<double> adapted = logits_of(root, fast_llm, "adapted");
  const std::vector<double> merged =
      logits_of(root, "{format: llama, path: '" + (root / "merged").string() + "'}", "merged");
  const std::vector<double> plain =
      logits_of(root, "{format: llama, path: '" + (root / "base").string() + "'}", "base");
  ASSERT_EQ(adapted.size(), merged.size());
  double moved = 0.0;
  for (size_t i = 0; i < adapted.size(); ++i) {
    EXPECT_NEAR(merged[i], adapted[i], 1e-10 * std::max(1.0, std::abs(adapted[i]))) << i;
    moved = std::max(moved, std::abs(adapted[i] - plain[i]));
  }
  EXPECT_GT(moved, 1e-6);
  // Frozen weights have no gradient to write: asking for gradients is refused naming the field.
  const std::string refused = testing::error_of([&] { logits_of(root, fast_llm, "gradients", /*gradients=*/true); });
  EXPECT_NE(refused.find("gradients"), std::string::npos) << refused;
  EXPECT_NE(refused.find("freeze_others"), std::string::npos) << refused;
  const json merged_config = testing::read_json(root / "merged" / "config.json");
  EXPECT_EQ(merged_config["model_type"], "llama");

  // PEFT's files: config, names and shapes; base + alpha / r * B A by hand is the merged weight.
  const json adapter_config = testing::read_json(root / "adapter" / "adapter_config.json");
  EXPECT_EQ(adapter_config["peft_type"], "LORA");
  EXPECT_EQ(adapter_config["task_type"], "CAUSAL_LM");
  EXPECT_EQ(adapter_config["r"], 2);
  EXPECT_EQ(adapter_config["lora_alpha"], 3.0);
  EXPECT_EQ(adapter_config["lora_dropout"], 0.0);
  EXPECT_EQ(adapter_config["bias"], "none");
  EXPECT_EQ(adapter_config["fan_in_fan_out"], false);
  EXPECT_EQ(adapter_config["target_modules"], (json{"q_proj", "v_proj"}));
  EXPECT_TRUE(adapter_config["base_model_name_or_path"].is_null());  // a conversion does not know the base model
  engine::SafetensorsFile adapter_file(root / "adapter" / "adapter_model.safetensors");
  auto merged_file = engine::SafetensorsSet::open_huggingface(root / "merged");
  std::set<std::string> names;
  for (const auto& info : adapter_file.tensors()) names.insert(info.name);
  EXPECT_EQ(names.size(), 8u);
  for (int layer = 0; layer < 2; ++layer)
    for (const auto& [module, rows] : std::vector<std::pair<std::string, int64_t>>{{"q_proj", 8}, {"v_proj", 4}}) {
      const std::string weight = "model.layers." + std::to_string(layer) + ".self_attn." + module;
      const std::string prefix = "base_model.model." + weight;
      const Tensor a = adapter_file.read(prefix + ".lora_A.weight"), b = adapter_file.read(prefix + ".lora_B.weight");
      ASSERT_EQ(a.shape(), (Shape{2, 8})) << prefix;
      ASSERT_EQ(b.shape(), (Shape{rows, 2})) << prefix;
      const std::vector<double> a_values = fp64_values(a), b_values = fp64_values(b);
      std::vector<double> expected = fp64_values(base.at(weight + ".weight"));
      for (int64_t o = 0; o < rows; ++o)
        for (int64_t i = 0; i < 8; ++i)
          for (int64_t r = 0; r < 2; ++r)
            expected[size_t(o * 8 + i)] += 3.0 / 2.0 * b_values[size_t(o * 2 + r)] * a_values[size_t(r * 8 + i)];
      const std::vector<double> actual = fp64_values(merged_file->load(weight + ".weight"));
      ASSERT_EQ(actual.size(), expected.size());
      for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-12) << weight << " " << i;
    }
  // Not adapted: unchanged.
  EXPECT_EQ(fp64_values(merged_file->load("model.layers.0.self_attn.k_proj.weight")),
            fp64_values(base.at("model.layers.0.self_attn.k_proj.weight")));

  // A model without adapters has nothing to write as PEFT files.
  const std::string message = testing::error_of([&] {
    convert("{format: llama, path: '" + (root / "base").string() + "'}",
            "{format: llama, peft: adapter, path: '" + (root / "nothing").string() + "'}");
  });
  EXPECT_NE(message.find("peft"), std::string::npos) << message;
}

constexpr const char* kLoraRun = R"(
model:
  base_model:
    hidden_size: 16
    embeddings: {vocab_size: 32}
    decoder:
      num_blocks: 2
      block:
        mixer: {heads: 2, head_groups: 1, head_size: 8, add_linear_biases: false, rotary: {type: default}}
        mlp: {intermediate_size: 24, gated: true, add_linear_biases: false, layer_2: {apply_peft: true}}
        normalization: {type: rms_norm}
    head: {normalization: {type: rms_norm}}
    peft: {type: lora, rank: 4, alpha: 8, dropout: 0.1}
  distributed: {compute_dtype: fp32, use_cuda: false, seed: 4321}
data: {datasets: {training: {type: random}}, micro_batch_size: 24}
optimizer: {learning_rate: {base: 0.01}}
training: {train_iters: 6, logs: {interval: 1}, checkpoint: {interval: 3}}
)";

void lora_run(const std::filesystem::path& experiment, const std::vector<std::string>& overrides = {}) {
  YAML::Node tree = YAML::Load(kLoraRun);
  config::apply_override(tree, "run.experiment_dir=" + experiment.string());
  config::apply_override(tree, "training.num_workers=1");
  for (const auto& assignment : overrides) config::apply_override(tree, assignment);
  testing::ScopedEnvironment environment(testing::single_process());
  GPTTrainerConfig config;
  engine::load_config_with_pretrained(config, tree, gpt_model_type());
  train(config);
}

// (loss, grad norm) of each training record of runs/<run>/metrics.jsonl.
std::vector<std::pair<double, double>> losses(const std::filesystem::path& experiment, int run) {
  std::vector<std::pair<double, double>> result;
  std::ifstream file(experiment / "runs" / std::to_string(run) / "metrics.jsonl");
  for (std::string line; std::getline(file, line);) {
    const json record = json::parse(line);
    if (record["phase"] == "training") result.emplace_back(record["lm_head_loss"], record["grad_norm"]);
  }
  return result;
}

// Six steps uninterrupted, and stopped at the checkpoint of step 3 then restarted: the same losses, bit for bit.
// Returns the uninterrupted run's.
std::vector<std::pair<double, double>> expect_exact_resume(const std::string& name,
                                                           const std::vector<std::string>& overrides) {
  const auto uninterrupted = directory(name + "_uninterrupted");
  lora_run(uninterrupted, overrides);
  const auto full = losses(uninterrupted, 0);
  EXPECT_EQ(full.size(), 6u);
  if (full.size() != 6u) return full;
  EXPECT_NE(full[3].first, full[5].first);
  const auto stopped = directory(name + "_stopped");
  std::vector<std::string> stopping = overrides;
  stopping.push_back("training.shutdown.interval=3");
  lora_run(stopped, stopping);
  EXPECT_EQ(losses(stopped, 0).size(), 3u);
  lora_run(stopped, stopping);
  const auto resumed = losses(stopped, 1);
  EXPECT_EQ(resumed.size(), 3u);
  for (size_t step = 0; step < std::min<size_t>(3, resumed.size()); ++step) {
    EXPECT_EQ(resumed[step].first, full[3 + step].first) << name << " step " << 4 + step;
    EXPECT_EQ(resumed[step].second, full[3 + step].second) << name << " step " << 4 + step;
  }
  return full;
}

TEST(Lora, ARestartFromALoraCheckpointContinuesExactly) { expect_exact_resume("fp32", {}); }

TEST(Lora, FrozenWeightsKeptInTheComputeDtypeOnly) {
  // The buffers: with one rank the frozen weights' only copy is the bf16 compute buffer, 4 bytes less per weight.
  auto bytes = [](bool store_frozen) {
    const auto config = testing::load_config<GPTModelConfig>(
        "{base_model: {hidden_size: 16, embeddings: {vocab_size: 32}, decoder: {num_blocks: 2, block: {mixer: {heads: "
        "2, head_groups: 1, head_size: 8}, mlp: {intermediate_size: 24}}}, peft: {type: lora}}, multi_stage: "
        "{store_frozen_weights_in_optimization_precision: " + std::string(store_frozen ? "true" : "false") +
            "}, distributed: {use_cuda: false, compute_dtype: bf16}}",
        "model");
    GPTModel model(config.base_model);
    const auto stages = engine::split_into_stages(model.layers(), config.multi_stage.layers_per_stage);
    int64_t frozen = 0;
    for (const auto& stage : stages) frozen += engine::stage_regions(stage, 1).frozen;
    const engine::StageSettings settings =
        engine::stage_settings(config.multi_stage, config.distributed, Device::cpu(), /*training=*/true);
    return std::pair{engine::multi_stage_buffer_bytes(stages, config.multi_stage, settings), frozen};
  };
  const auto [kept, frozen] = bytes(true);
  const int64_t compute_only = bytes(false).first;
  EXPECT_GT(frozen, 0);
  EXPECT_EQ(compute_only, kept - 4 * frozen);

  // Training in bf16: the same losses whichever copy the frozen weights keep (the compute weights are the same bf16
  // values), and a restart resumes exactly from checkpoints that hold the frozen weights widened from bf16.
  const auto with_master = expect_exact_resume("bf16_master", {"model.distributed.compute_dtype=bf16"});
  const auto without_master = expect_exact_resume(
      "bf16_compute_only",
      {"model.distributed.compute_dtype=bf16",
       "model.multi_stage.store_frozen_weights_in_optimization_precision=false"});
  EXPECT_EQ(with_master, without_master);
}

}  // namespace
}  // namespace fast_llm::models::gpt
