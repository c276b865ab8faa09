// `fast-llm generate` (generation.h): the config, reading the prompts, loading the model and tokenizer, and printing
// and writing the completions. The decoding itself is generator.h's.
#include "fast_llm/models/gpt/generation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "fast_llm/core/error.h"
#include "fast_llm/core/file_writer.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/engine/multi_stage/multi_stage.h"
#include "fast_llm/models/gpt/generator.h"
#include "fast_llm/models/gpt/model.h"
#include "fast_llm/tokenizer/tokenizer.h"

namespace fast_llm::models::gpt {

namespace {

constexpr std::string_view kComponent = "generate";

struct Prompt {
  std::vector<int64_t> ids;
  std::optional<std::string> text;
};

// The tokenizer of the run: `tokenizer.path`, else the checkpoint folder's tokenizer.json / tokenizer.model if it has
// one; none when neither exists (prompts must then be ids, completions are printed as ids).
std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const GenerationConfig& config) {
  if (config.tokenizer.path) return tokenizer::Tokenizer::load(*config.tokenizer.path);
  const std::filesystem::path folder = *config.pretrained.path;
  for (const char* name : {"tokenizer.json", "tokenizer.model"})
    if (std::filesystem::is_regular_file(folder / name)) return tokenizer::Tokenizer::load(folder);
  return nullptr;
}

std::vector<int64_t> encode(const tokenizer::Tokenizer* tokenizer, const std::string& text, bool special,
                            std::string_view where) {
  if (tokenizer == nullptr)
    throw ConfigError("tokenizer.path", fmt::format("{} is text, and there is no tokenizer: set tokenizer.path (the "
                                                    "checkpoint folder has no tokenizer.json or tokenizer.model), or "
                                                    "give token ids",
                                                    where));
  const std::vector<int32_t> ids = tokenizer->encode(text, special);
  return {ids.begin(), ids.end()};
}

// The prompts of `prompts_file`: JSONL objects with `text` or `ids` (.jsonl), else one text prompt per non-empty line.
std::vector<Prompt> read_prompts_file(const std::filesystem::path& path, const tokenizer::Tokenizer* tokenizer,
                                      bool special) {
  std::ifstream file(path);
  if (!file) throw Error(kComponent, fmt::format("{}: cannot open the prompts file", path.string()));
  const bool jsonl = path.extension() == ".jsonl" || path.extension() == ".json";
  std::vector<Prompt> prompts;
  std::string line;
  for (int64_t number = 1; std::getline(file, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path.string(), number);
    if (!jsonl) {
      prompts.push_back({.ids = encode(tokenizer, line, special, where), .text = line});
      continue;
    }
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& error) {
      throw Error(kComponent, fmt::format("{}: not a JSON object: {}", where, error.what()));
    }
    if (object.is_object() && object.contains("text") && object["text"].is_string()) {
      const std::string text = object["text"].get<std::string>();
      prompts.push_back({.ids = encode(tokenizer, text, special, where), .text = text});
    } else if (object.is_object() && object.contains("ids") && object["ids"].is_array()) {
      Prompt prompt;
      for (const nlohmann::json& id : object["ids"]) {
        if (!id.is_number_integer()) throw Error(kComponent, fmt::format("{}: `ids` holds {}, not an integer", where,
                                                                         id.dump()));
        prompt.ids.push_back(id.get<int64_t>());
      }
      prompts.push_back(std::move(prompt));
    } else {
      throw Error(kComponent,
                  fmt::format("{}: expected an object with a string `text` or an integer list `ids`", where));
    }
  }
  return prompts;
}

