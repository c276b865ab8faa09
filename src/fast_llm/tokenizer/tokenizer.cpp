// Tokenizer::load (which file, which implementation, BOS/EOS from tokenizer_config.json) and encode_batch: texts are
// handed out one at a time from an atomic counter to the calling thread and the process's tokenizing threads
// (worker_pool.h), so long and short texts balance across threads.
#include "fast_llm/tokenizer/tokenizer.h"

#include <atomic>
#include <exception>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "fast_llm/tokenizer/huggingface_tokenizer.h"
#include "fast_llm/tokenizer/sentencepiece_tokenizer.h"
#include "fast_llm/tokenizer/worker_pool.h"

namespace fast_llm::tokenizer {
namespace {

namespace fs = std::filesystem;

Json read_json(const fs::path& file) {
  std::ifstream stream(file, std::ios::binary);
  if (!stream) throw Error("tokenizer", fmt::format("{}: cannot open", file.string()));
  std::stringstream buffer;
  buffer << stream.rdbuf();
  try {
    return Json::parse(buffer.str());
  } catch (const nlohmann::json::exception& error) {  // parse_error; out_of_range for a number overflow
    throw Error("tokenizer", fmt::format("{}: not valid JSON ({})", file.string(), error.what()));
  }
}

// `bos_token` / `eos_token` of tokenizer_config.json: a string, {"content": string} or null.
std::optional<int32_t> special_token_id(const Json& config, const char* key, const fs::path& file,
                                        const Tokenizer& tokenizer) {
  const JsonPlace place{file.string(), key};
  if (!json_present(config, key)) return std::nullopt;
  const Json& value = config.at(key);
  std::string content;
  if (value.is_string()) content = value.get<std::string>();
  else if (value.is_object()) content = json_string(value, "content", place);
  else json_error(place, fmt::format("expected a string or {{\"content\": ...}}, got {}", value.dump()));
  const auto id = tokenizer.token_to_id(content);
  if (!id) json_error(place, fmt::format("\"{}\" is not a token of the tokenizer", content));
  return id;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const fs::path& path) {
  fs::path file = path;
  std::error_code error;
  if (fs::is_directory(path, error)) {
    if (fs::exists(path / "tokenizer.json")) file = path / "tokenizer.json";
    else if (fs::exists(path / "tokenizer.model")) file = path / "tokenizer.model";
    else
      throw Error("tokenizer",
                  fmt::format("{}: folder has neither tokenizer.json nor tokenizer.model", path.string()));
  } else if (!fs::exists(path, error)) {
    throw Error("tokenizer", fmt::format("{}: no such file or folder", path.string()));
  }
  std::unique_ptr<Tokenizer> tokenizer;
  if (file.extension() == ".model") tokenizer = std::make_unique<SentencePieceTokenizer>(file);
  else tokenizer = std::make_unique<HuggingFaceTokenizer>(read_json(file), file);

  const fs::path config_file = file.parent_path() / "tokenizer_config.json";
  if (fs::exists(config_file)) {
    const Json config = read_json(config_file);
    if (!config.is_object()) throw Error("tokenizer", fmt::format("{}: expected a JSON object", config_file.string()));
    // A key that is present (even null) overrides what the tokenizer file said.
    if (config.contains("bos_token"))
      tokenizer->bos_id_ = special_token_id(config, "bos_token", config_file, *tokenizer);
    if (config.contains("eos_token"))
      tokenizer->eos_id_ = special_token_id(config, "eos_token", config_file, *tokenizer);
  }
  return tokenizer;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(std::span<const std::string_view> texts,
                                                          bool add_special_tokens, int threads) const {
  std::vector<std::vector<int32_t>> results(texts.size());
  int thread_count = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  thread_count = static_cast<int>(std::min<size_t>(thread_count, texts.size()));
  if (thread_count <= 1) {
    for (size_t i = 0; i < texts.size(); ++i) results[i] = encode(texts[i], add_special_tokens);
    return results;
  }
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto work = [&] {
    try {
      for (size_t i = next++; i < texts.size(); i = next++) results[i] = encode(texts[i], add_special_tokens);
    } catch (...) {
      std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = texts.size();
    }
  };
  run_on_workers(thread_count - 1, work);
  if (failure) std::rethrow_exception(failure);
  return results;
}

}  // namespace fast_llm::tokenizer
