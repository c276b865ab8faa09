// The Llama format (`llama`, LlamaForCausalLM) and the tables the whole family shares.
#include "fast_llm/models/gpt/conversion/llama.h"

#include <fmt/format.h>

#include <cmath>
#include <set>
#include <span>

#include "fast_llm/config/config.h"
#include "fast_llm/core/error.h"

namespace fast_llm::models::gpt {

namespace {

constexpr std::string_view kComponent = "huggingface";
constexpr std::string_view kMixer = "decoder.block.mixer";

using json = nlohmann::json;

std::string path_in(std::string_view base, std::string_view field) { return fmt::format("{}.{}", base, field); }

std::string flow(const YAML::Node& node) {
  if (!node || node.IsNull()) return "null";
  YAML::Emitter emitter;
  emitter << YAML::Flow << node;
  return emitter.c_str();
}

double number(const YAML::Node& node, const std::string& what) {
  FLM_CHECK(node && node.IsScalar(), kComponent, "{}: expected a number, got {}", what, flow(node));
  return config::detail::parse_double(node, what);
}

YAML::Node yaml_number(double value) { return config::detail::write_double(value); }

// ----- activation

struct ActivationName {
  std::string_view ours;
  std::string_view hf;
};
// Our `gelu` is the tanh approximation: Hugging Face's exact `gelu` (erf) is a different function.
constexpr ActivationName kActivations[] = {
    {"silu", "silu"}, {"gelu", "gelu_pytorch_tanh"}, {"relu", "relu"},
    {"squared_relu", "relu2"}, {"sigmoid", "sigmoid"}, {"identity", "linear"}};
// Other Hugging Face names of the same functions.
constexpr ActivationName kActivationAliases[] = {{"gelu", "gelu_new"}, {"silu", "swish"}};

HfConfigEntry activation_entry() {
  return hf_custom(
      {"hidden_act"},
      [](const json& hf, YAML::Node& model) {
        const std::string name = hf.contains("hidden_act") ? hf["hidden_act"].get<std::string>() : "silu";
        for (const auto& list : {std::span<const ActivationName>(kActivations), std::span<const ActivationName>(kActivationAliases)})
          for (const auto& [ours, theirs] : list)
            if (theirs == name) {
              yaml_set(model, "decoder.block.mlp.activation", YAML::Node(std::string(ours)));
              return;
            }
        throw NotSupportedError(kComponent, fmt::format("`hidden_act` '{}' is not supported (supported: silu, "
                                                        "gelu_pytorch_tanh, gelu_new, relu, relu2, sigmoid, linear)",
                                                        name));
      },
      [](const YAML::Node& model, nlohmann::ordered_json& hf) {
        const std::string ours = yaml_at(model, "decoder.block.mlp.activation").Scalar();
        for (const auto& [name, theirs] : kActivations)
          if (name == ours) {
            hf["hidden_act"] = std::string(theirs);
            return;
          }
        throw NotSupportedError(kComponent, fmt::format("activation {} has no Hugging Face name", ours));
      });
}

// ----- rotary

// Hugging Face's default YaRN attention factor (`get_mscale`).
double yarn_mscale(double scale, double mscale = 1.0) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

double json_number(const json& value, const std::string& what) {
  FLM_CHECK(value.is_number(), kComponent, "`{}` must be a number, got {}", what, value.dump());
  return value.get<double>();
}

// Our rotary config from one rope dictionary (`where` names it in errors: `rope_scaling` or `rope_parameters`).
YAML::Node rotary_from(const json& hf, const json& parameters, double theta, const std::string& where) {
  const json& p = parameters.is_null() ? json::object() : parameters;
  FLM_CHECK(p.is_object(), kComponent, "`{}` must be an object, got {}", where, p.dump());
  std::string type = "default";
  if (p.contains("rope_type") && !p["rope_type"].is_null()) type = p["rope_type"].get<std::string>();
  if (p.contains("type") && !p["type"].is_null()) {
    const std::string legacy = p["type"].get<std::string>();
    FLM_CHECK(!p.contains("rope_type") || p["rope_type"].is_null() || legacy == type, kComponent,
              "`{}.type` ({}) and `{}.rope_type` ({}) disagree", where, legacy, where, type);
    type = legacy;
  }
  std::set<std::string> allowed{"rope_type", "type", "rope_theta", "partial_rotary_factor"};
  if (type == "llama3")
    allowed.insert({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  else if (type == "yarn")
    allowed.insert({"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
                    "mscale", "mscale_all_dim", "truncate"});
  else if (type != "default")
    throw NotSupportedError(kComponent, fmt::format("rotary type '{}' (`{}.rope_type`) is not supported (supported: "
                                                    "default, llama3, yarn)",
                                                    type, where));
  for (auto item = p.begin(); item != p.end(); ++item)
    if (!allowed.contains(item.key()))
      throw NotSupportedError(kComponent, fmt::format("`{}.{}` is not supported for rotary type {}", where, item.key(),
                                                      type));
  for (const json* source : {&p, &hf})
    if (source->contains("partial_rotary_factor") && !(*source)["partial_rotary_factor"].is_null() &&
        json_number((*source)["partial_rotary_factor"], "partial_rotary_factor") != 1.0)
      throw NotSupportedError(kComponent, "`partial_rotary_factor` other than 1 (rotating part of each head) is not "
                                          "supported");

  auto get = [&](const std::string& key) -> std::optional<double> {
    if (!p.contains(key) || p[key].is_null()) return std::nullopt;
    return json_number(p[key], fmt::format("{}.{}", where, key));
  };
  auto require = [&](const std::string& key) {
    auto value = get(key);
    if (!value) throw Error(kComponent, fmt::format("`{}.{}` is missing (rotary type {})", where, key, type));
    return *value;
  };
  // transformers 5 fills a missing original_max_position_embeddings with max_position_embeddings.
  auto original_context = [&]() -> double {
    if (auto value = get("original_max_position_embeddings")) return *value;
    if (hf.contains("max_position_embeddings") && hf["max_position_embeddings"].is_number())
      return hf["max_position_embeddings"].get<double>();
    throw Error(kComponent, fmt::format("`{}.original_max_position_embeddings` is missing (rotary type {})", where,
                                        type));
  };

  YAML::Node rotary(YAML::NodeType::Map);
  rotary["type"] = type;
  rotary["theta"] = yaml_number(theta);
  if (type == "llama3") {
    rotary["scale_factor"] = yaml_number(require("factor"));
    rotary["low_frequency_factor"] = yaml_number(require("low_freq_factor"));
    rotary["high_frequency_factor"] = yaml_number(require("high_freq_factor"));
    rotary["original_context_length"] = int64_t(original_context());
  } else if (type == "yarn") {
    const double original = original_context();
    double factor;
    if (auto given = get("factor")) {
      factor = *given;
    } else {
      FLM_CHECK(hf.contains("max_position_embeddings"), kComponent, "`{}.factor` is missing", where);
      factor = hf["max_position_embeddings"].get<double>() / original;
    }
    double attention_factor;
    if (auto given = get("attention_factor")) {
      attention_factor = *given;
    } else if (auto mscale = get("mscale"), all = get("mscale_all_dim"); mscale && all) {
      attention_factor = yarn_mscale(factor, *mscale) / yarn_mscale(factor, *all);
    } else {
      attention_factor = yarn_mscale(factor);
    }
    // As transformers: `beta_fast or 32`, `beta_slow or 1`.
    const double beta_fast = get("beta_fast").value_or(0.0) != 0.0 ? *get("beta_fast") : 32.0;
    const double beta_slow = get("beta_slow").value_or(0.0) != 0.0 ? *get("beta_slow") : 1.0;
    if (p.contains("truncate") && !p["truncate"].is_null() && !p["truncate"].get<bool>())
      throw NotSupportedError(kComponent, fmt::format("`{}.truncate: false` (an unrounded YaRN correction range) is "
                                                      "not supported",
                                                      where));
    rotary["scale_factor"] = yaml_number(factor);
    rotary["attention_factor"] = yaml_number(attention_factor);
    rotary["beta_fast"] = yaml_number(beta_fast);
    rotary["beta_slow"] = yaml_number(beta_slow);
    rotary["original_context_length"] = int64_t(original);
  }
  return rotary;
}

// `default_theta`: the format's rope_theta when the file has none.
void import_rotary(const json& hf, YAML::Node& model, double default_theta) {
  const bool has_parameters = hf.contains("rope_parameters") && !hf["rope_parameters"].is_null();
  const bool has_scaling = hf.contains("rope_scaling") && !hf["rope_scaling"].is_null();
  const bool has_theta = hf.contains("rope_theta") && !hf["rope_theta"].is_null();
  // The top-level rope_theta, or `fallback` when the file has none.
  auto top_theta = [&](double fallback) { return has_theta ? json_number(hf["rope_theta"], "rope_theta") : fallback; };
  YAML::Node rotary;
  if (has_parameters) {
    const json& parameters = hf["rope_parameters"];
    FLM_CHECK(parameters.is_object(), kComponent, "`rope_parameters` must be an object");
    for (const char* layer_type : {"full_attention", "sliding_attention"})
      if (parameters.contains(layer_type))
        throw NotSupportedError(kComponent, "`rope_parameters` per layer type is not supported");
    const double theta = parameters.contains("rope_theta") ? json_number(parameters["rope_theta"], "rope_parameters.rope_theta")
                                                           : top_theta(default_theta);
    rotary = rotary_from(hf, parameters, theta, "rope_parameters");
    if (has_scaling || has_theta) {
      // The same model in transformers 4 (rope_scaling, rope_theta) and 5 (rope_parameters), or an ambiguous file.
      YAML::Node legacy = rotary_from(hf, has_scaling ? hf["rope_scaling"] : json(nullptr), top_theta(theta),
                                      "rope_scaling");
      if (flow(legacy) != flow(rotary))
        throw Error(kComponent, fmt::format("`rope_scaling` / `rope_theta` ({}) and `rope_parameters` ({}) describe "
                                            "different rotary embeddings",
                                            flow(legacy), flow(rotary)));
    }
  } else {
    rotary = rotary_from(hf, has_scaling ? hf["rope_scaling"] : json(nullptr), top_theta(default_theta),
                         "rope_scaling");
  }
  yaml_set(model, path_in(kMixer, "rotary"), rotary);
}

void export_rotary(const YAML::Node& model, nlohmann::ordered_json& hf) {
  const YAML::Node rotary = yaml_at(model, path_in(kMixer, "rotary"));
  const std::string type = rotary["type"].Scalar();
  const std::string where = fmt::format("model.base_model.{}.rotary", kMixer);
  if (type == "none")
    throw NotSupportedError(kComponent, fmt::format("the Llama family needs rotary embeddings; {}.type is none", where));
  if (type != "default" && type != "llama3" && type != "yarn")
    throw NotSupportedError(kComponent, fmt::format("rotary type {} ({}.type) has no Hugging Face equivalent", type,
                                                    where));
  const double theta = number(rotary["theta"], where + ".theta");
  nlohmann::ordered_json parameters = {{"rope_type", type}};
  if (type == "llama3") {
    parameters["factor"] = number(rotary["scale_factor"], where + ".scale_factor");
    parameters["low_freq_factor"] = number(rotary["low_frequency_factor"], where + ".low_frequency_factor");
    parameters["high_freq_factor"] = number(rotary["high_frequency_factor"], where + ".high_frequency_factor");
    parameters["original_max_position_embeddings"] = rotary["original_context_length"].as<int64_t>();
  } else if (type == "yarn") {
    const double factor = number(rotary["scale_factor"], where + ".scale_factor");
    parameters["factor"] = factor;
    parameters["original_max_position_embeddings"] = rotary["original_context_length"].as<int64_t>();
    parameters["beta_fast"] = number(rotary["beta_fast"], where + ".beta_fast");
    parameters["beta_slow"] = number(rotary["beta_slow"], where + ".beta_slow");
    const double attention_factor = number(rotary["attention_factor"], where + ".attention_factor");
    if (attention_factor != yarn_mscale(factor)) parameters["attention_factor"] = attention_factor;
  }
  // Both spellings, which transformers 4 and 5 read the same way.
  hf["rope_theta"] = theta;
  hf["rope_scaling"] = type == "default" ? nlohmann::ordered_json(nullptr) : parameters;
  nlohmann::ordered_json with_theta = parameters;
  with_theta["rope_theta"] = theta;
  hf["rope_parameters"] = with_theta;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Shared tables

std::vector<HfConfigEntry> llama_family_config(const LlamaFamilyDefaults& defaults) {
  const std::string mixer(kMixer);
  return {
      hf_constant_field("decoder.type", "fixed"),
      hf_constant_field("decoder.block.type", "decoder"),
      hf_constant_field(mixer + ".type", "attention"),
      hf_constant_field(mixer + ".causal", true),
      hf_constant_field(mixer + ".softmax_scale_power", 0.5),
      hf_constant_field("decoder.block.mlp.type", "mlp"),
      hf_constant_field("decoder.block.mlp.gated", true),
      hf_constant_field("decoder.block.normalization.type", "rms_norm"),
      hf_constant_field("head.normalization.type", "rms_norm"),
      hf_constant_field("head.prediction_heads", 1),
      hf_constant_field("peft.type", "none"),
      hf_rename("hidden_size", {"hidden_size"}, HfValueType::integer),
      hf_rename("vocab_size", {"embeddings.vocab_size"}, HfValueType::integer, defaults.vocab_size),
      hf_rename("num_hidden_layers", {"decoder.num_blocks"}, HfValueType::integer),
      hf_rename("num_attention_heads", {mixer + ".heads"}, HfValueType::integer),
      hf_custom(
          {"num_key_value_heads"},
          [mixer](const json& hf, YAML::Node& model) {
            const json& heads = hf.contains("num_key_value_heads") && !hf["num_key_value_heads"].is_null()
                                    ? hf["num_key_value_heads"]
                                    : hf.at("num_attention_heads");
            FLM_CHECK(heads.is_number_integer(), kComponent, "`num_key_value_heads` must be an integer");
            yaml_set(model, mixer + ".head_groups", YAML::Node(heads.get<int64_t>()));
          },
          [mixer](const YAML::Node& model, nlohmann::ordered_json& hf) {
            hf["num_key_value_heads"] = yaml_at(model, mixer + ".head_groups").as<int64_t>();
          }),
      hf_rename("intermediate_size", {"decoder.block.mlp.intermediate_size"}, HfValueType::integer),
      activation_entry(),
      hf_rename("rms_norm_eps", {"decoder.block.normalization.epsilon", "head.normalization.epsilon"},
                HfValueType::number, defaults.rms_norm_eps),
      hf_rename("tie_word_embeddings", {"tied_embedding_weight"}, HfValueType::boolean, false),
      hf_rename("max_position_embeddings", {"embeddings.num_position_embeddings"}, HfValueType::integer,
                defaults.max_position_embeddings),
      hf_rename("attention_dropout", {mixer + ".dropout"}, HfValueType::number, 0.0),
      hf_custom({"rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor"},
                [theta = defaults.rope_theta](const json& hf, YAML::Node& model) { import_rotary(hf, model, theta); },
                export_rotary),
      // nanotron's exports (SmolLM2) say their rotary pairs halves, as Hugging Face's does; interleaved pairs would be
      // another function.
      hf_fixed_key("rope_interleaved", false, /*write=*/false),
      // Keys that do not change what the model computes (`is_llama_config`: a marker nanotron writes, read by nothing;
      // `pretraining_tp`: transformers slices the same matmuls into that many pieces).
      hf_ignored({"is_llama_config", "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
                  "transformers_version", "initializer_range", "use_cache", "torch_dtype", "dtype", "_name_or_path",
                  "pretraining_tp", "output_attentions", "output_hidden_states", "return_dict", "tokenizer_class",
                  "id2label", "label2id", "problem_type", "finetuning_task", "task_specific_params", "prefix",
                  "_attn_implementation_autoset", "_attn_implementation", "attn_implementation", "torchscript",
                  "use_return_dict", "is_decoder", "chunk_size_feed_forward", "_commit_hash", "tf_legacy_loss",
                  "use_bfloat16", "pruned_heads", "tie_encoder_decoder", "is_encoder_decoder", "add_cross_attention",
                  "cross_attention_hidden_size", "output_scores", "return_dict_in_generate",
                  // Generation settings that configs saved by older transformers carry.
                  "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
                  "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
                  "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
                  "num_return_sequences", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
                  "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens"}),
  };
}

HfConfigEntry llama_head_dim_entry() {
  const std::string mixer(kMixer);
  return hf_custom(
      {"head_dim"},
      [mixer](const json& hf, YAML::Node& model) {
        int64_t head_dim;
        if (hf.contains("head_dim") && !hf["head_dim"].is_null()) {
          FLM_CHECK(hf["head_dim"].is_number_integer(), kComponent, "`head_dim` must be an integer");
          head_dim = hf["head_dim"].get<int64_t>();
        } else {
          const int64_t hidden = hf.at("hidden_size").get<int64_t>(), heads = hf.at("num_attention_heads").get<int64_t>();
          FLM_CHECK(heads > 0 && hidden % heads == 0, kComponent,
                    "`head_dim` is missing and hidden_size {} is not a multiple of num_attention_heads {}", hidden,
                    heads);
          head_dim = hidden / heads;
        }
        yaml_set(model, mixer + ".head_size", YAML::Node(head_dim));
      },
      [mixer](const YAML::Node& model, nlohmann::ordered_json& hf) {
        hf["head_dim"] = yaml_at(model, mixer + ".head_size").as<int64_t>();
      });
}

HfConfigEntry no_sliding_window_entry(std::string format_name) {
  const std::string mixer(kMixer);
  return hf_custom({}, [](const json&, YAML::Node&) {},
                   [mixer, format_name](const YAML::Node& model, nlohmann::ordered_json&) {
                     const YAML::Node window = yaml_at(model, mixer + ".window_size");
                     if (window && !window.IsNull())
                       throw NotSupportedError(kComponent,
                                               fmt::format("the {} format has no sliding window: "
                                                           "model.base_model.{}.window_size must be unset, got {} "
                                                           "(the mistral format has one)",
                                                           format_name, mixer, window.Scalar()));
                   });
}

std::vector<HfWeightEntry> llama_family_weights() {
  using Kind = HfWeightEntry::Kind;
  std::vector<HfWeightEntry> entries{
      {Kind::copy, "embeddings.word_embeddings_weight", {"model.embed_tokens.weight"}},
      {Kind::copy, "decoder.{}.norm_1.weight", {"model.layers.{}.input_layernorm.weight"}},
      {Kind::copy, "decoder.{}.norm_2.weight", {"model.layers.{}.post_attention_layernorm.weight"}},
      {Kind::copy, "head.final_norm.weight", {"model.norm.weight"}},
      {Kind::copy, "head.output_weights", {"lm_head.weight"}},
  };
  for (const char* suffix : {"weight", "bias"}) {
    entries.push_back(
        {Kind::copy, fmt::format("decoder.{{}}.mixer.query.{}", suffix), {fmt::format("model.layers.{{}}.self_attn.q_proj.{}", suffix)}});
    entries.push_back({Kind::concatenate,
                       fmt::format("decoder.{{}}.mixer.key_value.{}", suffix),
                       {fmt::format("model.layers.{{}}.self_attn.k_proj.{}", suffix),
                        fmt::format("model.layers.{{}}.self_attn.v_proj.{}", suffix)}});
    entries.push_back(
        {Kind::copy, fmt::format("decoder.{{}}.mixer.dense.{}", suffix), {fmt::format("model.layers.{{}}.self_attn.o_proj.{}", suffix)}});
    entries.push_back({Kind::concatenate,
                       fmt::format("decoder.{{}}.mlp.layer_1.{}", suffix),
                       {fmt::format("model.layers.{{}}.mlp.gate_proj.{}", suffix),
                        fmt::format("model.layers.{{}}.mlp.up_proj.{}", suffix)}});
  }
  entries.push_back({Kind::transpose, "decoder.{}.mlp.layer_2.weight", {"model.layers.{}.mlp.down_proj.weight"}});
  entries.push_back({Kind::copy, "decoder.{}.mlp.layer_2.bias", {"model.layers.{}.mlp.down_proj.bias"}});
  return entries;
}

std::vector<std::string> llama_family_ignored_tensors() { return {"model.layers.{}.self_attn.rotary_emb.inv_freq"}; }

// ---------------------------------------------------------------------------------------------------------------
// llama

const HfFormat& llama_format() {
  static const HfFormat format = [] {
    const std::string mixer(kMixer);
    HfFormat result{.format = engine::CheckpointFormat::llama,
                    .model_type = "llama",
                    .architecture = "LlamaForCausalLM",
                    .config = llama_family_config({.vocab_size = 32000, .max_position_embeddings = 2048}),
                    .weights = llama_family_weights(),
                    .ignored_tensors = llama_family_ignored_tensors()};
    result.config.push_back(llama_head_dim_entry());
    // One switch for the four attention projections, one for the three MLP ones.
    result.config.push_back(
        hf_rename("attention_bias", {mixer + ".add_linear_biases"}, HfValueType::boolean, false));
    result.config.push_back(
        hf_rename("mlp_bias", {"decoder.block.mlp.add_linear_biases"}, HfValueType::boolean, false));
    result.config.push_back(no_sliding_window_entry("llama"));
    return result;
  }();
  return format;
}

}  // namespace fast_llm::models::gpt
