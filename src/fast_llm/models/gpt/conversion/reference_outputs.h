// What a model loaded from a checkpoint computes on given token sequences, written to a safetensors file for checks
// against an independent implementation (tools/hf_check.py compares it with Hugging Face transformers). Reached
// through the hidden command `fast-llm model_outputs gpt pretrained.format=... pretrained.path=... tokens=...
// output=...`. Its config is read with the pretrained checkpoint's model config under it (engine/checkpoint/loading.h,
// load_config_with_pretrained).
//
// Input: `tokens`, a safetensors file with `tokens`, I64 (batch, sequence): each row is one document.
// Output (all F64):
//   logits           (batch, sequence, vocab): final_norm(hidden) . output_weights^T, from the compute-dtype
//                    activations and weights, accumulated in fp64
//   loss             (1): mean cross-entropy of tokens[:, 1:] given the positions before them (what the training step
//                    computes: Fast-LLM's normalisation over every label of the step)
//   grad.<name>      the gradient of that loss for each parameter, named as the checkpoint's format names it (Hugging
//                    Face names for llama/mistral/qwen2/mixtral, with k/v and gate/up split and down_proj transposed
//                    back, the experts one tensor each)
#pragma once

#include <filesystem>
#include <optional>

#include "fast_llm/config/config.h"
#include "fast_llm/engine/checkpoint/config.h"
#include "fast_llm/models/gpt/config.h"

namespace fast_llm::models::gpt {

struct ModelOutputsConfig : config::Config {
  engine::CheckpointLoadConfig pretrained;
  GPTModelConfig model;
  std::optional<std::filesystem::path> tokens;
  std::optional<std::filesystem::path> output;
  bool gradients = true;
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

void write_model_outputs(const ModelOutputsConfig& config);

}  // namespace fast_llm::models::gpt
