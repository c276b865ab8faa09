// Hugging Face conversion (llama, mistral, qwen2) on checkpoints the test writes itself: config.json -> our config,
// the layout transforms (key_value, layer_1, transposed layer_2), HF -> ours -> HF byte-identical tensors and an
// equivalent config.json, sharded export with the index, `convert` through every format and never over what it reads
// (a failed conversion leaves the output as it was), and the errors (missing, misshapen or integer tensors, unknown
// keys and model types, unsupported rotary or activation, models a format cannot hold).
#include <gtest/gtest.h>

#include <set>

#include "checkpoint/checkpoint_test_util.h"
#include "core/full_disk.h"
#include "fast_llm/config/config.h"
#include "fast_llm/layers/block/config.h"
#include "fast_llm/engine/checkpoint/convert.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/models/gpt/conversion/huggingface.h"
#include "fast_llm/models/gpt/conversion/reference_outputs.h"
#include "fast_llm/models/gpt/model_type.h"
#include "models/config_test_util.h"

namespace fast_llm::models::gpt {
namespace {

using engine::CheckpointFormat;
using engine::ConvertConfig;
using nlohmann::json;
using testing::error_of;
using testing::same_bytes;

std::filesystem::path directory(const std::string& name) { return testing::fresh_directory("hf_test", name); }

// `fast-llm convert gpt`.
void convert(const ConvertConfig& config) { engine::convert(config, gpt_model_type()); }

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
          {"rope_scaling", nullptr},
          {"tie_word_embeddings", false},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"attention_dropout", 0.0},
          {"vocab_size", 16},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"torch_dtype", "float32"},
          {"transformers_version", "4.57.0"},
          {"initializer_range", 0.02},
          {"use_cache", true},
          {"pretraining_tp", 1}};
}

struct Case {
  std::string name;
  CheckpointFormat format;
  testing::HfCheckpointSpec spec;
};

std::vector<Case> cases() {
  std::vector<Case> result;
  {
    json config = llama_config();
    config["attention_bias"] = true;
    config["mlp_bias"] = true;
    config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}};
    result.push_back({"llama_biases_llama3", CheckpointFormat::llama,
                      {config, testing::llama_tensors(config, true, true, true), DType::float32}});
  }
  {
    // transformers 5 style: rope_parameters, dtype; tied embeddings; bf16 weights.
    json config = llama_config();
    config.erase("rope_theta");
    config.erase("rope_scaling");
    config.erase("torch_dtype");
    config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
    config["dtype"] = "bfloat16";
    config["tie_word_embeddings"] = true;
    result.push_back({"llama_tied_v5", CheckpointFormat::llama,
                      {config, testing::llama_tensors(config, false, false, false), DType::bfloat16}});
  }
  {
    json config = llama_config();
    config["architectures"] = {"MistralForCausalLM"};
    config["model_type"] = "mistral";
    config.erase("attention_bias");
    config.erase("mlp_bias");
    config.erase("pretraining_tp");
    config["head_dim"] = 8;  // not hidden_size / heads
    config["sliding_window"] = 16;
    result.push_back({"mistral_window", CheckpointFormat::mistral,
                      {config, testing::llama_tensors(config, false, false, false), DType::float32}});
  }
  {
    json config = llama_config();
    config["architectures"] = {"Qwen2ForCausalLM"};
    config["model_type"] = "qwen2";
    for (const char* key : {"attention_bias", "mlp_bias", "pretraining_tp", "head_dim"}) config.erase(key);
    config["use_sliding_window"] = false;
    config["sliding_window"] = 4096;
    config["max_window_layers"] = 28;
    config["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}};
    result.push_back({"qwen2_yarn", CheckpointFormat::qwen2,
                      {config, testing::llama_tensors(config, true, false, false), DType::float32}});
  }
  return result;
}

GPTBaseModelConfig base_model(const YAML::Node& node) {
  GPTBaseModelConfig config;
  config.load(node, "model.base_model");
  config.validate("model.base_model");
  return config;
}

Tensor load_weights(const engine::TensorSource& source, const std::string& parameter) {
  return source.load(engine::state_key(parameter, engine::kWeightsShard));
}

