// GPT-2's byte-level alphabet: each of the 256 byte values is shown as one printable code point (the printable
// Latin-1 bytes as themselves, the others as U+0100 onwards in byte order), so that any byte string is a string of
// vocabulary characters. Byte-level pre-tokenizers map text into it; the ByteLevel decoder maps back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fast_llm::tokenizer {

// `bytes` in the byte-level alphabet (UTF-8 of the mapped code points), appended to `out`.
void append_byte_level(std::string& out, std::string_view bytes);

// The byte that `code_point` stands for in the alphabet, if it is one of its 256 characters.
std::optional<uint8_t> byte_of_byte_level_char(char32_t code_point);

}  // namespace fast_llm::tokenizer
