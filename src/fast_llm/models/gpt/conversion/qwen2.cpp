// The Qwen2 format (`qwen2`, Qwen2ForCausalLM): Llama with biases on the query, key and value projections only, a
// head size derived from the hidden size, and no sliding window (the keys are accepted only when it is off).
#include <fmt/format.h>

#include "fast_llm/core/error.h"
#include "fast_llm/models/gpt/conversion/llama.h"

namespace fast_llm::models::gpt {

namespace {

constexpr std::string_view kComponent = "huggingface";
constexpr std::string_view kMixer = "decoder.block.mixer";

// Qwen2 computes head_dim = hidden_size / num_attention_heads; a head_dim key (transformers 5) must say the same.
HfConfigEntry head_dim_entry() {
  return hf_custom(
      {"head_dim"},
      [](const nlohmann::json& hf, YAML::Node& model) {
        const int64_t hidden = hf.at("hidden_size").get<int64_t>(), heads = hf.at("num_attention_heads").get<int64_t>();
        FLM_CHECK(heads > 0 && hidden % heads == 0, kComponent,
                  "hidden_size {} is not a multiple of num_attention_heads {}", hidden, heads);
        if (hf.contains("head_dim") && !hf["head_dim"].is_null() && hf["head_dim"] != hidden / heads)
          throw NotSupportedError(kComponent, fmt::format("`head_dim` {} differs from hidden_size / "
                                                          "num_attention_heads = {}, which Qwen2 uses",
                                                          hf["head_dim"].dump(), hidden / heads));
        yaml_set(model, fmt::format("{}.head_size", kMixer), YAML::Node(hidden / heads));
      },
      [](const YAML::Node& model, nlohmann::ordered_json&) {
        const int64_t hidden = yaml_at(model, "hidden_size").as<int64_t>();
        const int64_t heads = yaml_at(model, fmt::format("{}.heads", kMixer)).as<int64_t>();
        const int64_t head_size = yaml_at(model, fmt::format("{}.head_size", kMixer)).as<int64_t>();
        if (head_size * heads != hidden)
          throw NotSupportedError(kComponent, fmt::format("the qwen2 format derives the head size from hidden_size / "
                                                          "heads = {} / {}; the model's head_size is {}",
                                                          hidden, heads, head_size));
      });
}

// transformers 5 lists each layer's attention: all must be full attention.
HfConfigEntry layer_types_entry() {
  return hf_custom(
      {"layer_types"},
      [](const nlohmann::json& hf, YAML::Node&) {
        if (!hf.contains("layer_types") || hf["layer_types"].is_null()) return;
        for (const auto& type : hf["layer_types"])
          if (type != "full_attention")
            throw NotSupportedError(kComponent, fmt::format("`layer_types` has {}: sliding-window layers are not "
                                                            "supported in the qwen2 format",
                                                            type.dump()));
      },
      [](const YAML::Node&, nlohmann::ordered_json&) {});
}

}  // namespace

const HfFormat& qwen2_format() {
  static const HfFormat format = [] {
    const std::string mixer(kMixer);
    HfFormat result{.format = engine::CheckpointFormat::qwen2,
                    .model_type = "qwen2",
                    .architecture = "Qwen2ForCausalLM",
                    .config = llama_family_config({.vocab_size = 151936, .max_position_embeddings = 32768}),
                    .weights = llama_family_weights(),
                    .ignored_tensors = llama_family_ignored_tensors()};
    result.config.push_back(head_dim_entry());
    result.config.push_back(hf_constant_field(mixer + ".add_linear_biases", false));
    result.config.push_back(hf_constant_field(mixer + ".query_layer.bias.enabled", true));
    result.config.push_back(hf_constant_field(mixer + ".key_layer.bias.enabled", true));
    result.config.push_back(hf_constant_field(mixer + ".dense_layer.bias.enabled", false));
    result.config.push_back(hf_constant_field("decoder.block.mlp.add_linear_biases", false));
    result.config.push_back(hf_fixed_key("use_sliding_window", false, /*write=*/true));
    result.config.push_back(hf_fixed_key("use_mrope", false, /*write=*/false));
    // Used only with use_sliding_window, which must be off.
    result.config.push_back(hf_ignored({"sliding_window", "max_window_layers"}));
    result.config.push_back(layer_types_entry());
    result.config.push_back(no_sliding_window_entry("qwen2"));
    return result;
  }();
  return format;
}

}  // namespace fast_llm::models::gpt