TEST(Huggingface, ImportsTheConfig) {
  const Case llama = cases()[0];
  const auto path = directory("import_config");
  testing::write_hf_checkpoint(path, llama.spec);
  HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(path, CheckpointFormat::auto_, false);
  EXPECT_EQ(checkpoint.format->format, CheckpointFormat::llama);
  GPTBaseModelConfig config = base_model(checkpoint.base_model);
  EXPECT_EQ(config.hidden_size, 8);
  EXPECT_EQ(config.embeddings.vocab_size, 16);
  EXPECT_EQ(config.embeddings.num_position_embeddings, 64);
  EXPECT_FALSE(config.tied_embedding_weight);
  const auto& decoder = dynamic_cast<const layers::FixedBlockSequenceConfig&>(config.decoder.get());
  EXPECT_EQ(decoder.num_blocks, 2);
  const auto& block = dynamic_cast<const layers::DecoderBlockConfig&>(decoder.block.get());
  const auto& mixer = *block.mixer.as<layers::AttentionConfig>();
  EXPECT_EQ(mixer.heads, 2);
  EXPECT_EQ(mixer.head_groups, 1);
  EXPECT_EQ(mixer.head_size, 4);
  EXPECT_TRUE(*mixer.query_layer.bias.enabled);
  EXPECT_TRUE(*mixer.dense_layer.bias.enabled);
  const auto* rotary = mixer.rotary.as<layers::Llama3RotaryConfig>();
  ASSERT_NE(rotary, nullptr);
  EXPECT_EQ(rotary->theta, 10000.0);
  EXPECT_EQ(rotary->scale_factor, 8.0);
  EXPECT_EQ(rotary->original_context_length, 32);
  const auto& mlp = *block.mlp.as<layers::MlpConfig>();
  EXPECT_TRUE(mlp.gated);
  EXPECT_EQ(mlp.intermediate_size, 12);
  EXPECT_EQ(*mlp.activation, layers::ActivationType::silu);
  EXPECT_TRUE(*mlp.layer_1.bias.enabled);
  const auto* norm = block.normalization.as<layers::RmsNormalizationConfig>();
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->epsilon, 1e-5);

  // Qwen2: biases on q, k, v only; yarn with its defaults filled in.
  const Case qwen2 = cases()[3];
  const auto qwen2_path = directory("import_qwen2");
  testing::write_hf_checkpoint(qwen2_path, qwen2.spec);
  GPTBaseModelConfig qwen2_config =
      base_model(read_huggingface_checkpoint(qwen2_path, CheckpointFormat::qwen2, false).base_model);
  const auto& qwen2_mixer = *dynamic_cast<const layers::DecoderBlockConfig&>(
                                 dynamic_cast<const layers::FixedBlockSequenceConfig&>(qwen2_config.decoder.get())
                                     .block.get())
                                 .mixer.as<layers::AttentionConfig>();
  EXPECT_TRUE(*qwen2_mixer.query_layer.bias.enabled);
  EXPECT_TRUE(*qwen2_mixer.key_layer.bias.enabled);
  EXPECT_FALSE(*qwen2_mixer.dense_layer.bias.enabled);
  EXPECT_EQ(qwen2_mixer.head_size, 4);
  const auto* yarn = qwen2_mixer.rotary.as<layers::YarnRotaryConfig>();
  ASSERT_NE(yarn, nullptr);
  EXPECT_EQ(yarn->scale_factor, 4.0);
  EXPECT_EQ(yarn->original_context_length, 16);
  EXPECT_EQ(yarn->beta_fast, 32.0);
  EXPECT_EQ(yarn->beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(*yarn->attention_factor, 0.1 * std::log(4.0) + 1.0);
}

TEST(Huggingface, MapsTheWeightLayouts) {
  const Case llama = cases()[0];
  const auto path = directory("layouts");
  auto tensors = testing::write_hf_checkpoint(path, llama.spec);
  HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(path, CheckpointFormat::llama, true);
  GPTBaseModelConfig config = base_model(checkpoint.base_model);
  auto state = import_hf_weights(*checkpoint.format, checkpoint.tensors, config);

  // key_value = [k; v] along rows.
  Tensor key_value = load_weights(*state, "decoder.1.mixer.key_value.weight");
  const Tensor& k = tensors.at("model.layers.1.self_attn.k_proj.weight");
  const Tensor& v = tensors.at("model.layers.1.self_attn.v_proj.weight");
  ASSERT_EQ(key_value.shape(), (Shape{8, 8}));
  EXPECT_EQ(std::memcmp(key_value.data(), k.data(), k.nbytes()), 0);
  EXPECT_EQ(std::memcmp(key_value.data_as<float>() + 32, v.data(), v.nbytes()), 0);
  Tensor key_value_bias = load_weights(*state, "decoder.0.mixer.key_value.bias");
  EXPECT_EQ(key_value_bias.data_as<float>()[5],
            tensors.at("model.layers.0.self_attn.v_proj.bias").data_as<float>()[1]);
  // layer_1 = [gate; up].
  Tensor layer_1 = load_weights(*state, "decoder.0.mlp.layer_1.weight");
  ASSERT_EQ(layer_1.shape(), (Shape{24, 8}));
  EXPECT_EQ(layer_1.data_as<float>()[0], tensors.at("model.layers.0.mlp.gate_proj.weight").data_as<float>()[0]);
  EXPECT_EQ(layer_1.data_as<float>()[12 * 8 + 3], tensors.at("model.layers.0.mlp.up_proj.weight").data_as<float>()[3]);
  // layer_2 = down_proj transposed: [intermediate, hidden].
  Tensor layer_2 = load_weights(*state, "decoder.0.mlp.layer_2.weight");
  const Tensor& down = tensors.at("model.layers.0.mlp.down_proj.weight");  // [8, 12]
  ASSERT_EQ(layer_2.shape(), (Shape{12, 8}));
  for (int64_t i = 0; i < 12; ++i)
    for (int64_t h = 0; h < 8; ++h) ASSERT_EQ(layer_2.data_as<float>()[i * 8 + h], down.data_as<float>()[h * 12 + i]);
  EXPECT_TRUE(same_bytes(load_weights(*state, "head.output_weights"), tensors.at("lm_head.weight")));
  EXPECT_TRUE(same_bytes(load_weights(*state, "decoder.1.norm_2.weight"),
                         tensors.at("model.layers.1.post_attention_layernorm.weight")));
}

