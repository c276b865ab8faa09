// Reading tokenizer.json and tokenizer_config.json fields with errors that name the file and the field path, e.g.
// `[tokenizer] models/tokenizer.json: pre_tokenizer.pretokenizers[1].behavior: "Shuffled" is not supported`.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/tokenizer/vocabulary.h"

namespace fast_llm::tokenizer {

using Json = nlohmann::json;

// Where a JSON value sits: its file and its field path.
struct JsonPlace {
  std::string file;
  std::string field;

  JsonPlace operator/(std::string_view key) const {
    return {file, field.empty() ? std::string(key) : field + "." + std::string(key)};
  }
  JsonPlace operator[](size_t index) const { return {file, field + "[" + std::to_string(index) + "]"}; }
  std::string str() const { return field.empty() ? file : file + ": " + field; }
};

[[noreturn]] inline void json_error(const JsonPlace& place, std::string_view message) {
  throw Error("tokenizer", fmt::format("{}: {}", place.str(), message));
}

// A feature of the file outside the supported set (docs/tokenizers.md lists both): `load` refuses it, naming it, rather
// than tokenizing differently.
[[noreturn]] inline void json_unsupported(const JsonPlace& place, std::string_view feature) {
  throw NotSupportedError("tokenizer", fmt::format("{}: {} is not supported", place.str(), feature));
}

// node[key], which must be present and not null.
inline const Json& json_required(const Json& node, std::string_view key, const JsonPlace& place) {
  if (!node.is_object()) json_error(place, "expected an object");
  const auto it = node.find(key);
  if (it == node.end() || it->is_null()) json_error(place / key, "missing");
  return *it;
}

inline bool json_present(const Json& node, std::string_view key) {
  if (!node.is_object()) return false;
  const auto it = node.find(key);
  return it != node.end() && !it->is_null();
}

inline std::string json_string(const Json& node, std::string_view key, const JsonPlace& place) {
  const Json& value = json_required(node, key, place);
  if (!value.is_string()) json_error(place / key, fmt::format("expected a string, got {}", value.dump()));
  return value.get<std::string>();
}

inline std::optional<std::string> json_optional_string(const Json& node, std::string_view key,
                                                       const JsonPlace& place) {
  if (!json_present(node, key)) return std::nullopt;
  return json_string(node, key, place);
}

inline bool json_bool(const Json& node, std::string_view key, const JsonPlace& place, bool fallback) {
  if (!json_present(node, key)) return fallback;
  const Json& value = node.at(std::string(key));
  if (!value.is_boolean()) json_error(place / key, fmt::format("expected true or false, got {}", value.dump()));
  return value.get<bool>();
}

inline int64_t json_integer(const Json& node, std::string_view key, const JsonPlace& place) {
  const Json& value = json_required(node, key, place);
  if (!value.is_number_integer()) json_error(place / key, fmt::format("expected an integer, got {}", value.dump()));
  return value.get<int64_t>();
}

inline int32_t json_token_id(const Json& value, const JsonPlace& place) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > INT32_MAX)
    json_error(place, fmt::format("expected a token id (an integer in [0, 2^31)), got {}", value.dump()));
  return static_cast<int32_t>(value.get<int64_t>());
}

// A model's `vocab` object ({token: id}, required) into its string -> id map and its id -> string tables (`has_token`
// marks the ids in use). Ids are 0..n-1 in every real file; a few holes are allowed, not an id that would size the
// tables to gigabytes.
inline void read_model_vocabulary(const Json& model, const JsonPlace& place, TokenIdMap& ids,
                                  std::vector<std::string>& tokens, std::vector<bool>& has_token) {
  const Json& vocabulary = json_required(model, "vocab", place);
  if (!vocabulary.is_object()) json_error(place / "vocab", "expected an object of token: id");
  ids.reserve(vocabulary.size());
  const int64_t largest_allowed_id = static_cast<int64_t>(vocabulary.size()) + 65536;
  for (const auto& [token, id_value] : vocabulary.items()) {
    const int32_t id = json_token_id(id_value, place / "vocab" / token);
    if (id > largest_allowed_id)
      json_error(place / "vocab" / token, fmt::format("id {} is far beyond the vocabulary's {} entries", id,
                                                      vocabulary.size()));
    ids.emplace(token, id);
    if (static_cast<size_t>(id) >= tokens.size()) {
      tokens.resize(id + 1);
      has_token.resize(id + 1, false);
    }
    tokens[id] = token;
    has_token[id] = true;
  }
}

}  // namespace fast_llm::tokenizer
