// The Llama family's shared tables (llama.cpp), which the mistral, qwen2 and mixtral formats start from and change.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fast_llm/models/gpt/conversion/huggingface.h"

namespace fast_llm::models::gpt {

// Hugging Face's defaults of the fields a format's config class gives its own default.
struct LlamaFamilyDefaults {
  int64_t vocab_size = 32000;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
};

// Config entries every member of the family has: sizes, heads, activation, RMS norms, rotary (rope_theta /
// rope_scaling / rope_parameters: default, llama3, yarn), tied embeddings, attention dropout, and the keys that do not
// change the model. Biases, head_dim and sliding windows differ by format and are added by each.
std::vector<HfConfigEntry> llama_family_config(const LlamaFamilyDefaults& defaults);
// head_dim <-> head_size (absent or null: hidden_size / num_attention_heads).
HfConfigEntry llama_head_dim_entry();
// A format without sliding windows refuses a model that has one.
HfConfigEntry no_sliding_window_entry(std::string format_name);
// Mistral's `sliding_window` (and transformers 5's `layer_types`, one kind for every layer) <-> the attention's
// window_size; `default_window` is the format's value when the key is absent (4096 for Mistral, none for Mixtral).
HfConfigEntry sliding_window_entry(std::optional<int64_t> default_window);
// Weight entries of the family (all share the Hugging Face names; mixtral replaces the MLP's).
std::vector<HfWeightEntry> llama_family_weights();
// Tensors of old exports that hold nothing the model needs.
std::vector<std::string> llama_family_ignored_tensors();

}  // namespace fast_llm::models::gpt