TEST(Huggingface, RoundTripIsByteIdenticalWithAnEquivalentConfig) {
  for (const Case& test : cases()) {
    SCOPED_TRACE(test.name);
    const auto source = directory(test.name + "_source");
    const auto target = directory(test.name + "_target");
    auto tensors = testing::write_hf_checkpoint(source, test.spec);
    HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(source, test.format, true);
    GPTBaseModelConfig config = base_model(checkpoint.base_model);
    auto state = import_hf_weights(*checkpoint.format, checkpoint.tensors, config);
    // Small files: the export is sharded, with an index.
    write_huggingface_checkpoint(target, test.format, config, state, std::nullopt, 200);
    EXPECT_TRUE(std::filesystem::exists(target / "model.safetensors.index.json"));

    auto exported = engine::SafetensorsSet::open_huggingface(target);
    std::set<std::string> names(exported->names().begin(), exported->names().end());
    std::set<std::string> expected;
    for (const auto& [name, tensor] : tensors) expected.insert(name);
    EXPECT_EQ(names, expected);
    for (const auto& [name, tensor] : tensors) {
      if (exported->contains(name)) {
        EXPECT_TRUE(same_bytes(exported->load(name), tensor)) << name;
      }
    }

    // config.json: every key is kept with its value, except keys that do not change the model; rotary keys may be
    // spelled for both transformers versions, so they are compared through what they mean.
    const json written = testing::read_json(target / "config.json");
    const HfFormat& format = hf_format(test.format);
    std::set<std::string> ignorable;
    for (const HfConfigEntry& entry : format.config)
      if (entry.kind == HfConfigEntry::Kind::ignored) ignorable.insert(entry.hf_keys.begin(), entry.hf_keys.end());
    const std::set<std::string> rotary{"rope_theta", "rope_scaling", "rope_parameters"};
    for (auto item = test.spec.config.begin(); item != test.spec.config.end(); ++item) {
      if (rotary.contains(item.key())) continue;
      if (!written.contains(item.key())) {
        EXPECT_TRUE(ignorable.contains(item.key())) << item.key() << " was dropped";
        continue;
      }
      const json& value = written[item.key()];
      if (value.is_number() && item.value().is_number())
        EXPECT_EQ(value.get<double>(), item.value().get<double>()) << item.key();
      else
        EXPECT_EQ(value, item.value()) << item.key();
    }
    const std::set<std::string> may_add{"rope_theta", "rope_scaling", "rope_parameters", "torch_dtype", "dtype",
                                        "head_dim",   "use_sliding_window"};
    for (auto item = written.begin(); item != written.end(); ++item)
      EXPECT_TRUE(test.spec.config.contains(item.key()) || may_add.contains(item.key())) << item.key() << " added";
    GPTBaseModelConfig reread = base_model(import_hf_config(format, written, "written"));
    EXPECT_EQ(config::compare_architecture(config, reread), std::vector<std::string>{});
    EXPECT_EQ(config.to_yaml_string(), reread.to_yaml_string());
  }
}

