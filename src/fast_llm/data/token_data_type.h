// The integer types a dataset file may store token ids in (Fast-LLM's DataType names), shared by the
// `.fast_llm_dataset` format (memmap.h) and the legacy Megatron pair (legacy_memmap.h).
//
// Files store tokens little-endian at their natural size; readers hand them out as int64 whatever the stored type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace fast_llm::data {

enum class TokenDataType { uint8, int8, uint16, int16, uint32, int32, int64, uint64 };

std::string_view token_data_type_name(TokenDataType type);
size_t token_data_type_size(TokenDataType type);
std::optional<TokenDataType> parse_token_data_type(std::string_view name);
// The smallest unsigned type holding every token id below `vocab_size`, as Fast-LLM's prepare chooses.
TokenDataType token_data_type_for_vocab(int64_t vocab_size);
// Whether `token` can be stored in `type` without changing its value.
bool token_fits(int64_t token, TokenDataType type);

// Decodes `count` little-endian tokens of `type` starting at `bytes` (any alignment) into `out`.
void read_tokens(const std::byte* bytes, TokenDataType type, int64_t count, std::vector<int64_t>& out);

}  // namespace fast_llm::data
