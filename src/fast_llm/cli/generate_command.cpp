// `fast-llm generate [-c config.yaml] [a.b.c=value ...] [options]`: text generation from a checkpoint
// (models/gpt/generation.h; docs/generation.md). The options are shortcuts for config fields, applied after the file
// and the overrides: --pretrained PATH (pretrained.path), --format (pretrained.format, default auto), --prompt TEXT
// (repeatable: prompts), --prompt-ids 1,2,3 (repeatable: prompt_ids), --prompts-file, --max-new-tokens,
// --temperature, --top-k, --top-p, --seed, --batch-size, --stream, --ignore-eos, --tokenizer, --output, --dtype
// (model.distributed.compute_dtype), --cpu (model.distributed.use_cuda=false). Format auto (the default) also takes a
// native checkpoint (fast_llm, distributed) by its metadata.yaml.
#include <charconv>

#include "fast_llm/cli/commands.h"
#include "fast_llm/cli/config_loading.h"
#include "fast_llm/core/error.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/models/gpt/generation.h"
#include "fast_llm/models/gpt/model_type.h"

namespace fast_llm::cli {

namespace {

struct GenerateOptions {
  std::string config;
  bool validate = false;
  std::vector<std::string> overrides;
  std::optional<std::string> pretrained, format, prompts_file, tokenizer, output, dtype;
  std::vector<std::string> prompts, prompt_ids;
  std::optional<int64_t> max_new_tokens, top_k, seed, batch_size;
  std::optional<double> temperature, top_p;
  bool stream = false, cpu = false, ignore_eos = false;
};

// "1,2,3" (or spaces) as token ids.
YAML::Node parse_ids(const std::string& text) {
  YAML::Node ids(YAML::NodeType::Sequence);
  size_t position = 0;
  while (position < text.size()) {
    const size_t end = text.find_first_of(", ", position);
    const std::string piece = text.substr(position, end == std::string::npos ? std::string::npos : end - position);
    if (!piece.empty()) {
      int64_t id = 0;
      const auto [last, error] = std::from_chars(piece.data(), piece.data() + piece.size(), id);
      if (error != std::errc() || last != piece.data() + piece.size() || id < 0)
        throw Error("generate", fmt::format("--prompt-ids {}: `{}` is not a token id (a non-negative integer)", text,
                                            piece));
      ids.push_back(id);
    }
    if (end == std::string::npos) break;
    position = end + 1;
  }
  if (ids.size() == 0) throw Error("generate", fmt::format("--prompt-ids `{}` holds no token id", text));
  return ids;
}

// The config tree: file, overrides, then the options.
YAML::Node generation_tree(const GenerateOptions& options) {
  std::optional<std::filesystem::path> file;
  if (!options.config.empty()) file = options.config;
  YAML::Node tree = read_config_tree(file, options.overrides);
  if (!tree || tree.IsNull()) tree = YAML::Node(YAML::NodeType::Map);
  if (options.pretrained) tree["pretrained"]["path"] = *options.pretrained;
  if (options.format) tree["pretrained"]["format"] = *options.format;
  for (const std::string& prompt : options.prompts) tree["prompts"].push_back(prompt);
  for (const std::string& ids : options.prompt_ids) tree["prompt_ids"].push_back(parse_ids(ids));
  if (options.prompts_file) tree["prompts_file"] = *options.prompts_file;
  if (options.tokenizer) tree["tokenizer"]["path"] = *options.tokenizer;
  if (options.output) tree["output"] = *options.output;
  if (options.dtype) tree["model"]["distributed"]["compute_dtype"] = *options.dtype;
  if (options.cpu) tree["model"]["distributed"]["use_cuda"] = false;
  if (options.max_new_tokens) tree["max_new_tokens"] = *options.max_new_tokens;
  if (options.temperature) tree["temperature"] = *options.temperature;
  if (options.top_k) tree["top_k"] = *options.top_k;
  if (options.top_p) tree["top_p"] = *options.top_p;
  if (options.seed) tree["seed"] = *options.seed;
  if (options.batch_size) tree["batch_size"] = *options.batch_size;
  if (options.stream) tree["stream"] = true;
  if (options.ignore_eos) tree["ignore_eos"] = true;
  return models::gpt::with_native_format_resolved(tree);
}

}  // namespace

void add_generate_command(CLI::App& app, CommandAction& action) {
  auto* command = app.add_subcommand("generate", "Generate text with a model from a checkpoint of any format.");
  auto options = std::make_shared<GenerateOptions>();
  command->add_option("-c,--config", options->config, "YAML configuration file (docs/generation.md).");
  command->add_flag("-v,--validate", options->validate, "Print the resolved configuration and exit.");
  command->add_option("overrides", options->overrides, "Overrides `a.b.c=value`, applied after the file.");
  command->add_option("--pretrained", options->pretrained, "Checkpoint folder (pretrained.path).");
  command->add_option("--format", options->format,
                      "Checkpoint format (pretrained.format): auto, fast_llm, distributed, llama, mistral, "
                      "qwen2, mixtral.");
  // One value per occurrence, so that the `a.b=c` overrides after them stay overrides.
  command->add_option("--prompt", options->prompts, "A text prompt (repeatable).")->allow_extra_args(false);
  command->add_option("--prompt-ids", options->prompt_ids, "A prompt as token ids, `1,2,3` (repeatable).")
      ->allow_extra_args(false);
  command->add_option("--prompts-file", options->prompts_file,
                      "Prompts: JSONL objects with `text` or `ids`, or a text file with one prompt per line.");
  command->add_option("--tokenizer", options->tokenizer, "tokenizer.json, .model, or a folder (tokenizer.path).");
  command->add_option("--max-new-tokens", options->max_new_tokens, "Most tokens generated per prompt.");
  command->add_option("--temperature", options->temperature, "Sampling temperature; 0 (the default) is greedy.");
  command->add_option("--top-k", options->top_k, "Sample among the k most likely tokens.");
  command->add_option("--top-p", options->top_p, "Nucleus sampling threshold.");
  command->add_option("--seed", options->seed, "Sampling seed.");
  command->add_option("--batch-size", options->batch_size, "Prompts generated together.");
  command->add_flag("--stream", options->stream, "Print tokens as they are generated (one prompt at a time).");
  command->add_flag("--ignore-eos", options->ignore_eos, "Always generate --max-new-tokens tokens.");
  command->add_option("--output", options->output, "Also write the completions to this JSONL file.");
  command->add_option("--dtype", options->dtype, "Compute dtype (model.distributed.compute_dtype).");
  command->add_flag("--cpu", options->cpu, "Run on the CPU even when a GPU is visible.");
  command->callback([&action, options] {
    action = [options] {
      models::gpt::GenerationConfig config;
      engine::load_config_with_pretrained(config, generation_tree(*options), models::gpt::gpt_model_type());
      if (options->validate) {
        print_resolved_config(config);
        return 0;
      }
      require_supported(config);
      models::gpt::generate(config);
      return 0;
    };
  });
}

}  // namespace fast_llm::cli