TEST(Huggingface, ConvertsThroughEveryFormat) {
  // llama -> fast_llm -> distributed -> fast_llm -> qwen2-free llama: the weights are the original bytes.
  const Case llama = cases()[0];
  const auto source = directory("convert_source");
  auto tensors = testing::write_hf_checkpoint(source, llama.spec);
  auto run = [](const std::string& input_format, const std::filesystem::path& input, const std::string& output_format,
                const std::filesystem::path& output) {
    ConvertConfig config = testing::load_config<ConvertConfig>(
        "{input: {format: " + input_format + ", path: '" + input.string() + "'}, output: {format: " + output_format +
            ", path: '" + output.string() + "'}, exist_ok: true}",
        "");
    convert(config);
    EXPECT_TRUE(std::filesystem::exists(output / "ok"));
  };
  const auto fast_llm = directory("convert_fast_llm");
  const auto distributed = directory("convert_distributed");
  const auto fast_llm_again = directory("convert_fast_llm_again");
  const auto back = directory("convert_back");
  run("auto", source, "fast_llm", fast_llm);
  run("fast_llm", fast_llm, "distributed", distributed);
  run("distributed", distributed, "fast_llm", fast_llm_again);
  run("fast_llm", fast_llm_again, "llama", back);
  auto exported = engine::SafetensorsSet::open_huggingface(back);
  ASSERT_EQ(exported->names().size(), tensors.size());
  for (const auto& [name, tensor] : tensors) EXPECT_TRUE(same_bytes(exported->load(name), tensor)) << name;
  const json written = testing::read_json(back / "config.json");
  EXPECT_EQ(written["model_type"], "llama");
  EXPECT_EQ(written["rope_scaling"]["rope_type"], "llama3");

  // A non-empty output is refused without exist_ok.
  std::string message = error_of([&] {
    convert(testing::load_config<ConvertConfig>("{input: {format: llama, path: '" + source.string() +
                                                    "'}, output: {format: fast_llm, path: '" + back.string() + "'}}",
                                                ""));
  });
  EXPECT_NE(message.find("exist_ok"), std::string::npos) << message;
  // Another family member and another dtype on request: the bf16 weights of the tied model, as fp32 Mistral.
  const auto tied_source = directory("convert_tied_source");
  auto tied_tensors = testing::write_hf_checkpoint(tied_source, cases()[1].spec);
  const auto as_mistral = directory("convert_mistral");
  convert(testing::load_config<ConvertConfig>("{input: {format: llama, path: '" + tied_source.string() +
                                                  "'}, output: {format: mistral, path: '" + as_mistral.string() +
                                                  "', data_type: fp32}, exist_ok: true}",
                                              ""));
  auto mistral = engine::SafetensorsSet::open_huggingface(as_mistral);
  for (const auto& [name, tensor] : tied_tensors) {
    Tensor widened = engine::to_host_dtype(tensor, DType::float32);
    EXPECT_TRUE(same_bytes(mistral->load(name), widened)) << name;
  }
  const json mistral_config = testing::read_json(as_mistral / "config.json");
  EXPECT_EQ(mistral_config["model_type"], "mistral");
  EXPECT_EQ(mistral_config["sliding_window"], nullptr);
  EXPECT_EQ(mistral_config["torch_dtype"], "float32");
  // A model with biases is not a Mistral model.
  message = error_of([&] {
    convert(testing::load_config<ConvertConfig>("{input: {format: llama, path: '" + source.string() +
                                                    "'}, output: {format: mistral, path: '" + as_mistral.string() +
                                                    "'}, exist_ok: true}",
                                                ""));
  });
  EXPECT_NE(message.find("add_linear_biases"), std::string::npos) << message;
}

// The files of `folder` (not its subfolders) with their bytes.
std::map<std::string, std::string> snapshot(const std::filesystem::path& folder) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream stream(entry.path(), std::ios::binary);
    files[entry.path().filename().string()] = std::string(std::istreambuf_iterator<char>(stream), {});
  }
  return files;
}

std::set<std::string> names_in(const std::filesystem::path& folder) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) names.insert(entry.path().filename().string());
  return names;
}

ConvertConfig conversion(const std::string& input_format, const std::filesystem::path& input,
                         const std::string& output_format, const std::filesystem::path& output, bool exist_ok) {
  return testing::load_config<ConvertConfig>("{input: {format: " + input_format + ", path: '" + input.string() +
                                                 "'}, output: {format: " + output_format + ", path: '" +
                                                 output.string() + "'}, exist_ok: " + (exist_ok ? "true" : "false") +
                                                 "}",
                                             "");
}

TEST(Convert, NeverWritesWhereItReads) {
  const auto base = directory("in_place");
  const auto source = base / "model";
  const auto tensors = testing::write_hf_checkpoint(source, cases()[0].spec);
  std::filesystem::create_directory_symlink(source, base / "link");
  const auto before = snapshot(source);
  // In place (this one died with SIGBUS and cut model.safetensors to its header), in place through a link, inside the
  // input, and around it.
  for (const auto& [format, output] : std::vector<std::pair<std::string, std::filesystem::path>>{
           {"llama", source}, {"fast_llm", source}, {"llama", base / "link"}, {"fast_llm", source / "converted"},
           {"llama", base}}) {
    // Named copies: clang cannot capture a structured binding in a lambda under OpenMP (the fuzz build).
    const auto& output_format = format;
    const auto& output_path = output;
    const std::string message =
        error_of([&] { convert(conversion("llama", source, output_format, output_path, true)); });
    EXPECT_NE(message.find("a conversion never writes where it reads"), std::string::npos) << output << ": " << message;
  }
  EXPECT_EQ(snapshot(source), before);
  EXPECT_EQ(names_in(base), (std::set<std::string>{"link", "model"}));
  auto reread = engine::SafetensorsSet::open_huggingface(source);
  for (const auto& [name, tensor] : tensors) EXPECT_TRUE(same_bytes(reread->load(name), tensor)) << name;
}

