// A tokenizer for the preparation tests whose ids can be checked by eye: each byte is its own id (0-255), and the
// strings "<s>" (id 256, BOS) and "</s>" (id 257, EOS) found in the text are their ids, as added special tokens are.
// The pipeline sees it only through `const tokenizer::Tokenizer&`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/tokenizer/tokenizer.h"

namespace fast_llm::preparation::testing {

class ByteTestTokenizer final : public tokenizer::Tokenizer {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  explicit ByteTestTokenizer(bool with_bos = true, bool with_eos = true) {
    if (with_bos) bos_id_ = kBos;
    if (with_eos) eos_id_ = kEos;
  }
  std::vector<int32_t> encode(std::string_view text, bool = false) const override {
    std::vector<int32_t> ids;
    for (size_t index = 0; index < text.size();) {
      if (text.substr(index, 3) == "<s>") {
        ids.push_back(kBos);
        index += 3;
      } else if (text.substr(index, 4) == "</s>") {
        ids.push_back(kEos);
        index += 4;
      } else {
        ids.push_back(int32_t(static_cast<unsigned char>(text[index++])));
      }
    }
    return ids;
  }
  std::string decode(std::span<const int32_t> ids, bool = false) const override {
    std::string text;
    for (int32_t id : ids) text += *id_to_token(id);
    return text;
  }
  int64_t vocab_size() const override { return 258; }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    if (token == "<s>") return kBos;
    if (token == "</s>") return kEos;
    if (token.size() == 1) return int32_t(static_cast<unsigned char>(token[0]));
    return std::nullopt;
  }
  std::optional<std::string> id_to_token(int32_t id) const override {
    if (id == kBos) return "<s>";
    if (id == kEos) return "</s>";
    if (id >= 0 && id < 256) return std::string(1, char(id));
    return std::nullopt;
  }
  bool is_special(int32_t id) const override { return id == kBos || id == kEos; }
};

// The ids of `text` byte by byte (the test tokenizer's encoding without specials).
inline std::vector<int64_t> bytes_of(std::string_view text) {
  std::vector<int64_t> ids;
  for (char character : text) ids.push_back(int64_t(static_cast<unsigned char>(character)));
  return ids;
}

}  // namespace fast_llm::preparation::testing
