// Tables of GPT-2's bytes-to-unicode mapping (see byte_level.h), built once.
#include "fast_llm/tokenizer/byte_level.h"

#include <array>

#include "fast_llm/tokenizer/utf8.h"

namespace fast_llm::tokenizer {
namespace {

struct ByteLevelTables {
  std::array<std::string, 256> utf8_of_byte;
  std::array<int16_t, 324> byte_of_code_point;  // -1: not in the alphabet; the alphabet ends below U+0144

  ByteLevelTables() {
    byte_of_code_point.fill(-1);
    int next_extra = 256;
    for (int byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || (byte >= 174);
      const char32_t code_point = printable ? static_cast<char32_t>(byte) : static_cast<char32_t>(next_extra++);
      append_utf8(utf8_of_byte[byte], code_point);
      byte_of_code_point[code_point] = static_cast<int16_t>(byte);
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables instance;
  return instance;
}

}  // namespace

void append_byte_level(std::string& out, std::string_view bytes) {
  const auto& table = tables();
  for (const char byte : bytes) out += table.utf8_of_byte[static_cast<unsigned char>(byte)];
}

std::optional<uint8_t> byte_of_byte_level_char(char32_t code_point) {
  if (code_point >= tables().byte_of_code_point.size()) return std::nullopt;
  const int16_t byte = tables().byte_of_code_point[code_point];
  if (byte < 0) return std::nullopt;
  return static_cast<uint8_t>(byte);
}

}  // namespace fast_llm::tokenizer
