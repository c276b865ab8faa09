#include "fast_llm/data/token_data_type.h"

#include <limits>

#include "fast_llm/data/mapped_file.h"

namespace fast_llm::data {

std::string_view token_data_type_name(TokenDataType type) {
  switch (type) {
    case TokenDataType::uint8: return "uint8";
    case TokenDataType::int8: return "int8";
    case TokenDataType::uint16: return "uint16";
    case TokenDataType::int16: return "int16";
    case TokenDataType::uint32: return "uint32";
    case TokenDataType::int32: return "int32";
    case TokenDataType::int64: return "int64";
    case TokenDataType::uint64: return "uint64";
  }
  return "?";
}

size_t token_data_type_size(TokenDataType type) {
  switch (type) {
    case TokenDataType::uint8:
    case TokenDataType::int8: return 1;
    case TokenDataType::uint16:
    case TokenDataType::int16: return 2;
    case TokenDataType::uint32:
    case TokenDataType::int32: return 4;
    case TokenDataType::int64:
    case TokenDataType::uint64: return 8;
  }
  return 0;
}

std::optional<TokenDataType> parse_token_data_type(std::string_view name) {
  for (TokenDataType type : {TokenDataType::uint8, TokenDataType::int8, TokenDataType::uint16, TokenDataType::int16,
                             TokenDataType::uint32, TokenDataType::int32, TokenDataType::int64, TokenDataType::uint64})
    if (token_data_type_name(type) == name) return type;
  return std::nullopt;
}

TokenDataType token_data_type_for_vocab(int64_t vocab_size) {
  if (vocab_size <= (int64_t(1) << 8)) return TokenDataType::uint8;
  if (vocab_size <= (int64_t(1) << 16)) return TokenDataType::uint16;
  if (vocab_size <= (int64_t(1) << 32)) return TokenDataType::uint32;
  return TokenDataType::int64;
}

bool token_fits(int64_t token, TokenDataType type) {
  switch (type) {
    case TokenDataType::uint8: return token >= 0 && token <= 0xFF;
    case TokenDataType::int8: return token >= -128 && token <= 127;
    case TokenDataType::uint16: return token >= 0 && token <= 0xFFFF;
    case TokenDataType::int16: return token >= -32768 && token <= 32767;
    case TokenDataType::uint32: return token >= 0 && token <= int64_t(0xFFFFFFFFu);
    case TokenDataType::int32: return token >= std::numeric_limits<int32_t>::min() && token <= std::numeric_limits<int32_t>::max();
    case TokenDataType::int64: return true;
    case TokenDataType::uint64: return token >= 0;
  }
  return false;
}

namespace {
int64_t read_token(const std::byte* pointer, TokenDataType type) {
  switch (type) {
    case TokenDataType::uint8: return load_unaligned<uint8_t>(pointer);
    case TokenDataType::int8: return load_unaligned<int8_t>(pointer);
    case TokenDataType::uint16: return load_unaligned<uint16_t>(pointer);
    case TokenDataType::int16: return load_unaligned<int16_t>(pointer);
    case TokenDataType::uint32: return load_unaligned<uint32_t>(pointer);
    case TokenDataType::int32: return load_unaligned<int32_t>(pointer);
    case TokenDataType::int64: return load_unaligned<int64_t>(pointer);
    case TokenDataType::uint64: return int64_t(load_unaligned<uint64_t>(pointer));
  }
  return 0;
}
}  // namespace

void read_tokens(const std::byte* bytes, TokenDataType type, int64_t count, std::vector<int64_t>& out) {
  size_t item = token_data_type_size(type);
  out.resize(size_t(count));
  for (int64_t index = 0; index < count; ++index) out[size_t(index)] = read_token(bytes + size_t(index) * item, type);
}

}  // namespace fast_llm::data
