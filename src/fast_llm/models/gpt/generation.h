// `fast-llm generate`: text (or token ids) in, completions out, from a checkpoint of any format we load (fast_llm,
// distributed, llama / mistral / qwen2 / mixtral Hugging Face folders). Its config is read with the pretrained
// checkpoint's model config under it (engine/checkpoint/loading.h), so `pretrained: {format, path}` alone is enough;
// `model:` sets the numerics and device (model.distributed.compute_dtype, use_cuda). docs/generation.md is the user's page.
//
// Prompts: `prompts` (text, through the tokenizer, BOS/EOS as its post-processor adds them unless
// add_special_tokens is false), `prompt_ids` (token ids as given), and `prompts_file` (JSONL objects with `text` or
// `ids`, or plain text with one prompt per line), in that order; each gets an index in the run (which seeds its
// sampling). They are generated `batch_size` at a time (generator.h); with `stream` each is generated alone and its
// tokens are printed as they come. Output: each completion on stdout when its batch is done (the prompt's text, then
// the completion's, decoded with special tokens skipped; ids when there is no tokenizer), and with `output` a JSONL
// file of {index, prompt_ids, completion_ids, text}. A completion ends at max_new_tokens or at an end-of-sequence token:
// `eos_token_ids`, else those of the checkpoint folder's generation_config.json (`eos_token_id`, an id or a list, as
// transformers' generate takes them), else the tokenizer's EOS.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "fast_llm/config/config.h"
#include "fast_llm/engine/checkpoint/config.h"
#include "fast_llm/kernels/config.h"
#include "fast_llm/models/gpt/config.h"

namespace fast_llm::models::gpt {

struct GenerationTokenizerConfig : config::Config {
  std::optional<std::filesystem::path> path;
  void visit(config::Visitor& v) override;
};

struct GenerationConfig : config::Config {
  GenerationConfig();
  engine::CheckpointLoadConfig pretrained;
  GPTModelConfig model;
  GenerationTokenizerConfig tokenizer;
  std::vector<std::string> prompts;
  std::vector<std::vector<int64_t>> prompt_ids;
  std::optional<std::filesystem::path> prompts_file;
  bool add_special_tokens = true;
  int64_t max_new_tokens = 64;
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  int64_t seed = 0;
  int64_t batch_size = 8;
  bool stream = false;
  std::vector<int64_t> eos_token_ids;
  bool ignore_eos = false;
  std::optional<std::filesystem::path> output;
  kernels::KernelsConfig kernels;
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

// `tree` (a generation config tree) with `pretrained.format: auto` (also the default here, unlike training's
// fast_llm) made concrete for native checkpoints: a folder with a metadata.yaml takes the format it names (fast_llm or distributed); otherwise auto stays,
// which reads a Hugging Face folder's config.json (its model_type names the format).
YAML::Node with_native_format_resolved(YAML::Node tree);

// Loads the model and the tokenizer, generates every prompt and prints the completions to standard output (and writes
// them to config.output). The config must be validated.
void generate(const GenerationConfig& config);

}  // namespace fast_llm::models::gpt
