#include "fast_llm/data/corpus.h"

#include <fmt/ranges.h>
#include <fnmatch.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <unordered_set>
#include <sstream>

#include "fast_llm/core/error.h"
#include "fast_llm/core/file_writer.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/data/memmap.h"

namespace fast_llm::data {

namespace {
constexpr std::string_view kComponent = "corpus";

bool has_wildcard(const std::string& text) { return text.find_first_of("*?[") != std::string::npos; }

// The paths matching `pattern`, component by component (wildcards match names within one folder), sorted.
std::vector<std::filesystem::path> expand_pattern(const std::filesystem::path& pattern) {
  std::vector<std::filesystem::path> current{pattern.has_root_path() ? pattern.root_path() : std::filesystem::path()};
  for (const auto& component : pattern.relative_path()) {
    const std::string part = component.string();
    std::vector<std::filesystem::path> next;
    for (const auto& base : current) {
      if (!has_wildcard(part)) {
        next.push_back(base / component);
        continue;
      }
      std::error_code error;
      const std::filesystem::path folder = base.empty() ? std::filesystem::path(".") : base;
      for (std::filesystem::directory_iterator entry(folder, error), end; !error && entry != end;
           entry.increment(error)) {
        const std::string name = entry->path().filename().string();
        if (::fnmatch(part.c_str(), name.c_str(), FNM_PERIOD) == 0) next.push_back(base / name);
      }
    }
    std::sort(next.begin(), next.end());
    current = std::move(next);
  }
  return current;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  FLM_CHECK(stream.is_open(), kComponent, "{}: cannot open", path.string());
  std::ostringstream buffer;
  buffer << stream.rdbuf();
  return buffer.str();
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// ByteTokenizer

std::vector<int64_t> ByteTokenizer::encode(std::string_view text, bool add_bos, bool add_eos) const {
  std::vector<int64_t> tokens;
  tokens.reserve(text.size() + 2);
  if (add_bos) tokens.push_back(kBos);
  for (char character : text) tokens.push_back(int64_t(static_cast<unsigned char>(character)));
  if (add_eos) tokens.push_back(kEos);
  return tokens;
}

std::string ByteTokenizer::decode(std::span<const int64_t> tokens) const {
  std::string text;
  text.reserve(tokens.size());
  for (int64_t token : tokens) {
    if (token == kBos || token == kEos) continue;
    FLM_CHECK(token >= 0 && token < 256, "tokenizer", "token {} is outside the byte vocabulary", token);
    text.push_back(char(static_cast<unsigned char>(token)));
  }
  return text;
}

// ---------------------------------------------------------------------------------------------------------------
// Corpus

std::vector<std::string> default_corpus_sources() {
  return {"/usr/share/common-licenses", "/usr/share/doc/*/copyright", "/usr/include/c++"};
}

std::vector<std::filesystem::path> collect_corpus_files(const std::vector<std::string>& sources) {
  std::vector<std::filesystem::path> files;
  std::set<std::filesystem::path> seen;
  for (const std::string& source : sources) {
    std::vector<std::filesystem::path> found;
    for (const std::filesystem::path& root : expand_pattern(source)) {
      std::error_code error;
      if (std::filesystem::is_regular_file(root, error)) {
        found.push_back(root);
      } else if (std::filesystem::is_directory(root, error)) {
        for (std::filesystem::recursive_directory_iterator
                 entry(root, std::filesystem::directory_options::skip_permission_denied, error),
             end;
             !error && entry != end; entry.increment(error)) {
          std::error_code status_error;
          if (entry->is_regular_file(status_error)) found.push_back(entry->path());
        }
      }
    }
    std::sort(found.begin(), found.end());
    for (const auto& file : found) {
      std::error_code error;
      std::filesystem::path canonical = std::filesystem::weakly_canonical(file, error);
      if (seen.insert(error ? file : canonical).second) files.push_back(file);
    }
  }
  return files;
}

bool looks_like_text(std::string_view bytes) {
  size_t control = 0;
  for (size_t index = 0; index < bytes.size();) {
    const unsigned char byte = static_cast<unsigned char>(bytes[index]);
    if (byte < 0x80) {
      if (byte == 0) return false;
      if (byte < 0x20 && byte != '\t' && byte != '\n' && byte != '\r' && byte != '\f' && byte != '\v' && byte != 0x1b)
        ++control;
      ++index;
      continue;
    }
    // A UTF-8 lead byte and its continuation bytes; overlong and surrogate forms are not text.
    size_t length = (byte & 0xE0) == 0xC0 ? 2 : (byte & 0xF0) == 0xE0 ? 3 : (byte & 0xF8) == 0xF0 ? 4 : 0;
    if (length == 0 || index + length > bytes.size()) return false;
    uint32_t code = byte & (0x7F >> length);
    for (size_t next = 1; next < length; ++next) {
      const unsigned char continuation = static_cast<unsigned char>(bytes[index + next]);
      if ((continuation & 0xC0) != 0x80) return false;
      code = (code << 6) | (continuation & 0x3F);
    }
    static constexpr uint32_t kMinimum[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kMinimum[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    index += length;
  }
  // A few stray control characters (form feeds in old licenses, escape sequences) are fine; many mean binary data.
  return control * 100 <= bytes.size();
}

void for_each_corpus_text(const CorpusOptions& options, CorpusStats& stats,
                          const std::function<void(std::string&& text)>& take) {
  const std::vector<std::filesystem::path> files = collect_corpus_files(options.sources);
  FLM_CHECK(!files.empty(), kComponent, "no files found in {}", fmt::join(options.sources, ", "));
  int64_t text_bytes = 0;
  std::unordered_set<size_t> seen_texts;
  for (const auto& file : files) {
    if (text_bytes >= options.max_bytes) break;
    ++stats.files_considered;
    std::error_code error;
    const uint64_t size = std::filesystem::file_size(file, error);
    if (error || size == 0 || size > uint64_t(options.max_file_bytes)) {
      ++stats.skipped_size;
      continue;
    }
    std::string text = read_file(file);
    if (!looks_like_text(text)) {
      ++stats.skipped_binary;
      continue;
    }
    // Packages of one source ship the same copyright file (Debian's Boost packages: one 2 MB file, many times), which
    // would otherwise fill the corpus with copies.
    if (!seen_texts.insert(std::hash<std::string_view>{}(text)).second) {
      ++stats.skipped_duplicate;
      continue;
    }
    text_bytes += int64_t(text.size());
    ++stats.documents;
    take(std::move(text));
  }
  FLM_CHECK(stats.documents > 0, kComponent, "no text files among the {} files found in {}", files.size(),
            fmt::join(options.sources, ", "));
}

CorpusStats build_byte_corpus(const std::filesystem::path& output_directory, const CorpusOptions& options) {
  CorpusStats stats;
  stats.dataset_path = output_directory / "shard_0_0.fast_llm_dataset";
  stats.config_path = output_directory / "fast_llm_config.yaml";
  const ByteTokenizer tokenizer;
  const TokenDataType data_type = token_data_type_for_vocab(ByteTokenizer::kVocabSize);
  MemmapWriter writer(stats.dataset_path, {.data_type = data_type});
  for_each_corpus_text(options, stats, [&](std::string&& text) {
    Document document;
    document.tokens = tokenizer.encode(text, options.add_bos, options.add_eos);
    writer.add_document(document);
    stats.tokens += document.size();
  });
  writer.finish();

  // The dataset config `prepare` writes for a single shard: the memmap entry (path relative to this folder) and the
  // reader's statistics.
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "config" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "type" << YAML::Value << "memmap";
  out << YAML::Key << "path" << YAML::Value << stats.dataset_path.filename().string();
  out << YAML::EndMap;
  out << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "num_tokens" << YAML::Value << stats.tokens;
  out << YAML::Key << "tokens" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "num_tokens" << YAML::Value << stats.tokens;
  out << YAML::Key << "num_documents" << YAML::Value << stats.documents;
  out << YAML::Key << "data_type" << YAML::Value << std::string(token_data_type_name(data_type));
  out << YAML::EndMap << YAML::EndMap << YAML::EndMap;
  write_file(stats.config_path, fmt::format("{}\n", out.c_str()), {.component = kComponent, .sync = true});
  log_main("Byte corpus: {} documents, {} tokens from {} files ({} not text, {} empty or too large) in {}",
           stats.documents, stats.tokens, stats.files_considered, stats.skipped_binary, stats.skipped_size,
           output_directory.string());
  return stats;
}

CorpusStats write_text_corpus(const std::filesystem::path& output_file, const CorpusOptions& options) {
  CorpusStats stats;
  stats.dataset_path = output_file;
  std::vector<std::string> texts;
  for_each_corpus_text(options, stats, [&](std::string&& text) { texts.push_back(std::move(text)); });
  // The files come grouped by source (licenses, then copyright notices, then headers); a fixed shuffle mixes them, so
  // that the in-order splits of `prepare gpt_memmap` draw validation documents from every source.
  std::shuffle(texts.begin(), texts.end(), std::mt19937_64(20261203));
  FileWriter writer(output_file, {.component = kComponent, .sync = true});
  for (const std::string& text : texts) {
    // for_each_corpus_text hands over valid UTF-8 only, which nlohmann's dump requires.
    writer.write(nlohmann::json{{"text", text}}.dump());
    writer.write("\n");
  }
  writer.commit();
  log_main("Text corpus: {} documents from {} files ({} not text, {} empty or too large, {} duplicates) in {}",
           stats.documents, stats.files_considered, stats.skipped_binary, stats.skipped_size, stats.skipped_duplicate,
           output_file.string());
  return stats;
}

}  // namespace fast_llm::data
