// The pre-tokenizers of tokenizer.json (`pre_tokenizer`): they cut normalized text into pieces (words) that the model
// tokenizes one by one. Supported: ByteLevel (GPT-2's split pattern when `use_regex`, then the byte-level alphabet),
// Split (literal or regex pattern; Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous; `invert`),
// Digits, Metaspace (prepend_scheme always/first/never, `split`), Whitespace, WhitespaceSplit, Punctuation,
// CharDelimiterSplit, BertPreTokenizer and Sequence; other types are refused by make_pre_tokenizer.
//
// Splitting follows Hugging Face's rules exactly: the text is covered by alternating matches and gaps, the behaviour
// decides which are dropped or glued to a neighbour, and empty pieces vanish.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fast_llm/tokenizer/json_fields.h"

namespace fast_llm::tokenizer {

// One piece of text; `at_text_start`: it begins where the whole input begins (Metaspace's `first` scheme needs it).
struct TextPiece {
  std::string text;
  bool at_text_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their pre-tokens, in order.
  virtual void pre_tokenize(std::vector<TextPiece>& pieces) const = 0;
};

// nullptr for a null pre-tokenizer.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& node, const JsonPlace& place);

}  // namespace fast_llm::tokenizer
