// A SentencePiece `.model` file, tokenized by Google's libsentencepiece itself (Debian's libsentencepiece-dev), so
// its output is SentencePiece's by construction. encode with add_special_tokens puts the model's BOS first (as
// transformers' LlamaTokenizer does by default); decode with skip_special_tokens drops control pieces (which
// SentencePiece renders as nothing anyway) and unknown pieces keep SentencePiece's rendering.
#pragma once

#include <filesystem>
#include <memory>

#include "fast_llm/tokenizer/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace fast_llm::tokenizer {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::filesystem::path& file);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const override;
  int64_t vocab_size() const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  bool is_special(int32_t id) const override;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace fast_llm::tokenizer