TEST(Convert, ExistOkReplacesTheCheckpointInTheFolderAndKeepsOtherFiles) {
  const auto source = directory("replace_source");
  const auto tensors = testing::write_hf_checkpoint(source, cases()[0].spec);
  // The output folder holds an older sharded export (other values: bf16) and the model's tokenizer.
  const auto output = directory("replace_output");
  testing::HfCheckpointSpec older = cases()[0].spec;
  older.dtype = DType::bfloat16;
  testing::write_hf_checkpoint(output, older, 100);
  ASSERT_TRUE(std::filesystem::exists(output / "model.safetensors.index.json"));
  std::ofstream(output / "tokenizer.json") << "{\"model\": {}}";

  std::string message = error_of([&] { convert(conversion("llama", source, "llama", output, false)); });
  EXPECT_NE(message.find("exists and is not empty (set exist_ok=true"), std::string::npos) << message;
  convert(conversion("llama", source, "llama", output, true));
  EXPECT_EQ(names_in(output), (std::set<std::string>{"config.json", "model.safetensors", "ok", "tokenizer.json"}));
  auto exported = engine::SafetensorsSet::open_huggingface(output);
  ASSERT_EQ(exported->names().size(), tensors.size());
  for (const auto& [name, tensor] : tensors) EXPECT_TRUE(same_bytes(exported->load(name), tensor)) << name;
  for (const std::string& name : names_in(output.parent_path()))
    EXPECT_EQ(name.find(output.filename().string() + ".tmp"), std::string::npos) << name;
}

TEST(Convert, AFailedConversionLeavesTheOutputAsItWas) {
  const auto source = directory("failed_source");
  testing::write_hf_checkpoint(source, cases()[0].spec);
  const auto output = directory("failed_output");
  convert(conversion("llama", source, "fast_llm", output, true));
  const auto before = snapshot(output);
  ASSERT_TRUE(before.contains("ok"));
  std::string message;
  {
    testing::FileSizeLimit limit(256);  // a full disk for any file above 256 bytes
    message = error_of([&] { convert(conversion("llama", source, "fast_llm", output, true)); });
  }
  EXPECT_NE(message.find("model_0.safetensors: write failed"), std::string::npos) << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_EQ(snapshot(output), before);
  for (const std::string& name : names_in(output.parent_path()))
    EXPECT_EQ(name.find(output.filename().string() + ".tmp"), std::string::npos) << name;
}

TEST(Huggingface, IntegerTensorsAreRefusedNamingTheTensorAndTheFile) {
  const auto path = directory("integer_weights");
  const testing::HfCheckpointSpec spec = cases()[0].spec;
  testing::write_hf_checkpoint(path, spec);
  // The same checkpoint with one weight stored as I32.
  engine::TensorList tensors("test checkpoint");
  for (const auto& [name, shape] : spec.tensors) {
    const bool integer = name == "model.layers.1.mlp.up_proj.weight";
    const DType dtype = integer ? DType::int32 : spec.dtype;
    Tensor values = integer ? Tensor::from_values(std::vector<float>(size_t(shape.numel()), 1.0f), shape, dtype)
                            : testing::pseudo_random(shape, dtype, 5);
    tensors.add(name, {dtype, shape}, [values] { return values; });
  }
  engine::write_safetensors_set(path, tensors, tensors.names(), int64_t(1) << 30,
                                engine::SafetensorsSetLayout::huggingface);
  const std::string file = (path / "model.safetensors").string();
  std::string message = error_of([&] { read_huggingface_checkpoint(path, CheckpointFormat::llama, true); });
  EXPECT_NE(message.find(file + ": tensor 'model.layers.1.mlp.up_proj.weight' is I32"), std::string::npos) << message;
  // `convert` used to copy it and fail later naming neither.
  const auto output = directory("integer_weights_output");
  message = error_of([&] { convert(conversion("llama", path, "fast_llm", output, true)); });
  EXPECT_NE(message.find(file + ": tensor 'model.layers.1.mlp.up_proj.weight' is I32"), std::string::npos) << message;
  EXPECT_TRUE(names_in(output).empty());
}

