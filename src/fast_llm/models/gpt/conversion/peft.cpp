// LoRA adapters in Hugging Face exports: merged into the base weights, or alone in PEFT's files (peft.h).
#include "fast_llm/models/gpt/conversion/peft.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/core/file_writer.h"
#include "fast_llm/engine/checkpoint/safetensors.h"
#include "fast_llm/models/gpt/model.h"

namespace fast_llm::models::gpt {
namespace {

constexpr std::string_view kComponent = "huggingface";

// What the export needs of one adapted linear layer (layers/common/linear.h), copied out of the model.
struct Adapter {
  std::string weight, lora_0, lora_1;  // state keys (P/weights)
  int64_t input_size = 0, output_size = 0;
  int rank = 0;
  int64_t begin = 0, end = 0;  // the adapted output features
  bool transposed = false;     // W [input, output], A [input, rank], B [rank, end - begin]
  double scale = 1.0;          // alpha / rank
};

std::vector<Adapter> adapters_of(const GPTBaseModelConfig& config) {
  GPTModel model(config);
  std::vector<Adapter> result;
  for (layers::Linear* linear : model.lora_linears()) {
    const layers::LoraOptions& lora = *linear->lora();
    auto key = [](const layers::Parameter* parameter) {
      return engine::state_key(parameter->meta.name, engine::kWeightsShard);
    };
    result.push_back({.weight = key(&linear->weight()),
                      .lora_0 = key(linear->lora_0()),
                      .lora_1 = key(linear->lora_1()),
                      .input_size = linear->input_size(),
                      .output_size = linear->output_size(),
                      .rank = lora.rank,
                      .begin = lora.begin,
                      .end = lora.end,
                      .transposed = linear->transposed_weight(),
                      .scale = lora.alpha / double(lora.rank)});
  }
  return result;
}

// `key` of `state` on the host in fp64, checked against the shape the model gives it.
Tensor load_fp64(const engine::TensorSource& state, const std::string& key, const Shape& shape) {
  if (!state.contains(key)) throw Error(kComponent, fmt::format("{}: no tensor '{}'", state.describe(), key));
  Tensor tensor = engine::to_host_dtype(state.load(key), DType::float64);
  FLM_CHECK(tensor.shape() == shape, kComponent, "{}: tensor '{}' has shape {}, the model's has shape {}",
            state.describe(), key, tensor.shape().str(), shape.str());
  return tensor;
}

Shape lora_0_shape(const Adapter& adapter) {
  return adapter.transposed ? Shape{adapter.input_size, adapter.rank} : Shape{adapter.rank, adapter.input_size};
}
Shape lora_1_shape(const Adapter& adapter) {
  const int64_t rows = adapter.end - adapter.begin;
  return adapter.transposed ? Shape{adapter.rank, rows} : Shape{rows, adapter.rank};
}

// A[r, i] and B[o - begin, r] of the adapter whatever its storage.
struct AdapterValues {
  const Adapter& adapter;
  Tensor lora_0, lora_1;
  double a(int64_t r, int64_t i) const {
    const double* data = lora_0.data_as<double>();
    return adapter.transposed ? data[i * adapter.rank + r] : data[r * adapter.input_size + i];
  }
  double b(int64_t o, int64_t r) const {
    const double* data = lora_1.data_as<double>();
    const int64_t row = o - adapter.begin, rows = adapter.end - adapter.begin;
    return adapter.transposed ? data[r * rows + row] : data[row * adapter.rank + r];
  }
};

AdapterValues load_adapter(const engine::TensorSource& state, const Adapter& adapter) {
  return {adapter, load_fp64(state, adapter.lora_0, lora_0_shape(adapter)),
          load_fp64(state, adapter.lora_1, lora_1_shape(adapter))};
}

}  // namespace

bool has_lora(const GPTBaseModelConfig& config) { return config.peft.is<layers::LoraConfig>(); }

GPTBaseModelConfig without_peft(const GPTBaseModelConfig& config) {
  YAML::Node node = config.to_yaml(config::WriteOptions{.explicit_only = true});
  node["peft"] = YAML::Load("{type: none}");
  GPTBaseModelConfig result;
  result.load(node, "model.base_model");
  result.validate("model.base_model");
  return result;
}

std::shared_ptr<engine::TensorSource> merge_lora_adapters(std::shared_ptr<const engine::TensorSource> state,
                                                          const GPTBaseModelConfig& config) {
  auto result =
      std::make_shared<engine::TensorList>(fmt::format("{} with its LoRA adapters merged", state->describe()));
  std::map<std::string, Adapter> adapted;
  for (Adapter& adapter : adapters_of(config)) adapted.emplace(adapter.weight, std::move(adapter));
  GPTModel model(config);
  for (layers::Layer* layer : model.layers()) {
    for (layers::Parameter* parameter : layer->parameters()) {
      if (parameter->meta.peft) continue;
      const std::string key = engine::state_key(parameter->meta.name, engine::kWeightsShard);
      if (!state->contains(key))
        throw Error(kComponent, fmt::format("{}: no tensor '{}' for parameter {}", state->describe(), key,
                                            parameter->meta.name));
      const engine::TensorSpec spec = state->spec(key);
      auto found = adapted.find(key);
      if (found == adapted.end()) {
        result->add(key, spec, [state, key] { return state->load(key); });
        continue;
      }
      // W + scale * B A on the adapted rows (columns of a transposed weight), in fp64, back to W's dtype.
      result->add(key, spec, [state, adapter = found->second, shape = parameter->meta.shape, spec] {
        Tensor merged = load_fp64(*state, adapter.weight, shape);
        const AdapterValues values = load_adapter(*state, adapter);
        double* weight = merged.data_as<double>();
        for (int64_t o = adapter.begin; o < adapter.end; ++o)
          for (int64_t i = 0; i < adapter.input_size; ++i) {
            double update = 0.0;
            for (int64_t r = 0; r < adapter.rank; ++r) update += values.b(o, r) * values.a(r, i);
            weight[adapter.transposed ? i * adapter.output_size + o : o * adapter.input_size + i] +=
                adapter.scale * update;
          }
        return engine::to_host_dtype(merged, spec.dtype);
      });
    }
  }
  return result;
}

void check_peft_adapter_writable(const HfFormat& format, const GPTBaseModelConfig& config) {
  if (!has_lora(config))
    throw NotSupportedError(kComponent, fmt::format("{}: the model has no adapters to write as PEFT files (peft: "
                                                    "adapter needs peft.type: lora)",
                                                    config.field_path("peft")));
  for (const Adapter& adapter : adapters_of(config))
    hf_tensor_names(format, adapter.weight.substr(0, adapter.weight.rfind('/')));
}

void write_peft_adapter(const std::filesystem::path& directory, const HfFormat& format,
                        const GPTBaseModelConfig& config, std::shared_ptr<const engine::TensorSource> state,
                        const std::optional<std::filesystem::path>& base_model_path) {
  check_peft_adapter_writable(format, config);
  const auto& lora = dynamic_cast<const layers::LoraConfig&>(config.peft.get());
  std::vector<engine::SafetensorsEntry> entries;
  std::set<std::string> target_modules;
  for (const Adapter& adapter : adapters_of(config)) {
    const HfTensorNames hf = hf_tensor_names(format, adapter.weight.substr(0, adapter.weight.rfind('/')));
    const DType dtype = state->spec(adapter.lora_0).dtype;
    const int64_t parts = int64_t(hf.names.size()), rows = adapter.output_size / parts;
    for (int64_t part = 0; part < parts; ++part) {
      // The Hugging Face module's rows [first, first + rows) of the Fast-LLM weight; left out when no adapter row is.
      const int64_t first = part * rows;
      if (std::max(first, adapter.begin) >= std::min(first + rows, adapter.end)) continue;
      const std::string& name = hf.names[size_t(part)];
      const std::string module = name.substr(0, name.size() - std::string_view(".weight").size());
      target_modules.insert(module.substr(module.rfind('.') + 1));
      const std::string prefix = "base_model.model." + module;
      entries.push_back({.name = prefix + ".lora_A.weight",
                         .dtype = dtype,
                         .shape = Shape{adapter.rank, adapter.input_size},
                         .values = [state, adapter, dtype] {
                           const AdapterValues values = load_adapter(*state, adapter);
                           Tensor a = Tensor::empty(Shape{adapter.rank, adapter.input_size}, DType::float64);
                           double* data = a.data_as<double>();
                           for (int64_t r = 0; r < adapter.rank; ++r)
                             for (int64_t i = 0; i < adapter.input_size; ++i)
                               data[r * adapter.input_size + i] = values.a(r, i);
                           return engine::to_host_dtype(a, dtype);
                         }});
      entries.push_back({.name = prefix + ".lora_B.weight",
                         .dtype = dtype,
                         .shape = Shape{rows, adapter.rank},
                         .values = [state, adapter, dtype, first, rows] {
                           const AdapterValues values = load_adapter(*state, adapter);
                           Tensor b = Tensor::empty(Shape{rows, adapter.rank}, DType::float64);
                           double* data = b.data_as<double>();
                           for (int64_t row = 0; row < rows; ++row)
                             for (int64_t r = 0; r < adapter.rank; ++r) {
                               const int64_t o = first + row;
                               data[row * adapter.rank + r] =
                                   o >= adapter.begin && o < adapter.end ? values.b(o, r) : 0.0;
                             }
                           return engine::to_host_dtype(b, dtype);
                         }});
    }
  }
  engine::write_safetensors(directory / "adapter_model.safetensors", entries, {{"format", "pt"}});
  nlohmann::ordered_json adapter_config{
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"r", lora.rank},
      {"lora_alpha", lora.alpha},
      {"lora_dropout", lora.dropout},
      {"target_modules", std::vector<std::string>(target_modules.begin(), target_modules.end())},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"use_rslora", false},
      {"modules_to_save", nullptr},
      // The pretrained checkpoint a training run loaded; unknown to a conversion (null: set it by hand to load the
      // adapter with PEFT's AutoPeftModel).
      {"base_model_name_or_path", base_model_path ? nlohmann::json(std::filesystem::absolute(*base_model_path).string())
                                                  : nlohmann::json(nullptr)}};
  write_file(directory / "adapter_config.json", adapter_config.dump(2) + '\n', {.component = kComponent});
}

}  // namespace fast_llm::models::gpt
