// Tokenizers as Hugging Face defines them, without Python: a `tokenizer.json` (the `tokenizers` library's format:
// normalizer, pre-tokenizer, model, post-processor, decoder, added tokens) or a SentencePiece `.model` file.
//
// Contract: for every tokenizer that `load` accepts, `encode` and `decode` give exactly what Hugging Face's
// `tokenizers` library gives for the same file and text (tests/tokenizer checks this against the library itself). A
// feature outside the supported set (docs/tokenizers.md) is refused by `load` with an error naming the file and the
// feature (for example `normalizer.type: Precompiled`), never tokenized differently.
//
// A Tokenizer is immutable after loading and safe to use from several threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fast_llm::tokenizer {

class Tokenizer {
 public:
  // `path`: a tokenizer.json file, a SentencePiece .model file, or a folder holding tokenizer.json (preferred) or
  // tokenizer.model. A tokenizer_config.json beside it gives the BOS and EOS tokens (`bos_token`, `eos_token`, as a
  // string or as {"content": ...}), as transformers' AutoTokenizer reads them. Throws fast_llm::Error("tokenizer", ...)
  // naming the file on anything unreadable, malformed or unsupported.
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& path);

  virtual ~Tokenizer() = default;

  // Ids of `text` (UTF-8; invalid sequences are replaced as Rust's String::from_utf8_lossy and Node's UTF-8 decoder
  // replace them before Hugging Face's library sees the text: each maximal invalid subpart becomes one U+FFFD).
  // add_special_tokens: apply the post-processor (BOS/EOS templates), as `tokenizer.encode(text,
  // add_special_tokens=True)`; the data pipeline uses false and adds BOS/EOS itself.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const = 0;

  // Text of `ids` through the decoder, as `tokenizer.decode(ids, skip_special_tokens)`. Ids out of range are an
  // error.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const = 0;

  // Number of ids: one more than the largest id of the vocabulary and the added tokens. This is `len(tokenizer)` when
  // the ids have no holes; with holes (GPT-4o's file) it is larger, so that every id fits below it.
  virtual int64_t vocab_size() const = 0;

  // The id of a token string (vocabulary or added token), if any; and the string of an id.
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;

  // Whether `id` is an added token flagged `special` (skipped by decode with skip_special_tokens).
  virtual bool is_special(int32_t id) const = 0;

  // BOS and EOS ids from tokenizer_config.json, else from the SentencePiece model; nullopt when the tokenizer has none.
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }

  // encode() of each text, on `threads` threads (0: all cores). Same ids as calling encode one by one.
  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string_view> texts,
                                                 bool add_special_tokens = false, int threads = 0) const;

 protected:
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
};

}  // namespace fast_llm::tokenizer
