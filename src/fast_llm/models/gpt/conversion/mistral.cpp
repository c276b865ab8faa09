// The Mistral format (`mistral`, MistralForCausalLM): Llama without biases, with a sliding window (whose entry the
// mixtral format shares).
#include <fmt/format.h>

#include "fast_llm/core/error.h"
#include "fast_llm/models/gpt/conversion/llama.h"

namespace fast_llm::models::gpt {

namespace {

constexpr std::string_view kComponent = "huggingface";
constexpr std::string_view kWindow = "decoder.block.mixer.window_size";
// Hugging Face's MistralConfig default.
constexpr int64_t kDefaultSlidingWindow = 4096;

}  // namespace

HfConfigEntry sliding_window_entry(std::optional<int64_t> default_window) {
  return hf_custom(
      {"sliding_window", "layer_types"},
      [default_window](const nlohmann::json& hf, YAML::Node& model) {
        std::optional<int64_t> window = default_window;
        if (hf.contains("sliding_window")) {
          const nlohmann::json& value = hf["sliding_window"];
          FLM_CHECK(value.is_null() || value.is_number_integer(), kComponent,
                    "`sliding_window` must be an integer or null, got {}", value.dump());
          window = value.is_null() ? std::nullopt : std::optional<int64_t>(value.get<int64_t>());
        }
        // A list of each layer's attention (transformers 5) must not mix kinds: Mistral applies `sliding_window` to
        // every layer, so one kind for all is the only layout it can mean.
        if (hf.contains("layer_types") && !hf["layer_types"].is_null()) {
          const nlohmann::json& types = hf["layer_types"];
          FLM_CHECK(types.is_array(), kComponent, "`layer_types` must be a list");
          for (const auto& type : types)
            if (type != types.front() || (type != "full_attention" && type != "sliding_attention"))
              throw NotSupportedError(kComponent, fmt::format("`layer_types` {} mixes attention kinds or has an "
                                                              "unknown one: the mistral and mixtral formats have one "
                                                              "attention for every layer",
                                                              types.dump()));
        }
        if (window) yaml_set(model, kWindow, YAML::Node(*window));
      },
      [](const YAML::Node& model, nlohmann::ordered_json& hf) {
        const YAML::Node window = yaml_at(model, kWindow);
        hf["sliding_window"] = window && !window.IsNull() ? nlohmann::ordered_json(window.as<int64_t>())
                                                          : nlohmann::ordered_json(nullptr);
      });
}

const HfFormat& mistral_format() {
  static const HfFormat format = [] {
    HfFormat result{.format = engine::CheckpointFormat::mistral,
                    .model_type = "mistral",
                    .architecture = "MistralForCausalLM",
                    .config = llama_family_config({.vocab_size = 32000, .max_position_embeddings = 4096 * 32}),
                    .weights = llama_family_weights(),
                    .ignored_tensors = llama_family_ignored_tensors()};
    result.config.push_back(llama_head_dim_entry());
    result.config.push_back(hf_constant_field("decoder.block.mixer.add_linear_biases", false));
    result.config.push_back(hf_constant_field("decoder.block.mlp.add_linear_biases", false));
    result.config.push_back(sliding_window_entry(kDefaultSlidingWindow));
    return result;
  }();
  return format;
}

}  // namespace fast_llm::models::gpt
