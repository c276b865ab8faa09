// A byte-level tokenizer and a corpus builder that needs no network and no tokenizer files: it gathers the text
// files a Debian machine already has (licenses, package copyright notices, C++ headers), encodes them byte by byte
// and writes a dataset exactly as `fast-llm prepare` would: `shard_0_0.fast_llm_dataset` plus `fast_llm_config.yaml`
// (`{config: {type: memmap, path: ...}, metadata: {...}}`), readable here with `type: file` and by Fast-LLM.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fast_llm::data {

// Token b in [0, 256) is the byte b; 256 begins a document, 257 ends it. Vocabulary: 258 (stored as uint16).
class ByteTokenizer {
 public:
  static constexpr int64_t kBos = 256;
  static constexpr int64_t kEos = 257;
  static constexpr int64_t kVocabSize = 258;

  std::vector<int64_t> encode(std::string_view text, bool add_bos = true, bool add_eos = true) const;
  // The bytes of `tokens`, BOS and EOS dropped; any other id outside the vocabulary is an error.
  std::string decode(std::span<const int64_t> tokens) const;
};

// The folders and patterns scanned by default; those missing on a machine are skipped.
std::vector<std::string> default_corpus_sources();

struct CorpusOptions {
  // Files, folders (searched recursively) or paths with `*` / `?` wildcards in any component
  // (e.g. /usr/share/doc/*/copyright).
  std::vector<std::string> sources = default_corpus_sources();
  int64_t max_bytes = int64_t(64) << 20;      // stop adding files once this much text is in
  int64_t max_file_bytes = int64_t(4) << 20;  // larger files are skipped
  bool add_bos = true;
  bool add_eos = true;
};

struct CorpusStats {
  int64_t files_considered = 0;
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t skipped_binary = 0;  // not UTF-8 text (or holding NUL / control bytes)
  int64_t skipped_size = 0;    // empty or larger than max_file_bytes
  int64_t skipped_duplicate = 0;  // the same text as a file taken before
  std::filesystem::path dataset_path;
  std::filesystem::path config_path;
};

// The regular files under `sources`, in a deterministic order: sources in the order given, the files of each sorted
// by path; a file reached twice (links, overlapping sources) is kept once. Symbolic links to folders are not followed.
std::vector<std::filesystem::path> collect_corpus_files(const std::vector<std::string>& sources);

// Whether `bytes` is text: valid UTF-8, no NUL, and (almost) no control characters besides whitespace.
bool looks_like_text(std::string_view bytes);

// Hands the text of each file that build_byte_corpus takes to `take`, in the same order and under the same limits
// (max_bytes, max_file_bytes, looks_like_text; a text identical to an earlier file's is skipped), counting files,
// documents and skips in `stats`; so that a tokenizer trained on this text (`prepare bpe_tokenizer`) sees the corpus.
// Throws when no text file is found.
void for_each_corpus_text(const CorpusOptions& options, CorpusStats& stats,
                          const std::function<void(std::string&& text)>& take);

// Encodes the text files of `options.sources`, one document per file, into `output_directory`.
CorpusStats build_byte_corpus(const std::filesystem::path& output_directory, const CorpusOptions& options = {});

// Writes the same text, one document per file, as JSON Lines (`{"text": ...}` per line) into `output_file`, in a fixed
// shuffled order: data in the form `prepare gpt_memmap` takes from users, for the quick-start and for trying it.
CorpusStats write_text_corpus(const std::filesystem::path& output_file, const CorpusOptions& options = {});

}  // namespace fast_llm::data