// The EOS ids of a Hugging Face folder's generation_config.json (`eos_token_id`: an id or a list), as transformers'
// generate reads them; none when the folder has no such file or field.
std::vector<int64_t> generation_config_eos(const std::filesystem::path& folder) {
  const std::filesystem::path path = folder / "generation_config.json";
  if (!std::filesystem::is_regular_file(path)) return {};
  std::ifstream file(path);
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(file);
  } catch (const nlohmann::json::exception& error) {
    throw Error(kComponent, fmt::format("{}: not valid JSON: {}", path.string(), error.what()));
  }
  if (!config.is_object() || !config.contains("eos_token_id") || config["eos_token_id"].is_null()) return {};
  const nlohmann::json& eos = config["eos_token_id"];
  std::vector<int64_t> ids;
  for (const nlohmann::json& id : eos.is_array() ? eos : nlohmann::json::array({eos})) {
    if (!id.is_number_integer())
      throw Error(kComponent, fmt::format("{}: eos_token_id holds {}, not a token id", path.string(), id.dump()));
    ids.push_back(id.get<int64_t>());
  }
  return ids;
}

// Text of `ids` (special tokens skipped), or the ids themselves without a tokenizer. A model's vocabulary may be
// larger than its tokenizer's (padded embeddings): ids the tokenizer does not have are shown as `<id N>`.
std::string render(const tokenizer::Tokenizer* tokenizer, const std::vector<int64_t>& ids) {
  if (tokenizer == nullptr) return fmt::format("{}", fmt::join(ids, " "));
  std::string text;
  std::vector<int32_t> known;
  auto flush = [&] {
    if (!known.empty()) text += tokenizer->decode(known, /*skip_special_tokens=*/true);
    known.clear();
  };
  for (int64_t id : ids) {
    if (id < tokenizer->vocab_size()) {
      known.push_back(int32_t(id));
    } else {
      flush();
      text += fmt::format("<id {}>", id);
    }
  }
  flush();
  return text;
}

// Prints a completion as it grows: the decoded text so far, less what was printed, held back while it ends in an
// incomplete UTF-8 sequence (decoded as U+FFFD) that the next token may complete.
class StreamPrinter {
 public:
  explicit StreamPrinter(const tokenizer::Tokenizer* tokenizer) : tokenizer_(tokenizer) {}
  void add(int64_t token) {
    ids_.push_back(token);
    if (tokenizer_ == nullptr) {
      write_to_standard_output(fmt::format(" {}", token));
      return;
    }
    const std::string text = render(tokenizer_, ids_);
    if (text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0) return;
    if (text.size() > printed_ && text.compare(0, printed_, text, 0, printed_) == 0) {
      write_to_standard_output(std::string_view(text).substr(printed_));
      printed_ = text.size();
    }
  }

 private:
  const tokenizer::Tokenizer* tokenizer_;
  std::vector<int64_t> ids_;
  size_t printed_ = 0;
};

}  // namespace

void GenerationTokenizerConfig::visit(config::Visitor& v) {
  v(path, "path", "A tokenizer.json, a SentencePiece .model, or a folder holding one. Unset: the checkpoint folder's, "
                  "if it has one.",
    config::Hint::core);
}

GenerationConfig::GenerationConfig() { pretrained.format = engine::CheckpointFormat::auto_; }