TEST(Huggingface, MissingOrMisshapenTensorsAreErrors) {
  const Case llama = cases()[0];
  {
    const auto path = directory("missing");
    testing::HfCheckpointSpec spec = llama.spec;
    spec.tensors.erase("model.layers.1.self_attn.q_proj.weight");
    testing::write_hf_checkpoint(path, spec);
    HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(path, CheckpointFormat::llama, true);
    const std::string message =
        error_of([&] { import_hf_weights(*checkpoint.format, checkpoint.tensors, base_model(checkpoint.base_model)); });
    EXPECT_NE(message.find("'model.layers.1.self_attn.q_proj.weight'"), std::string::npos) << message;
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find("missing"), std::string::npos) << message;
  }
  {
    const auto path = directory("misshapen");
    testing::HfCheckpointSpec spec = llama.spec;
    spec.tensors["model.layers.0.mlp.down_proj.weight"] = Shape{12, 8};
    testing::write_hf_checkpoint(path, spec);
    HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(path, CheckpointFormat::llama, true);
    const std::string message =
        error_of([&] { import_hf_weights(*checkpoint.format, checkpoint.tensors, base_model(checkpoint.base_model)); });
    EXPECT_NE(message.find("'model.layers.0.mlp.down_proj.weight' (12, 8)"), std::string::npos) << message;
    EXPECT_NE(message.find("needs (12, 8)"), std::string::npos) << message;  // transposed: it needs [8, 12]
  }
  {
    const auto path = directory("extra");
    testing::HfCheckpointSpec spec = llama.spec;
    spec.tensors["model.layers.0.mlp.extra.weight"] = Shape{3};
    spec.tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = Shape{2};  // ignorable
    testing::write_hf_checkpoint(path, spec);
    HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(path, CheckpointFormat::llama, true);
    const std::string message =
        error_of([&] { import_hf_weights(*checkpoint.format, checkpoint.tensors, base_model(checkpoint.base_model)); });
    EXPECT_NE(message.find("'model.layers.0.mlp.extra.weight' is not part of"), std::string::npos) << message;
  }
}

TEST(Huggingface, ConfigsItCannotReadExactlyAreErrors) {
  const auto path = directory("bad_configs");
  auto expect_error = [&](json config, CheckpointFormat format, const std::string& expected) {
    std::ofstream(path / "config.json", std::ios::trunc) << config.dump();
    const std::string message = error_of([&] { read_huggingface_checkpoint(path, format, false); });
    EXPECT_NE(message.find(expected), std::string::npos) << "expected '" << expected << "', got: " << message;
  };
  json config = llama_config();
  config["model_type"] = "gpt2";
  expect_error(config, CheckpointFormat::auto_, "model_type 'gpt2' is not supported");
  expect_error(llama_config(), CheckpointFormat::mistral, "model_type is 'llama', not 'mistral'");
  config = llama_config();
  config["foo"] = 3;
  expect_error(config, CheckpointFormat::llama, "`foo` (3) is not supported by the llama converter");
  config = llama_config();
  config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  expect_error(config, CheckpointFormat::llama, "rotary type 'linear' (`rope_scaling.rope_type`) is not supported");
  config = llama_config();
  config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 2.0}, {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8}, {"mystery", 1}};
  expect_error(config, CheckpointFormat::llama, "`rope_scaling.mystery` is not supported");
  config = llama_config();
  config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}, {"truncate", false}};
  expect_error(config, CheckpointFormat::llama, "truncate: false");
  config = llama_config();
  config["partial_rotary_factor"] = 0.5;
  expect_error(config, CheckpointFormat::llama, "partial_rotary_factor");
  config = llama_config();
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 20000.0}};
  expect_error(config, CheckpointFormat::llama, "describe different rotary embeddings");
  config = llama_config();
  config["hidden_act"] = "gelu";
  expect_error(config, CheckpointFormat::llama, "`hidden_act` 'gelu' is not supported");
  config = llama_config();
  config["architectures"] = {"LlamaForSequenceClassification"};
  expect_error(config, CheckpointFormat::llama, "architectures");
  config = llama_config();
  config.erase("hidden_size");
  expect_error(config, CheckpointFormat::llama, "`hidden_size` is missing");
  json qwen2 = cases()[3].spec.config;
  qwen2["use_sliding_window"] = true;
  expect_error(qwen2, CheckpointFormat::qwen2, "`use_sliding_window` is true");
  qwen2 = cases()[3].spec.config;
  qwen2["layer_types"] = {"full_attention", "sliding_attention"};
  expect_error(qwen2, CheckpointFormat::qwen2, "`layer_types` has \"sliding_attention\"");
  std::ofstream(path / "config.json", std::ios::trunc) << "{not json";
  EXPECT_NE(error_of([&] { read_huggingface_checkpoint(path, CheckpointFormat::llama, false); }).find("not valid JSON"),
            std::string::npos);
  std::filesystem::remove(path / "config.json");
  EXPECT_NE(error_of([&] { read_huggingface_checkpoint(path, CheckpointFormat::llama, false); }).find("no config.json"),
            std::string::npos);
}

// A base model config in our YAML, validated.
GPTBaseModelConfig ours(const std::string& mixer, const std::string& mlp = "{intermediate_size: 12, gated: true, "
                                                                           "add_linear_biases: false}",
                        const std::string& norm = "{type: rms_norm}") {
  return base_model(YAML::Load("{hidden_size: 8, embeddings: {vocab_size: 16}, head: {normalization: " + norm +
                               "}, decoder: {num_blocks: 1, block: {mixer: " + mixer + ", mlp: " + mlp +
                               ", normalization: " + norm + "}}}"));
}

