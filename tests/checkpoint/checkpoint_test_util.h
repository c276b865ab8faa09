// Helpers of the checkpoint tests: temporary directories, deterministic tensors, and Hugging Face checkpoints made
// by the test itself (config.json + safetensors with the names and shapes a Llama-family model has).
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/engine/checkpoint/safetensors.h"
#include "fast_llm/engine/checkpoint/state.h"

namespace fast_llm::testing {

inline std::filesystem::path fresh_directory(const std::string& suite, const std::string& name) {
  auto path = std::filesystem::temp_directory_path() /
              ("fast_llm_" + suite + "_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return path;
}

// Values in [-1, 1) from a small linear congruential generator: the same for a seed on every machine.
inline Tensor pseudo_random(const Shape& shape, DType dtype, uint64_t seed) {
  std::vector<float> values(size_t(shape.numel()));
  uint64_t state = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (float& value : values) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    value = float(double(state >> 40) / double(1ULL << 24) * 2.0 - 1.0);
  }
  return Tensor::from_values(values, shape, dtype);
}

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// The error message of `function`, or "" when it does not throw.
template <class Function>
std::string error_of(Function&& function) {
  try {
    function();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// A Llama-family Hugging Face checkpoint: its config and tensors.
struct HfCheckpointSpec {
  nlohmann::json config;
  std::map<std::string, Shape> tensors;
  DType dtype = DType::float32;
};

// Tensor names and shapes of a Llama-family model described by `config` (config.json keys).
inline std::map<std::string, Shape> llama_tensors(const nlohmann::json& config, bool q_k_v_bias, bool o_bias,
                                                  bool mlp_bias) {
  const int64_t hidden = config["hidden_size"], vocab = config["vocab_size"], layers = config["num_hidden_layers"];
  const int64_t heads = config["num_attention_heads"], kv = config["num_key_value_heads"];
  const int64_t head_dim = config.contains("head_dim") ? int64_t(config["head_dim"]) : hidden / heads;
  const int64_t intermediate = config["intermediate_size"];
  std::map<std::string, Shape> tensors{{"model.embed_tokens.weight", Shape{vocab, hidden}},
                                       {"model.norm.weight", Shape{hidden}}};
  if (!config.value("tie_word_embeddings", false)) tensors["lm_head.weight"] = Shape{vocab, hidden};
  for (int64_t layer = 0; layer < layers; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    tensors[prefix + "input_layernorm.weight"] = Shape{hidden};
    tensors[prefix + "post_attention_layernorm.weight"] = Shape{hidden};
    tensors[prefix + "self_attn.q_proj.weight"] = Shape{heads * head_dim, hidden};
    tensors[prefix + "self_attn.k_proj.weight"] = Shape{kv * head_dim, hidden};
    tensors[prefix + "self_attn.v_proj.weight"] = Shape{kv * head_dim, hidden};
    tensors[prefix + "self_attn.o_proj.weight"] = Shape{hidden, heads * head_dim};
    tensors[prefix + "mlp.gate_proj.weight"] = Shape{intermediate, hidden};
    tensors[prefix + "mlp.up_proj.weight"] = Shape{intermediate, hidden};
    tensors[prefix + "mlp.down_proj.weight"] = Shape{hidden, intermediate};
    if (q_k_v_bias) {
      tensors[prefix + "self_attn.q_proj.bias"] = Shape{heads * head_dim};
      tensors[prefix + "self_attn.k_proj.bias"] = Shape{kv * head_dim};
      tensors[prefix + "self_attn.v_proj.bias"] = Shape{kv * head_dim};
    }
    if (o_bias) tensors[prefix + "self_attn.o_proj.bias"] = Shape{hidden};
    if (mlp_bias) {
      tensors[prefix + "mlp.gate_proj.bias"] = Shape{intermediate};
      tensors[prefix + "mlp.up_proj.bias"] = Shape{intermediate};
      tensors[prefix + "mlp.down_proj.bias"] = Shape{hidden};
    }
  }
  return tensors;
}

// Writes `spec` into `directory` (config.json and safetensors of pseudo-random values, sharded when
// `parameters_per_file` is small) and returns the tensors written.
inline std::map<std::string, Tensor> write_hf_checkpoint(const std::filesystem::path& directory,
                                                         const HfCheckpointSpec& spec,
                                                         int64_t parameters_per_file = int64_t(1) << 30) {
  std::filesystem::create_directories(directory);
  std::map<std::string, Tensor> tensors;
  engine::TensorList list("test checkpoint");
  uint64_t seed = 1;
  for (const auto& [name, shape] : spec.tensors) {
    Tensor tensor = pseudo_random(shape, spec.dtype, seed++);
    tensors[name] = tensor;
    list.add(name, {spec.dtype, shape}, [tensor] { return tensor; });
  }
  engine::write_safetensors_set(directory, list, list.names(), parameters_per_file,
                                engine::SafetensorsSetLayout::huggingface, {{"format", "pt"}});
  std::ofstream(directory / "config.json") << spec.config.dump(2);
  return tensors;
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream stream(path);
  return nlohmann::json::parse(stream);
}

}  // namespace fast_llm::testing
