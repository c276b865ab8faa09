// Token string <-> id tables shared by the models and the added vocabulary: a hash map looked up by string_view
// without building a std::string, and the reverse vector (holes stay empty).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fast_llm::tokenizer {

struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};

using TokenIdMap = std::unordered_map<std::string, int32_t, StringViewHash, std::equal_to<>>;

inline std::optional<int32_t> find_token(const TokenIdMap& map, std::string_view token) {
  const auto it = map.find(token);
  if (it == map.end()) return std::nullopt;
  return it->second;
}

}  // namespace fast_llm::tokenizer