TEST(Huggingface, ExportRefusesModelsTheFormatCannotHold) {
  const std::string mixer =
      "{heads: 2, head_groups: 1, head_size: 4, add_linear_biases: false, rotary: {type: default}";
  auto export_error = [](const HfFormat& format, const GPTBaseModelConfig& config) {
    return error_of([&] { export_hf_config(format, config, DType::float32); });
  };
  EXPECT_EQ(export_error(llama_format(), ours(mixer + "}")), "");
  EXPECT_NE(export_error(llama_format(), ours(mixer + ", window_size: 8}")).find("the mistral format has one"),
            std::string::npos);
  EXPECT_EQ(export_error(mistral_format(), ours(mixer + ", window_size: 8}")), "");
  EXPECT_NE(export_error(llama_format(), ours(mixer + "}", "{intermediate_size: 12, add_linear_biases: false}"))
                .find("decoder.block.mlp.gated = true"),
            std::string::npos);
  EXPECT_NE(export_error(llama_format(), ours(mixer + "}", "{intermediate_size: 12, gated: true, add_linear_biases: "
                                                           "false}",
                                              "{type: layer_norm}"))
                .find("rms_norm"),
            std::string::npos);
  EXPECT_NE(export_error(llama_format(), ours(mixer + "}", "{intermediate_size: 12, gated: true, add_linear_biases: "
                                                           "false}",
                                              "{type: rms_norm, zero_centered: true}"))
                .find("zero_centered"),
            std::string::npos);
  EXPECT_NE(export_error(qwen2_format(), ours("{heads: 2, head_groups: 1, head_size: 8, add_linear_biases: false, "
                                              "query_layer: {bias: {enabled: true}}, key_layer: {bias: {enabled: "
                                              "true}}, rotary: {type: default}}"))
                .find("derives the head size"),
            std::string::npos);
  EXPECT_NE(export_error(llama_format(), ours("{heads: 2, head_groups: 1, head_size: 4, add_linear_biases: false, "
                                              "rotary: {type: none}}"))
                .find("needs rotary embeddings"),
            std::string::npos);
  EXPECT_NE(export_error(llama_format(), ours("{heads: 2, head_groups: 1, head_size: 4, add_linear_biases: false, "
                                              "query_layer: {bias: {enabled: true}}, rotary: {type: default}}"))
                .find("query_layer.bias.enabled"),
            std::string::npos);
  // Training-only settings are not the model: they do not stop an export.
  EXPECT_EQ(export_error(llama_format(),
                         base_model(YAML::Load("{hidden_size: 8, embeddings: {vocab_size: 16, dropout: 0.1}, head: "
                                               "{normalization: {type: rms_norm}, losses: {lm: {type: label}, z: "
                                               "{type: z_loss, weight: 0.1}}}, decoder: {num_blocks: 1, block: {mixer: " +
                                               mixer + "}, mlp: {intermediate_size: 12, gated: true, "
                                               "add_linear_biases: false, layer_1: {weight: {initialization: {type: "
                                               "normal, std: 0.02}}}}, normalization: {type: rms_norm}}}}"))),
            "");
}

TEST(Huggingface, ArchitectureComparisonIgnoresNonArchitectureSettings) {
  const std::string mixer = "{heads: 2, head_size: 4, rotary: {type: default}}";
  GPTBaseModelConfig plain = ours(mixer);
  GPTBaseModelConfig with_init = ours(mixer, "{intermediate_size: 12, gated: true, add_linear_biases: false, "
                                             "layer_1: {weight: {initialization: {type: normal, std: 0.5}}}}");
  EXPECT_EQ(config::compare_architecture(plain, with_init), std::vector<std::string>{});
  GPTBaseModelConfig wider = ours("{heads: 2, head_size: 8, rotary: {type: default}}");
  ASSERT_EQ(config::compare_architecture(plain, wider).size(), 1u);
  EXPECT_NE(config::compare_architecture(plain, wider)[0].find("head_size: 4 != 8"), std::string::npos);
}

}  // namespace
}  // namespace fast_llm::models::gpt

