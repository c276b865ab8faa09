// UTF-8 helpers of the tokenizers: the lossy conversion that Hugging Face's library applies before it sees text, and
// code point iteration over text that is already valid.
//
// `to_valid_utf8` replaces each maximal invalid subpart of a sequence with one U+FFFD, as Rust's
// String::from_utf8_lossy and the WHATWG decoder (Node's Buffer.toString) both do, so that invalid input reaches our
// tokenizer exactly as it reaches Hugging Face's. Every other function here assumes valid UTF-8.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fast_llm::tokenizer {

// `text` unchanged when it is valid UTF-8, else with every maximal invalid subpart replaced by U+FFFD.
std::string to_valid_utf8(std::string_view text);
bool is_valid_utf8(std::string_view text);

// Length in bytes of the UTF-8 sequence that starts with `lead` (valid text only).
inline int utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// The code point at text[position] (valid text only); `position` moves past it.
char32_t next_code_point(std::string_view text, size_t& position);

void append_utf8(std::string& out, char32_t code_point);

// Byte offset of each character of `text`, then its size: entry i is where character i starts, the cut positions that
// Python's str indices give (Fast-LLM's character spans, FIM's cuts). A byte that does not continue a sequence starts
// one, so even invalid UTF-8 is cut between whole characters.
std::vector<size_t> character_offsets(std::string_view text);

}  // namespace fast_llm::tokenizer
