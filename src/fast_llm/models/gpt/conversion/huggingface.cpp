#include "fast_llm/models/gpt/conversion/huggingface.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include "fast_llm/config/config.h"
#include "fast_llm/core/error.h"
#include "fast_llm/core/file_writer.h"
#include "fast_llm/engine/checkpoint/directory.h"
#include "fast_llm/models/gpt/conversion/peft.h"
#include "fast_llm/models/gpt/conversion/upcycling.h"
#include "fast_llm/models/gpt/model.h"

namespace fast_llm::models::gpt {

namespace {

constexpr std::string_view kComponent = "huggingface";

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    size_t dot = path.find('.', begin);
    parts.emplace_back(path.substr(begin, dot == std::string_view::npos ? std::string_view::npos : dot - begin));
    if (dot == std::string_view::npos) break;
    begin = dot + 1;
  }
  return parts;
}

std::string flow(const YAML::Node& node) {
  if (!node || node.IsNull()) return "null";
  YAML::Emitter emitter;
  emitter << YAML::Flow << node;
  return emitter.c_str();
}

// A config.json value as a YAML scalar the config system reads back exactly.
YAML::Node json_to_yaml(const nlohmann::json& value) {
  if (value.is_null()) return YAML::Node(YAML::NodeType::Null);
  if (value.is_boolean()) return YAML::Node(value.get<bool>());
  if (value.is_number_unsigned()) return YAML::Node(value.get<uint64_t>());
  if (value.is_number_integer()) return YAML::Node(value.get<int64_t>());
  if (value.is_number_float()) return config::detail::write_double(value.get<double>());
  if (value.is_string()) return YAML::Node(value.get<std::string>());
  YAML::Node node = YAML::Load(value.dump());  // lists and objects: JSON is YAML
  return node;
}

nlohmann::json yaml_to_json(const YAML::Node& node, HfValueType type, const std::string& what) {
  if (!node || node.IsNull()) return nullptr;
  FLM_CHECK(node.IsScalar(), kComponent, "{}: expected a single value, got {}", what, flow(node));
  const std::string& text = node.Scalar();
  switch (type) {
    case HfValueType::integer: {
      int64_t value = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      FLM_CHECK(error == std::errc() && end == text.data() + text.size(), kComponent, "{}: '{}' is not an integer",
                what, text);
      return value;
    }
    case HfValueType::number: {
      char* end = nullptr;
      const double value = std::strtod(text.c_str(), &end);
      FLM_CHECK(!text.empty() && end == text.c_str() + text.size(), kComponent, "{}: '{}' is not a number", what, text);
      return value;
    }
    case HfValueType::boolean:
      FLM_CHECK(text == "true" || text == "false", kComponent, "{}: '{}' is not true or false", what, text);
      return text == "true";
    case HfValueType::string: return text;
  }
  return nullptr;
}

bool same_value(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

// A pattern with `{}` (block index) matched against a name: the index, or -1 for a pattern without `{}` that matches.
std::optional<int64_t> match_pattern(std::string_view pattern, std::string_view name) {
  const size_t hole = pattern.find("{}");
  if (hole == std::string_view::npos) return pattern == name ? std::optional<int64_t>(-1) : std::nullopt;
  const std::string_view prefix = pattern.substr(0, hole), suffix = pattern.substr(hole + 2);
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix))
    return std::nullopt;
  const std::string_view digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  int64_t index = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (error != std::errc() || end != digits.data() + digits.size() || index < 0) return std::nullopt;
  if (digits.size() > 1 && digits.front() == '0') return std::nullopt;
  return index;
}

std::string fill_pattern(std::string_view pattern, int64_t index) {
  const size_t hole = pattern.find("{}");
  if (hole == std::string_view::npos) return std::string(pattern);
  return fmt::format("{}{}{}", pattern.substr(0, hole), index, pattern.substr(hole + 2));
}

// `pattern` with its block index and its expert (`{e}`) filled in.
std::string fill_expert_pattern(std::string_view pattern, int64_t index, int64_t expert) {
  std::string name = fill_pattern(pattern, index);
  const size_t hole = name.find("{e}");
  if (hole != std::string::npos) name.replace(hole, 3, std::to_string(expert));
  return name;
}

bool is_expert_kind(HfWeightEntry::Kind kind) {
  return kind == HfWeightEntry::Kind::expert_concatenate || kind == HfWeightEntry::Kind::expert_transpose;
}