namespace fast_llm::models::gpt {
namespace {

// The hidden `model_outputs` command's work on a checkpoint written here: logits, the loss (which must be the
// cross-entropy of those logits) and gradients named by Hugging Face names, each checked by finite differences of the
// loss through a perturbed checkpoint (fp64).
TEST(ModelOutputs, LossMatchesTheLogitsAndGradientsMatchFiniteDifferences) {
  const Case llama = cases()[0];
  const auto root = directory("model_outputs");
  auto tensors = testing::write_hf_checkpoint(root / "model", llama.spec);
  Tensor tokens = Tensor::empty(Shape{2, 5}, DType::int64);
  const int64_t ids[] = {1, 5, 9, 2, 15, 0, 3, 3, 7, 11};
  std::copy(std::begin(ids), std::end(ids), tokens.data_as<int64_t>());
  engine::write_safetensors(root / "tokens.safetensors",
                            {{.name = "tokens", .dtype = DType::int64, .shape = Shape{2, 5}, .values = [&] { return tokens; }}});
  auto run = [&](const std::filesystem::path& model, const std::string& output, bool gradients) {
    ModelOutputsConfig config;
    testing::ScopedEnvironment environment(testing::single_process());
    engine::load_config_with_pretrained(
        config, YAML::Load("{pretrained: {format: llama, path: '" + model.string() + "'}, tokens: '" +
                           (root / "tokens.safetensors").string() + "', output: '" + (root / output).string() +
                           "', gradients: " + (gradients ? "true" : "false") +
                           ", model: {distributed: {compute_dtype: float64, optimization_dtype: float64, use_cuda: "
                           "false}}}"),
        gpt_model_type());
    write_model_outputs(config);
    return std::make_unique<engine::SafetensorsFile>(root / output);
  };
  auto outputs = run(root / "model", "outputs.safetensors", true);
  Tensor logits = outputs->read("logits");
  ASSERT_EQ(logits.shape(), (Shape{2, 5, 16}));
  const double loss = outputs->read("loss").data_as<double>()[0];
  // Cross-entropy of the next token, averaged over the 2 x 4 predictions.
  double total = 0.0;
  for (int64_t row = 0; row < 2; ++row)
    for (int64_t t = 0; t + 1 < 5; ++t) {
      const double* z = logits.data_as<double>() + (row * 5 + t) * 16;
      double max = z[0], sum = 0.0;
      for (int v = 0; v < 16; ++v) max = std::max(max, z[v]);
      for (int v = 0; v < 16; ++v) sum += std::exp(z[v] - max);
      total += std::log(sum) + max - z[ids[row * 5 + t + 1]];
    }
  EXPECT_NEAR(loss, total / 8.0, 1e-12);

  // Every Hugging Face tensor has its gradient, with its shape.
  for (const auto& [name, tensor] : tensors) {
    ASSERT_TRUE(outputs->contains("grad." + name)) << name;
    EXPECT_EQ(outputs->info("grad." + name).tensor_shape(), tensor.shape()) << name;
  }
  // Finite differences through the checkpoint, on entries of split, transposed and plain tensors.
  const std::vector<std::pair<std::string, int64_t>> probes{{"model.layers.1.self_attn.v_proj.weight", 11},
                                                            {"model.layers.0.self_attn.k_proj.bias", 2},
                                                            {"model.layers.0.mlp.down_proj.weight", 29},
                                                            {"model.layers.1.mlp.up_proj.weight", 40},
                                                            {"model.layers.0.self_attn.q_proj.weight", 7},
                                                            {"lm_head.weight", 50},
                                                            {"model.norm.weight", 3}};
  const double epsilon = 1e-5;
  for (const auto& [name, index] : probes) {
    const double gradient = outputs->read("grad." + name).data_as<double>()[index];
    double losses[2];
    for (int side = 0; side < 2; ++side) {
      testing::HfCheckpointSpec spec = llama.spec;
      const auto perturbed = root / ("perturbed_" + std::to_string(side));
      std::filesystem::remove_all(perturbed);
      auto written = testing::write_hf_checkpoint(perturbed, spec);  // same values: same seeds
      // Rewrite the one tensor with the entry moved.
      engine::TensorList list("perturbed");
      for (auto& [other, tensor] : written) {
        Tensor copy = tensor;
        if (other == name) {
          copy = Tensor::empty(tensor.shape(), DType::float32);
          copy.copy_bytes_from(tensor);
          copy.data_as<float>()[index] += float(side == 0 ? epsilon : -epsilon);
        }
        list.add(other, {DType::float32, copy.shape()}, [copy] { return copy; });
      }
      std::filesystem::remove(perturbed / "model.safetensors");
      engine::write_safetensors_set(perturbed, list, list.names(), int64_t(1) << 30,
                                    engine::SafetensorsSetLayout::huggingface);
      losses[side] = run(perturbed, "perturbed.safetensors", true)->read("loss").data_as<double>()[0];
    }
    // The fp32 perturbation is what the checkpoint holds: divide by it exactly.
    const float stored = tensors.at(name).data_as<float>()[index];
    const double step = double(stored + float(epsilon)) - double(stored - float(epsilon));
    EXPECT_NEAR((losses[0] - losses[1]) / step, gradient, 1e-6 * std::max(1.0, std::abs(gradient))) << name;
  }
}

}  // namespace
}  // namespace fast_llm::models::gpt