void GenerationConfig::visit(config::Visitor& v) {
  using config::Hint;
  namespace check = config::check;
  v(pretrained, "pretrained", "The checkpoint to generate with (any format; its model config is used, under `model`).",
    Hint::core);
  v(model, "model", "The model; model.distributed.compute_dtype and use_cuda choose the numerics and the device.",
    Hint::core);
  v(tokenizer, "tokenizer", "The tokenizer for text prompts and completions.", Hint::core);
  v(prompts, "prompts", "Text prompts.", Hint::core);
  v(prompt_ids, "prompt_ids", "Prompts as token ids.", Hint::core);
  v(prompts_file, "prompts_file", "A file of prompts: JSONL objects with `text` or `ids`, or one text per line.",
    Hint::core);
  v(add_special_tokens, "add_special_tokens", "Text prompts get the tokenizer's post-processor tokens (BOS).",
    Hint::feature);
  v(max_new_tokens, "max_new_tokens", "Most tokens generated per prompt.", Hint::core, check::gt(int64_t(0)));
  v(temperature, "temperature", "Sampling temperature; 0 is greedy decoding (the most likely token).", Hint::core,
    check::ge(0.0));
  v(top_k, "top_k", "Sample among the k most likely tokens only; 0: no limit.", Hint::feature, check::ge(int64_t(0)));
  v(top_p, "top_p", "Sample among the most likely tokens whose probability adds up to top_p (nucleus); 1: no limit.",
    Hint::feature, check::in_range(0.0, 1.0));
  v(seed, "seed", "Seed of the sampling: the same seed gives the same completions.", Hint::feature);
  v(batch_size, "batch_size", "Prompts generated together.", Hint::performance, check::gt(int64_t(0)));
  v(stream, "stream", "Print each token as it is generated (prompts then run one at a time).", Hint::feature);
  v(eos_token_ids, "eos_token_ids",
    "Tokens that end a completion. Empty: the checkpoint folder's generation_config.json eos_token_id, else the "
    "tokenizer's EOS.",
    Hint::feature);
  v(ignore_eos, "ignore_eos", "Always generate max_new_tokens tokens.", Hint::feature);
  v(output, "output", "Also write the completions to this JSONL file ({index, prompt_ids, completion_ids, text}).",
    Hint::feature);
  v(kernels, "kernels", "Which kernel variants may run, and plugins that add more (as in training).",
    Hint::performance);
}

void GenerationConfig::check() const {
  if (!pretrained.path) fail("pretrained", "pretrained.path is required: the checkpoint to generate with");
  if (prompts.empty() && prompt_ids.empty() && !prompts_file)
    fail("prompts", "no prompts: give prompts (text), prompt_ids or prompts_file");
  if (top_p <= 0.0) fail("top_p", "must be in (0, 1]");
}

YAML::Node with_native_format_resolved(YAML::Node tree) {
  const YAML::Node pretrained = tree["pretrained"];
  if (!pretrained || !pretrained.IsMap() || !pretrained["path"] || !pretrained["path"].IsScalar()) return tree;
  if (pretrained["format"] && (!pretrained["format"].IsScalar() || pretrained["format"].as<std::string>() != "auto"))
    return tree;
  const std::filesystem::path metadata = std::filesystem::path(pretrained["path"].as<std::string>()) / "metadata.yaml";
  tree["pretrained"]["format"] = "auto";
  if (!std::filesystem::is_regular_file(metadata)) return tree;
  YAML::Node format;
  try {
    format = YAML::LoadFile(metadata.string())["format"];
  } catch (const YAML::Exception& error) {
    throw Error(kComponent, fmt::format("{}: not readable as YAML: {}", metadata.string(), error.what()));
  }
  if (format && format.IsScalar()) tree["pretrained"]["format"] = format.as<std::string>();
  return tree;
}

