// LoRA adapters (`peft: lora`, layers/common/linear.h) in Hugging Face checkpoints, two ways (training.export.peft):
//   - merged: the base model's files (the format's config.json and safetensors, unchanged names), each adapted weight
//     replaced by W + (alpha / rank) * B A on the adapter's rows (computed in fp64, stored in W's dtype), so
//     transformers loads a plain model that computes what the model with adapters computes (without dropout);
//   - adapter: the adapters alone, in Hugging Face PEFT's files: adapter_config.json (peft_type LORA, r, lora_alpha,
//     lora_dropout, target_modules, task_type CAUSAL_LM, bias none, fan_in_fan_out false) and adapter_model.safetensors
//     with PEFT's names, `base_model.model.<module>.lora_A.weight` [r, in] and `.lora_B.weight` [out, r], <module>
//     the Hugging Face name of the weight without `.weight` (model.layers.N.self_attn.q_proj, ...). A fused Fast-LLM
//     weight (key_value, layer_1) maps to one module per part (k_proj / v_proj, gate_proj / up_proj), each with the
//     shared A and its rows of B (zeros where the adapter does not reach, e.g. k_proj when only the values are
//     adapted: such a module is left out); a transposed weight (layer_2) has A and B transposed back.
// Importing reads no adapters: a Hugging Face checkpoint is a base model, and the adapters of a model with LoRA start
// from their initialization (engine/checkpoint/state.h).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "fast_llm/engine/checkpoint/state.h"
#include "fast_llm/models/gpt/config.h"
#include "fast_llm/models/gpt/conversion/huggingface.h"

namespace fast_llm::models::gpt {

// Whether the model `config` describes has LoRA adapters.
bool has_lora(const GPTBaseModelConfig& config);
// `config` without its PEFT section (validated): the base model the merged export describes.
GPTBaseModelConfig without_peft(const GPTBaseModelConfig& config);
// `P/weights` of every non-adapter parameter of `state` (the model `config` describes), adapted weights merged.
std::shared_ptr<engine::TensorSource> merge_lora_adapters(std::shared_ptr<const engine::TensorSource> state,
                                                          const GPTBaseModelConfig& config);
// Throws NotSupportedError naming the field when the model has no adapters, or adapters `format` has no module for.
void check_peft_adapter_writable(const HfFormat& format, const GPTBaseModelConfig& config);
// Writes adapter_config.json and adapter_model.safetensors of the adapters of `state` into `directory`;
// base_model_name_or_path is `base_model_path` (absolute) when given, else null.
void write_peft_adapter(const std::filesystem::path& directory, const HfFormat& format,
                        const GPTBaseModelConfig& config, std::shared_ptr<const engine::TensorSource> state,
                        const std::optional<std::filesystem::path>& base_model_path = std::nullopt);

}  // namespace fast_llm::models::gpt