// The experts of the model's mixture-of-experts MLP: formats with expert entries have one block config for all.
int64_t mixture_experts(const GPTBaseModelConfig& config) {
  const YAML::Node experts = yaml_at(config.to_yaml(config::WriteOptions{.verbose = config::kVerboseEverything}),
                                     "decoder.block.mlp.experts");
  FLM_CHECK(experts && experts.IsScalar(), kComponent, "{}: the model has no mixture-of-experts MLP with `experts`",
            config.field_path("decoder.block.mlp"));
  return experts.as<int64_t>();
}

// The last fused expert parameter an exported expert tensor was cut from. The tensors of one parameter are written one
// after the other, so it is read once rather than once per expert tensor, and only one fused parameter is held.
class FusedParameterCache {
 public:
  Tensor get(const engine::TensorSource& state, const std::string& key) {
    std::lock_guard lock(mutex_);
    if (key != key_) {
      tensor_ = Tensor();
      tensor_ = state.load(key);
      key_ = key;
    }
    return tensor_;
  }

 private:
  std::mutex mutex_;
  std::string key_;
  Tensor tensor_;
};

// The parameters (name, shape) of the model `config` describes, in declaration order, PEFT adapters left out (a Hugging
// Face checkpoint holds a base model: peft.h).
std::vector<std::pair<std::string, Shape>> model_parameters(const GPTBaseModelConfig& config) {
  GPTModel model(config);
  std::vector<std::pair<std::string, Shape>> result;
  for (layers::Layer* layer : model.layers())
    for (layers::Parameter* parameter : layer->parameters())
      if (!parameter->meta.peft) result.emplace_back(parameter->meta.name, parameter->meta.shape);
  return result;
}

// The entry of `format` for `parameter`, with its block index.
std::pair<const HfWeightEntry*, int64_t> weight_entry(const HfFormat& format, const std::string& parameter,
                                                      const std::vector<HfWeightEntry>* entries = nullptr) {
  for (const HfWeightEntry& entry : entries != nullptr ? *entries : format.weights)
    if (auto index = match_pattern(entry.parameter, parameter)) return {&entry, *index};
  throw NotSupportedError(kComponent, fmt::format("the {} format has no place for parameter {}",
                                                  config::enum_name(format.format), parameter));
}

[[noreturn]] void refuse_format(engine::CheckpointFormat format) {
  throw NotSupportedError(kComponent, fmt::format("format {} is not a Hugging Face format we convert (llama, mistral, "
                                                  "qwen2, mixtral)",
                                                  config::enum_name(format)));
}