void generate(const GenerationConfig& config) {
  const GPTModelConfig& model_config = config.model;
  const std::unique_ptr<tokenizer::Tokenizer> tokenizer = load_tokenizer(config);
  std::vector<Prompt> prompts;
  for (size_t index = 0; index < config.prompts.size(); ++index)
    prompts.push_back({.ids = encode(tokenizer.get(), config.prompts[index], config.add_special_tokens,
                                     fmt::format("prompts[{}]", index)),
                       .text = config.prompts[index]});
  for (const std::vector<int64_t>& ids : config.prompt_ids) prompts.push_back({.ids = ids, .text = std::nullopt});
  if (config.prompts_file) {
    std::vector<Prompt> more = read_prompts_file(*config.prompts_file, tokenizer.get(), config.add_special_tokens);
    FLM_CHECK(!more.empty(), kComponent, "{}: no prompts in the file", config.prompts_file->string());
    prompts.insert(prompts.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }

  GenerationSettings settings{.max_new_tokens = config.max_new_tokens,
                              .eos_token_ids = config.eos_token_ids,
                              .sampling = {.temperature = config.temperature,
                                           .top_k = config.top_k,
                                           .top_p = config.top_p,
                                           .seed = uint64_t(config.seed),
                                           .softcap = model_config.base_model.head.final_logit_softcap}};
  if (settings.eos_token_ids.empty()) settings.eos_token_ids = generation_config_eos(*config.pretrained.path);
  if (settings.eos_token_ids.empty() && tokenizer && tokenizer->eos_id())
    settings.eos_token_ids.push_back(*tokenizer->eos_id());
  if (config.ignore_eos) settings.eos_token_ids.clear();

  config.kernels.apply();
  GPTModel model(model_config.base_model);
  const Device device = engine::resolve_device(model_config.distributed);
  engine::MultiStage multi_stage(model, model_config.multi_stage, model_config.distributed, device,
                                 /*training=*/false);
  engine::load_pretrained(config.pretrained, model_config, multi_stage, /*optimizer_state=*/false);
  Generator generator(model, device, model_config.distributed.compute_dtype);

  std::unique_ptr<FileWriter> output;
  if (config.output)
    output = std::make_unique<FileWriter>(*config.output, FileWriter::Options{.component = kComponent});
  const size_t batch_size = config.stream ? 1 : size_t(config.batch_size);
  int64_t generated = 0;
  double total_seconds = 0.0;
  for (size_t first = 0; first < prompts.size(); first += batch_size) {
    const size_t count = std::min(batch_size, prompts.size() - first);
    std::vector<std::vector<int64_t>> batch;
    for (size_t index = first; index < first + count; ++index) batch.push_back(prompts[index].ids);
    std::unique_ptr<StreamPrinter> printer;
    Generator::TokenCallback on_token;
    if (config.stream) {
      write_to_standard_output(prompts[first].text ? *prompts[first].text
                                                   : render(tokenizer.get(), prompts[first].ids) + " |");
      printer = std::make_unique<StreamPrinter>(tokenizer.get());
      on_token = [&printer](size_t, int64_t token) { printer->add(token); };
    }
    const auto start = std::chrono::steady_clock::now();
    const std::vector<std::vector<int64_t>> completions = generator.generate(batch, settings, first, on_token);
    // The generator read its last logits on the host: the device work of the batch is done.
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int64_t batch_tokens = 0;
    for (const std::vector<int64_t>& completion : completions) batch_tokens += int64_t(completion.size());
    total_seconds += seconds;
    log_main("Batch {}/{}: {} prompts, {} new tokens in {:.3f} s ({:.1f} tokens/s)", first / batch_size + 1,
             (prompts.size() + batch_size - 1) / batch_size, count, batch_tokens, seconds,
             double(batch_tokens) / seconds);
    for (size_t offset = 0; offset < count; ++offset) {
      const Prompt& prompt = prompts[first + offset];
      const std::vector<int64_t>& completion = completions[offset];
      generated += int64_t(completion.size());
      if (config.stream) {
        write_to_standard_output("\n\n");
      } else {
        const std::string prompt_text = prompt.text ? *prompt.text : render(tokenizer.get(), prompt.ids);
        write_to_standard_output(fmt::format("{}{}{}\n\n", prompt_text, tokenizer ? "" : " | ",
                                             render(tokenizer.get(), completion)));
      }
      if (output) {
        nlohmann::json record{{"index", first + offset}, {"prompt_ids", prompt.ids}, {"completion_ids", completion}};
        if (tokenizer) record["text"] = render(tokenizer.get(), completion);
        output->write(record.dump() + "\n");
      }
    }
  }
  if (output) output->commit();
  log_main("Generated {} tokens for {} prompts in {:.3f} s", generated, prompts.size(), total_seconds);
}

}  // namespace fast_llm::models::gpt
