// Lossy UTF-8 validation following the Unicode "substitution of maximal subparts" practice (see utf8.h).
#include "fast_llm/tokenizer/utf8.h"

namespace fast_llm::tokenizer {
namespace {

// Length of the valid sequence at text[position], or 0 when invalid; `invalid_length` is then the length of the
// maximal subpart to replace (at least 1).
size_t valid_sequence_length(std::string_view text, size_t position, size_t& invalid_length) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[position + i]); };
  const size_t available = text.size() - position;
  const unsigned char lead = byte(0);
  invalid_length = 1;
  if (lead < 0x80) return 1;
  size_t length;
  unsigned char second_low = 0x80, second_high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_low = 0xA0;
    if (lead == 0xED) second_high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_low = 0x90;
    if (lead == 0xF4) second_high = 0x8F;
  } else {
    return 0;
  }
  for (size_t i = 1; i < length; ++i) {
    if (i >= available) return 0;
    const unsigned char low = i == 1 ? second_low : 0x80, high = i == 1 ? second_high : 0xBF;
    if (byte(i) < low || byte(i) > high) return 0;
    invalid_length = i + 1;
  }
  return length;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  size_t invalid_length;
  for (size_t position = 0; position < text.size();) {
    const size_t length = valid_sequence_length(text, position, invalid_length);
    if (length == 0) return false;
    position += length;
  }
  return true;
}

std::string to_valid_utf8(std::string_view text) {
  if (is_valid_utf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 16);
  size_t invalid_length;
  for (size_t position = 0; position < text.size();) {
    const size_t length = valid_sequence_length(text, position, invalid_length);
    if (length == 0) {
      out += "\xEF\xBF\xBD";
      position += invalid_length;
    } else {
      out.append(text.substr(position, length));
      position += length;
    }
  }
  return out;
}

char32_t next_code_point(std::string_view text, size_t& position) {
  const auto lead = static_cast<unsigned char>(text[position]);
  const int length = utf8_length(lead);
  char32_t code_point = length == 1 ? lead : length == 2 ? lead & 0x1F : length == 3 ? lead & 0x0F : lead & 0x07;
  for (int i = 1; i < length; ++i)
    code_point = (code_point << 6) | (static_cast<unsigned char>(text[position + i]) & 0x3F);
  position += length;
  return code_point;
}

void append_utf8(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
}

std::vector<size_t> character_offsets(std::string_view text) {
  std::vector<size_t> offsets;
  offsets.reserve(text.size() + 1);
  for (size_t index = 0; index < text.size(); ++index)
    if ((static_cast<unsigned char>(text[index]) & 0xC0) != 0x80) offsets.push_back(index);
  offsets.push_back(text.size());
  return offsets;
}

}  // namespace fast_llm::tokenizer