GPTBaseModelConfig validated_base_model(const YAML::Node& node, const std::string& where) {
  GPTBaseModelConfig config;
  try {
    config.load(node, "model.base_model");
    config.validate("model.base_model");
  } catch (const ConfigError& error) {
    throw Error(kComponent, fmt::format("{}: the imported model config is invalid: {}", where, error.what()));
  }
  return config;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// YAML paths

YAML::Node yaml_at(const YAML::Node& root, std::string_view path) {
  YAML::Node current = YAML::Clone(root);
  for (const std::string& part : split_path(path)) {
    if (!current || !current.IsMap()) return YAML::Node();
    const YAML::Node& constant = current;
    YAML::Node child = constant[part];
    if (!child) return YAML::Node();
    current.reset(child);
  }
  return current;
}

void yaml_set(YAML::Node& root, std::string_view path, const YAML::Node& value) {
  if (!root || !root.IsMap()) root = YAML::Node(YAML::NodeType::Map);
  const std::vector<std::string> parts = split_path(path);
  YAML::Node node = root;
  for (size_t index = 0; index + 1 < parts.size(); ++index) {
    YAML::Node child = node[parts[index]];
    if (!child || !child.IsMap()) {
      node[parts[index]] = YAML::Node(YAML::NodeType::Map);
      child = node[parts[index]];
    }
    node.reset(child);
  }
  node[parts.back()] = value;
}

// ---------------------------------------------------------------------------------------------------------------
// Table entries

HfConfigEntry hf_rename(std::string key, std::vector<std::string> paths, HfValueType type,
                        nlohmann::json default_value) {
  return {.kind = HfConfigEntry::Kind::rename,
          .hf_keys = {std::move(key)},
          .paths = std::move(paths),
          .type = type,
          .value = std::move(default_value)};
}

HfConfigEntry hf_constant_field(std::string path, nlohmann::json value) {
  return {.kind = HfConfigEntry::Kind::constant, .paths = {std::move(path)}, .value = std::move(value)};
}

HfConfigEntry hf_fixed_key(std::string key, nlohmann::json value, bool write) {
  return {.kind = HfConfigEntry::Kind::hf_constant, .hf_keys = {std::move(key)}, .value = std::move(value),
          .write = write};
}

HfConfigEntry hf_ignored(std::vector<std::string> keys) {
  return {.kind = HfConfigEntry::Kind::ignored, .hf_keys = std::move(keys)};
}

HfConfigEntry hf_custom(std::vector<std::string> keys, std::function<void(const nlohmann::json&, YAML::Node&)> import,
                        std::function<void(const YAML::Node&, nlohmann::ordered_json&)> export_) {
  return {.kind = HfConfigEntry::Kind::custom,
          .hf_keys = std::move(keys),
          .import = std::move(import),
          .export_ = std::move(export_)};
}

// ---------------------------------------------------------------------------------------------------------------
// Formats

const HfFormat& hf_format(engine::CheckpointFormat format) {
  switch (format) {
    case engine::CheckpointFormat::llama: return llama_format();
    case engine::CheckpointFormat::mistral: return mistral_format();
    case engine::CheckpointFormat::qwen2: return qwen2_format();
    case engine::CheckpointFormat::mixtral: return mixtral_format();
    default: refuse_format(format);
  }
}

const HfFormat* hf_format_for_model_type(std::string_view model_type) {
  for (const HfFormat* format : {&llama_format(), &mistral_format(), &qwen2_format(), &mixtral_format()})
    if (format->model_type == model_type) return format;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------------------------
// Config

YAML::Node import_hf_config(const HfFormat& format, const nlohmann::json& hf, const std::string& where) {
  FLM_CHECK(hf.is_object(), kComponent, "{}: not a JSON object", where);
  YAML::Node model(YAML::NodeType::Map);
  // model_type and architectures name the format and the head: they must be this format's.
  std::set<std::string> consumed{"model_type", "architectures"};
  if (hf.contains("model_type") && hf["model_type"] != format.model_type)
    throw Error(kComponent, fmt::format("{}: model_type is {}, not \"{}\"", where, hf["model_type"].dump(),
                                        format.model_type));
  if (hf.contains("architectures") && !hf["architectures"].is_null() &&
      hf["architectures"] != nlohmann::json::array({format.architecture}))
    throw NotSupportedError(kComponent, fmt::format("{}: architectures is {}; the {} converter reads [\"{}\"] only", where,
                                                    hf["architectures"].dump(), config::enum_name(format.format),
                                                    format.architecture));
  for (const HfConfigEntry& entry : format.config) {
    consumed.insert(entry.hf_keys.begin(), entry.hf_keys.end());
    try {
      switch (entry.kind) {
        case HfConfigEntry::Kind::rename: {
          const std::string& key = entry.hf_keys.front();
          nlohmann::json value = hf.contains(key) ? hf[key] : entry.value;
          if (value.is_null() && !hf.contains(key))
            throw Error(kComponent, fmt::format("{}: `{}` is missing", where, key));
          const bool type_ok = value.is_null() || (entry.type == HfValueType::integer && value.is_number_integer()) ||
                               (entry.type == HfValueType::number && value.is_number()) ||
                               (entry.type == HfValueType::boolean && value.is_boolean()) ||
                               (entry.type == HfValueType::string && value.is_string());
          if (!type_ok)
            throw Error(kComponent, fmt::format("{}: `{}` has the wrong type: {}", where, key, value.dump()));
          for (const std::string& path : entry.paths) yaml_set(model, path, json_to_yaml(value));
          break;
        }
        case HfConfigEntry::Kind::constant:
          yaml_set(model, entry.paths.front(), json_to_yaml(entry.value));
          break;
        case HfConfigEntry::Kind::hf_constant: {
          const std::string& key = entry.hf_keys.front();
          if (hf.contains(key) && !same_value(hf[key], entry.value))
            throw NotSupportedError(kComponent, fmt::format("{}: `{}` is {}; the {} format supports only {}", where,
                                                            key, hf[key].dump(), config::enum_name(format.format),
                                                            entry.value.dump()));
          break;
        }
        case HfConfigEntry::Kind::ignored: break;
        case HfConfigEntry::Kind::custom: entry.import(hf, model); break;
      }
    } catch (const nlohmann::json::exception& error) {
      throw Error(kComponent, fmt::format("{}: `{}`: {}", where, fmt::join(entry.hf_keys, "`, `"), error.what()));
    }
  }
  for (auto item = hf.begin(); item != hf.end(); ++item)
    if (!consumed.contains(item.key()))
      throw NotSupportedError(kComponent, fmt::format("{}: `{}` ({}) is not supported by the {} converter: it is "
                                                      "neither mapped to the model nor known to leave it unchanged",
                                                      where, item.key(), item.value().dump(),
                                                      config::enum_name(format.format)));
  return model;
}

nlohmann::ordered_json export_hf_config(const HfFormat& format, const GPTBaseModelConfig& config, DType data_type) {
  FLM_ASSERT(config.validated(), "exporting a config that was not validated");
  const YAML::Node model = config.to_yaml(config::WriteOptions{.verbose = config::kVerboseEverything});
  const std::string format_name(config::enum_name(format.format));
  nlohmann::ordered_json hf = nlohmann::ordered_json::object();
  hf["architectures"] = {format.architecture};
  hf["model_type"] = format.model_type;
  // Constants first: a model of another shape fails on the field that says so, not on a missing path below it.
  for (const HfConfigEntry& entry : format.config) {
    if (entry.kind != HfConfigEntry::Kind::constant) continue;
    const std::string& path = entry.paths.front();
    const YAML::Node actual = yaml_at(model, path);
    const std::string expected = flow(json_to_yaml(entry.value));
    if (flow(actual) != expected)
      throw NotSupportedError(kComponent, fmt::format("the {} format needs {} = {}, the model has {}", format_name,
                                                      config.field_path(path), expected, flow(actual)));
  }
  for (const HfConfigEntry& entry : format.config) {
    switch (entry.kind) {
      case HfConfigEntry::Kind::rename: {
        const std::string& key = entry.hf_keys.front();
        nlohmann::json value;
        for (size_t index = 0; index < entry.paths.size(); ++index) {
          nlohmann::json next = yaml_to_json(yaml_at(model, entry.paths[index]), entry.type,
                                             config.field_path(entry.paths[index]));
          if (index > 0 && next != value)
            throw NotSupportedError(kComponent,
                                    fmt::format("the {} format has one `{}` for {} and {}, which differ ({} != {})",
                                                format_name, key, config.field_path(entry.paths[0]),
                                                config.field_path(entry.paths[index]), value.dump(), next.dump()));
          value = std::move(next);
        }
        hf[key] = value;
        break;
      }
      case HfConfigEntry::Kind::hf_constant:
        if (entry.write) hf[entry.hf_keys.front()] = entry.value;
        break;
      case HfConfigEntry::Kind::custom: entry.export_(model, hf); break;
      case HfConfigEntry::Kind::constant:
      case HfConfigEntry::Kind::ignored: break;
    }
  }
  hf["torch_dtype"] = std::string(dtype_name(data_type));
  hf["dtype"] = std::string(dtype_name(data_type));

  // Fields outside the architecture that still change what the exported model computes.
  if (config.head.logits_scale_factor != 1.0)
    throw NotSupportedError(kComponent, fmt::format("the {} format has no logits scale: {} must be 1, got {}",
                                                    format_name, config.head.field_path("logits_scale_factor"),
                                                    config.head.logits_scale_factor));

  // Coverage: the written config must read back as the same architecture.
  const nlohmann::json plain = nlohmann::json::parse(hf.dump());
  GPTBaseModelConfig reread = validated_base_model(import_hf_config(format, plain, "the exported config.json"),
                                                   "the exported config.json");
  std::vector<std::string> differences = config::compare_architecture(config, reread);
  if (!differences.empty())
    throw NotSupportedError(kComponent, fmt::format("the {} format cannot represent this model (model value != what "
                                                    "the format holds):\n  {}",
                                                    format_name, fmt::join(differences, "\n  ")));
  return hf;
}

// ---------------------------------------------------------------------------------------------------------------
// Weights

std::shared_ptr<engine::TensorSource> import_hf_weights(const HfFormat& format,
                                                        std::shared_ptr<const engine::TensorSource> hf,
                                                        const GPTBaseModelConfig& config) {
  auto result = std::make_shared<engine::TensorList>(hf->describe());
  std::set<std::string> used;
  std::optional<int64_t> experts;
  const std::vector<HfWeightEntry>* entries = &format.weights;
  if (!format.import_spelling.empty())
    for (const std::string& name : hf->names())
      if (match_pattern(format.import_spelling_marker, name)) entries = &format.import_spelling;
  for (const auto& [parameter, shape] : model_parameters(config)) {
    const auto [entry, index] = weight_entry(format, parameter, entries);
    std::vector<std::string> names;
    if (is_expert_kind(entry->kind)) {
      if (!experts) experts = mixture_experts(config);
      // Expert by expert, each expert's parts in order: the order of the fused parameter's rows.
      for (int64_t expert = 0; expert < *experts; ++expert)
        for (const std::string& pattern : entry->hf) names.push_back(fill_expert_pattern(pattern, index, expert));
    } else {
      for (const std::string& pattern : entry->hf) names.push_back(fill_pattern(pattern, index));
    }
    std::vector<engine::TensorSpec> specs;
    for (const std::string& name : names) {
      if (!hf->contains(name))
        throw Error(kComponent, fmt::format("{}: tensor '{}' (for {}) is missing", hf->describe(), name, parameter));
      specs.push_back(hf->spec(name));
      used.insert(name);
    }
    // The shape the Hugging Face tensors give once transformed.
    Shape composed = specs.front().shape;
    std::string expectation;
    switch (entry->kind) {
      case HfWeightEntry::Kind::copy: break;
      case HfWeightEntry::Kind::transpose:
        if (composed.rank() == 2) composed = Shape{composed[1], composed[0]};
        break;
      // Stacked experts must be the model's experts (not only the same element count): otherwise the rank-3 shape
      // stays as it is and is reported below.
      case HfWeightEntry::Kind::expert_stacked:
        if (!experts) experts = mixture_experts(config);
        if (composed.rank() == 3 && composed[0] == *experts) composed = Shape{composed[0] * composed[1], composed[2]};
        break;
      case HfWeightEntry::Kind::expert_stacked_transpose:
        if (!experts) experts = mixture_experts(config);
        if (composed.rank() == 3 && composed[0] == *experts) composed = Shape{composed[0] * composed[2], composed[1]};
        break;
      case HfWeightEntry::Kind::concatenate:
      case HfWeightEntry::Kind::expert_concatenate:
      case HfWeightEntry::Kind::expert_transpose:
        for (size_t part = 1; part < specs.size(); ++part) {
          if (specs[part].dtype != specs[0].dtype)
            throw Error(kComponent, fmt::format("{}: '{}' is {} but '{}' is {}", hf->describe(), names[part],
                                                dtype_name(specs[part].dtype), names[0], dtype_name(specs[0].dtype)));
          if (!(specs[part].shape == specs[0].shape))
            throw Error(kComponent, fmt::format("{}: '{}' has shape {} but '{}' has shape {}", hf->describe(),
                                                names[part], specs[part].shape.str(), names[0],
                                                specs[0].shape.str()));
        }
        if (entry->kind == HfWeightEntry::Kind::expert_transpose && composed.rank() == 2)
          composed = Shape{composed[1], composed[0]};
        if (composed.rank() > 0) composed[0] *= int64_t(specs.size());
        break;
    }
    if (!(composed == shape)) {
      std::vector<std::string> described;
      for (size_t part = 0; part < names.size(); ++part)
        described.push_back(fmt::format("'{}' {}", names[part], specs[part].shape.str()));
      throw Error(kComponent, fmt::format("{}: {} give {} a shape of {}, the model (from config.json) needs {}",
                                          hf->describe(), fmt::join(described, " and "), parameter, composed.str(),
                                          shape.str()));
    }
    const DType dtype = specs.front().dtype;
    const HfWeightEntry::Kind kind = entry->kind;
    // `shape = shape`: clang refuses to capture a structured binding in a file built with OpenMP.
    result->add(engine::state_key(parameter, engine::kWeightsShard), {dtype, shape},
                [hf, names, kind, shape = shape, dtype] {
      switch (kind) {
        case HfWeightEntry::Kind::copy: return hf->load(names.front());
        case HfWeightEntry::Kind::transpose: return hf->load(names.front()).transpose(0, 1).to(Device::cpu());
        case HfWeightEntry::Kind::expert_stacked: return hf->load(names.front()).to(Device::cpu()).reshape(shape);
        case HfWeightEntry::Kind::expert_stacked_transpose: {
          const Tensor stacked = hf->load(names.front());
          Tensor fused = Tensor::empty(shape, dtype);
          const int64_t rows = stacked.size(2);
          for (int64_t expert = 0; expert < stacked.size(0); ++expert)
            fused.slice(0, expert * rows, (expert + 1) * rows)
                .copy_bytes_from(stacked.select(0, expert).transpose(0, 1).to(Device::cpu()));
          return fused;
        }
        case HfWeightEntry::Kind::concatenate:
        case HfWeightEntry::Kind::expert_concatenate:
        case HfWeightEntry::Kind::expert_transpose: {
          // One part at a time into the fused parameter.
          Tensor fused = Tensor::empty(shape, dtype);
          int64_t row = 0;
          for (const std::string& name : names) {
            Tensor part = hf->load(name);
            if (kind == HfWeightEntry::Kind::expert_transpose) part = part.transpose(0, 1).to(Device::cpu());
            fused.slice(0, row, row + part.size(0)).copy_bytes_from(part);
            row += part.size(0);
          }
          return fused;
        }
      }
      return Tensor();
    });
  }
  for (const std::string& name : hf->names()) {
    if (used.contains(name)) continue;
    bool ignorable = false;
    for (const std::string& pattern : format.ignored_tensors) ignorable = ignorable || match_pattern(pattern, name);
    // A tied model ignores a saved lm_head (transformers re-ties it to the embeddings on load).
    if (config.tied_embedding_weight && name == "lm_head.weight") ignorable = true;
    if (!ignorable)
      throw Error(kComponent, fmt::format("{}: tensor '{}' is not part of a {} model with this config.json",
                                          hf->describe(), name, config::enum_name(format.format)));
  }
  return result;
}

std::shared_ptr<engine::TensorSource> export_hf_weights(const HfFormat& format,
                                                        std::shared_ptr<const engine::TensorSource> state,
                                                        const GPTBaseModelConfig& config) {
  auto result = std::make_shared<engine::TensorList>(
      fmt::format("{} as {}", state->describe(), config::enum_name(format.format)));
  auto cache = std::make_shared<FusedParameterCache>();
  std::optional<int64_t> experts;
  for (const auto& [parameter, shape] : model_parameters(config)) {
    const auto [entry, index] = weight_entry(format, parameter);
    const std::string key = engine::state_key(parameter, engine::kWeightsShard);
    if (!state->contains(key))
      throw Error(kComponent, fmt::format("{}: no tensor '{}' for parameter {}", state->describe(), key, parameter));
    const engine::TensorSpec spec = state->spec(key);
    if (!(spec.shape == shape))
      throw Error(kComponent, fmt::format("{}: tensor '{}' has shape {}, the model's parameter has shape {}",
                                          state->describe(), key, spec.shape.str(), shape.str()));
    switch (entry->kind) {
      case HfWeightEntry::Kind::copy:
        result->add(fill_pattern(entry->hf.front(), index), spec, [state, key] { return state->load(key); });
        break;
      case HfWeightEntry::Kind::transpose:
        result->add(fill_pattern(entry->hf.front(), index), {spec.dtype, Shape{shape[1], shape[0]}},
                    [state, key] { return state->load(key).transpose(0, 1).to(Device::cpu()); });
        break;
      case HfWeightEntry::Kind::concatenate: {
        const int64_t parts = int64_t(entry->hf.size());
        FLM_CHECK(shape[0] % parts == 0, kComponent, "{}: parameter {} of shape {} does not split in {}",
                  state->describe(), parameter, shape.str(), parts);
        Shape part_shape = shape;
        part_shape[0] = shape[0] / parts;
        for (int64_t part = 0; part < parts; ++part) {
          const int64_t rows = part_shape[0];
          result->add(fill_pattern(entry->hf[size_t(part)], index), {spec.dtype, part_shape},
                      [state, key, part, rows] {
                        Tensor fused = state->load(key);
                        Tensor slice = fused.slice(0, part * rows, (part + 1) * rows);
                        Tensor copy = Tensor::empty(slice.shape(), slice.dtype());
                        copy.copy_bytes_from(slice);
                        return copy;
                      });
        }
        break;
      }
      case HfWeightEntry::Kind::expert_stacked:
      case HfWeightEntry::Kind::expert_stacked_transpose:
        throw InternalError(kComponent, fmt::format("the {} format's weights use an import-only spelling for {}",
                                                    config::enum_name(format.format), parameter));
      case HfWeightEntry::Kind::expert_concatenate:
      case HfWeightEntry::Kind::expert_transpose: {
        if (!experts) experts = mixture_experts(config);
        const bool transposed = entry->kind == HfWeightEntry::Kind::expert_transpose;
        const int64_t parts = int64_t(entry->hf.size()), pieces = *experts * parts;
        FLM_CHECK(shape.rank() == 2 && shape[0] % pieces == 0, kComponent,
                  "{}: parameter {} of shape {} does not split in {} experts x {} parts", state->describe(), parameter,
                  shape.str(), *experts, parts);
        const int64_t rows = shape[0] / pieces;
        const Shape part_shape = transposed ? Shape{shape[1], rows} : Shape{rows, shape[1]};
        for (int64_t expert = 0; expert < *experts; ++expert)
          for (int64_t part = 0; part < parts; ++part) {
            const int64_t begin = (expert * parts + part) * rows;
            result->add(fill_expert_pattern(entry->hf[size_t(part)], index, expert), {spec.dtype, part_shape},
                        [state, key, cache, begin, rows, transposed] {
                          Tensor slice = cache->get(*state, key).slice(0, begin, begin + rows);
                          if (transposed) return slice.transpose(0, 1).to(Device::cpu());
                          Tensor copy = Tensor::empty(slice.shape(), slice.dtype());
                          copy.copy_bytes_from(slice);
                          return copy;
                        });
          }
        break;
      }
    }
  }
  return result;
}

HfTensorNames hf_tensor_names(const HfFormat& format, const std::string& parameter) {
  const auto [entry, index] = weight_entry(format, parameter);
  HfTensorNames result{.transposed = entry->kind == HfWeightEntry::Kind::transpose};
  switch (entry->kind) {
    case HfWeightEntry::Kind::copy:
    case HfWeightEntry::Kind::transpose:
    case HfWeightEntry::Kind::concatenate:
      for (const std::string& pattern : entry->hf) result.names.push_back(fill_pattern(pattern, index));
      return result;
    default:
      throw NotSupportedError(kComponent, fmt::format("the {} format stores parameter {} per expert",
                                                      config::enum_name(format.format), parameter));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Checkpoints

HuggingfaceCheckpoint read_huggingface_checkpoint(const std::filesystem::path& directory,
                                                  engine::CheckpointFormat format, bool open_weights) {
  const std::filesystem::path config_path = directory / "config.json";
  if (engine::file_type_of(config_path, kComponent) == std::filesystem::file_type::not_found)
    throw Error(kComponent, fmt::format("{}: no config.json (not a Hugging Face checkpoint?)", directory.string()));
  HuggingfaceCheckpoint result;
  try {
    result.config_json = nlohmann::json::parse(engine::read_text_file(config_path, kComponent));
  } catch (const nlohmann::json::exception& error) {
    throw Error(kComponent, fmt::format("{}: not valid JSON: {}", config_path.string(), error.what()));
  }
  const nlohmann::json& hf = result.config_json;
  if (!hf.is_object() || !hf.contains("model_type") || !hf["model_type"].is_string())
    throw Error(kComponent, fmt::format("{}: no `model_type`", config_path.string()));
  const std::string model_type = hf["model_type"].get<std::string>();
  if (format == engine::CheckpointFormat::auto_) {
    result.format = hf_format_for_model_type(model_type);
    if (result.format == nullptr)
      throw NotSupportedError(kComponent, fmt::format("{}: model_type '{}' is not supported (supported: llama, "
                                                      "mistral, qwen2, mixtral)",
                                                      config_path.string(), model_type));
  } else {
    result.format = &hf_format(format);
    if (model_type != result.format->model_type)
      throw Error(kComponent, fmt::format("{}: model_type is '{}', not '{}' as format {} expects", config_path.string(),
                                          model_type, result.format->model_type, config::enum_name(format)));
  }
  result.base_model = import_hf_config(*result.format, hf, config_path.string());
  if (open_weights) result.tensors = engine::SafetensorsSet::open_huggingface(directory);
  return result;
}

void write_huggingface_checkpoint(const std::filesystem::path& directory, engine::CheckpointFormat format,
                                  const GPTBaseModelConfig& config, std::shared_ptr<const engine::TensorSource> state,
                                  std::optional<DType> data_type, int64_t parameters_per_file) {
  const HfFormat& table = hf_format(format);
  if (has_lora(config))
    return write_huggingface_checkpoint(directory, format, without_peft(config), merge_lora_adapters(state, config),
                                        data_type, parameters_per_file);
  // The config first: a model the format cannot hold (e.g. a mixture of experts as llama) is refused naming the fields
  // that say so, rather than the first parameter without a Hugging Face name.
  export_hf_config(table, config, data_type.value_or(DType::float32));
  std::shared_ptr<const engine::TensorSource> weights = export_hf_weights(table, state, config);
  DType dtype = weights->names().empty() ? DType::float32 : weights->spec(weights->names().front()).dtype;
  if (data_type) {
    weights = engine::convert_source(weights, *data_type);
    dtype = *data_type;
  }
  const nlohmann::ordered_json hf = export_hf_config(table, config, dtype);
  engine::write_safetensors_set(directory, *weights, weights->names(), parameters_per_file,
                                engine::SafetensorsSetLayout::huggingface, {{"format", "pt"}});
  write_file(directory / "config.json", hf.dump(2) + '\n', {.component = kComponent});
}

// ---------------------------------------------------------------------------------------------------------------
// The checkpoint engine's handlers

namespace {

class HuggingfaceHandler : public engine::ExternalCheckpointHandler {
 public:
  explicit HuggingfaceHandler(engine::CheckpointFormat format) : format_(format) {}

  std::string_view description() const override { return "Hugging Face"; }

  YAML::Node read_base_model_config(const std::filesystem::path& directory) const override {
    return read_huggingface_checkpoint(directory, format_, false).base_model;
  }

  std::shared_ptr<engine::TensorSource> open_weights(const std::filesystem::path& directory,
                                                     const config::Config& base_model) const override {
    HuggingfaceCheckpoint checkpoint = read_huggingface_checkpoint(directory, format_, true);
    const GPTBaseModelConfig& model = gpt_config(base_model);
    // A dense checkpoint loaded into a mixture of experts: every expert a copy of its MLP (upcycling.h).
    GPTBaseModelConfig stored = validated_base_model(checkpoint.base_model, (directory / "config.json").string());
    if (is_upcycling(stored, model))
      return upcycle_weights(import_hf_weights(*checkpoint.format, checkpoint.tensors, stored), stored, model);
    return import_hf_weights(*checkpoint.format, checkpoint.tensors, model);
  }

  void check_writable(const config::Config& base_model, DType data_type) const override {
    const GPTBaseModelConfig& model = gpt_config(base_model);
    export_hf_config(hf_format(format_), has_lora(model) ? without_peft(model) : model, data_type);
  }

  void check_adapter_writable(const config::Config& base_model) const override {
    check_peft_adapter_writable(hf_format(format_), gpt_config(base_model));
  }

  void write_adapter(const std::filesystem::path& directory, const config::Config& base_model,
                     std::shared_ptr<const engine::TensorSource> state,
                     const std::optional<std::filesystem::path>& base_model_path) const override {
    write_peft_adapter(directory, hf_format(format_), gpt_config(base_model), std::move(state), base_model_path);
  }

  void write(const std::filesystem::path& directory, const config::Config& base_model,
             std::shared_ptr<const engine::TensorSource> state, int64_t parameters_per_file) const override {
    write_huggingface_checkpoint(directory, format_, gpt_config(base_model), std::move(state), std::nullopt,
                                 parameters_per_file);
  }

 private:
  // The engine hands back the base model of a GPTModelConfig.
  static const GPTBaseModelConfig& gpt_config(const config::Config& base_model) {
    return dynamic_cast<const GPTBaseModelConfig&>(base_model);
  }

  engine::CheckpointFormat format_;
};

}  // namespace

const engine::ExternalCheckpointHandler& huggingface_handler(engine::CheckpointFormat format) {
  static const HuggingfaceHandler llama(engine::CheckpointFormat::llama), mistral(engine::CheckpointFormat::mistral),
      qwen2(engine::CheckpointFormat::qwen2), mixtral(engine::CheckpointFormat::mixtral),
      automatic(engine::CheckpointFormat::auto_);
  switch (format) {
    case engine::CheckpointFormat::llama: return llama;
    case engine::CheckpointFormat::mistral: return mistral;
    case engine::CheckpointFormat::qwen2: return qwen2;
    case engine::CheckpointFormat::mixtral: return mixtral;
    case engine::CheckpointFormat::auto_: return automatic;
    default: refuse_format(format);
  }
}

}  // namespace fast_llm::models::gpt
