// The normalizers of tokenizer.json (`normalizer`), applied to each stretch of text between added tokens before
// pre-tokenization: NFC, NFD, NFKC, NFKD (ICU), Lowercase (each code point's full lowercase, as Rust's
// char::to_lowercase: no context-dependent final sigma), Strip (Unicode White_Space), StripAccents (drops
// non-spacing marks), Prepend (only to non-empty text), Replace (a literal string or a regex, every match),
// BertNormalizer and Sequence. Other types (Precompiled, NMT, ...) are refused by make_normalizer.
#pragma once

#include <memory>
#include <string>

#include "fast_llm/tokenizer/json_fields.h"

namespace fast_llm::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// nullptr for a null normalizer.
std::unique_ptr<Normalizer> make_normalizer(const Json& node, const JsonPlace& place);

}  // namespace fast_llm::tokenizer
