// The `pattern` of Split pre-tokenizers and Replace normalizers/decoders: {"String": literal} or {"Regex": pattern},
// found as successive non-overlapping matches.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fast_llm/tokenizer/json_fields.h"
#include "fast_llm/tokenizer/unicode_regex.h"

namespace fast_llm::tokenizer {

class StringPattern {
 public:
  StringPattern(const Json& node, const JsonPlace& place);

  // Byte ranges of the matches in `text`, leftmost first. An empty literal matches nothing.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

 private:
  std::string literal_;
  std::unique_ptr<UnicodeRegex> regex_;
};

}  // namespace fast_llm::tokenizer
