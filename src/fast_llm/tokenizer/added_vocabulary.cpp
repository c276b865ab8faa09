// Added-token extraction as Hugging Face's AddedVocabulary::extract_and_normalize does it (see added_vocabulary.h).
#include "fast_llm/tokenizer/added_vocabulary.h"

#include <unicode/uchar.h>

#include <algorithm>

#include "fast_llm/tokenizer/utf8.h"

namespace fast_llm::tokenizer {
namespace {

// Rust's char::is_alphanumeric (Alphabetic or a number category) or '_'.
bool is_word_character(char32_t c) {
  const auto code = static_cast<UChar32>(c);
  const int8_t type = u_charType(code);
  return c == '_' || u_hasBinaryProperty(code, UCHAR_ALPHABETIC) || type == U_DECIMAL_DIGIT_NUMBER ||
         type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

// The code point that ends text[0, end).
char32_t code_point_before(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return next_code_point(text, start);
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view content, int32_t token_index) {
  int32_t node = 0;
  for (const char c : content) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
    const auto it = edges.find(key);
    if (it == edges.end()) {
      token.push_back(-1);
      node = edges[key] = static_cast<int32_t>(token.size()) - 1;
    } else {
      node = it->second;
    }
  }
  token[node] = token_index;
  first_bytes.set(static_cast<unsigned char>(content[0]));
}

int32_t AddedVocabulary::Trie::longest_at(std::string_view text, size_t position, size_t& end) const {
  int32_t node = 0, found = -1;
  for (size_t i = position; i < text.size(); ++i) {
    const auto it = edges.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]));
    if (it == edges.end()) break;
    node = it->second;
    if (token[node] >= 0) {
      found = token[node];
      end = i + 1;
    }
  }
  return found;
}

AddedVocabulary::AddedVocabulary(const Json& list, const JsonPlace& place, const Normalizer* normalizer,
                                 const std::function<std::optional<int32_t>(std::string_view)>& model_id,
                                 int64_t model_size) {
  if (list.is_null()) return;
  if (!list.is_array()) json_error(place, "expected an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonPlace token_place = place[i];
    const Json& node = list[i];
    AddedToken token{.content = json_string(node, "content", token_place),
                     .id = json_token_id(json_required(node, "id", token_place), token_place / "id"),
                     .special = json_bool(node, "special", token_place, false),
                     .single_word = json_bool(node, "single_word", token_place, false),
                     .lstrip = json_bool(node, "lstrip", token_place, false),
                     .rstrip = json_bool(node, "rstrip", token_place, false),
                     .normalized = json_bool(node, "normalized", token_place, true)};
    if (token.content.empty()) json_error(token_place / "content", "an added token cannot be empty");
    if (!is_valid_utf8(token.content)) json_error(token_place / "content", "not valid UTF-8");
    // The id Hugging Face's AddedVocabulary::add_tokens gives it.
    std::optional<int32_t> library_id = find_token(ids_, token.content);
    if (!library_id) library_id = model_id(token.content);
    if (!library_id) {
      int64_t next = model_size;
      if (!ids_.empty()) {
        int64_t largest = 0;
        for (const auto& [content, id] : ids_) largest = std::max<int64_t>(largest, id);
        if (largest >= model_size || model_size == 0) next = largest + 1;
      }
      library_id = static_cast<int32_t>(next);
    }
    if (*library_id != token.id)
      json_error(token_place / "id",
                 fmt::format("{} for \"{}\", but Hugging Face's library gives it id {} (the model's id of the same "
                             "string, else the next id after the vocabulary of {}); refused rather than tokenized with "
                             "ids the file does not state",
                             token.id, token.content, *library_id, model_size));
    end_id_ = std::max<int64_t>(end_id_, int64_t{token.id} + 1);
    ids_.insert_or_assign(token.content, token.id);
    index_of_id_[token.id] = tokens_.size();
    tokens_.push_back(std::move(token));
  }
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& token = tokens_[i];
    if (token.normalized && normalizer != nullptr) {
      std::string content = token.content;
      normalizer->normalize(content);
      if (!content.empty()) normalized_trie_.insert(content, static_cast<int32_t>(i));
    } else if (token.normalized) {
      normalized_trie_.insert(token.content, static_cast<int32_t>(i));
    } else {
      raw_trie_.insert(token.content, static_cast<int32_t>(i));
    }
  }
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  const auto it = index_of_id_.find(id);
  return it == index_of_id_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::split_with(const Trie& trie, const TextSegment& segment, std::vector<TextSegment>& out) const {
  const std::string_view text = segment.text;
  size_t segment_start = 0;
  const auto push_text = [&](size_t begin, size_t end) {
    if (end > begin) out.push_back({std::string(text.substr(begin, end - begin)), std::nullopt,
                                    segment.at_text_start && begin == 0});
  };
  for (size_t position = 0; position < text.size();) {
    size_t end = 0;
    const int32_t index = trie.first_bytes.test(static_cast<unsigned char>(text[position]))
                              ? trie.longest_at(text, position, end)
                              : -1;
    if (index < 0) {
      ++position;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = position;
    size_t stop = end;
    position = end;
    if (token.single_word) {
      const bool space_before = start == 0 || !is_word_character(code_point_before(text, start));
      size_t after = stop;
      const bool space_after = stop == text.size() || !is_word_character(next_code_point(text, after));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t previous = new_start - 1;
        while (previous > 0 && (static_cast<unsigned char>(text[previous]) & 0xC0) == 0x80) --previous;
        size_t cursor = previous;
        if (!u_isUWhiteSpace(static_cast<UChar32>(next_code_point(text, cursor)))) break;
        new_start = previous;
      }
      start = std::max(new_start, segment_start);
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t cursor = stop;
        if (!u_isUWhiteSpace(static_cast<UChar32>(next_code_point(text, cursor)))) break;
        stop = cursor;
      }
      position = stop;
    }
    push_text(segment_start, start);
    out.push_back({std::string(text.substr(start, stop - start)), token.id, false});
    segment_start = stop;
  }
  push_text(segment_start, text.size());
}

std::vector<TextSegment> AddedVocabulary::split(std::string_view text, const Normalizer* normalizer) const {
  std::vector<TextSegment> raw;
  TextSegment whole{std::string(text), std::nullopt, true};
  if (raw_trie_.edges.empty()) raw.push_back(std::move(whole));
  else split_with(raw_trie_, whole, raw);
  std::vector<TextSegment> out;
  out.reserve(raw.size());
  for (TextSegment& segment : raw) {
    if (segment.id) {
      out.push_back(std::move(segment));
      continue;
    }
    if (normalizer != nullptr) normalizer->normalize(segment.text);
    if (normalized_trie_.edges.empty()) {
      if (!segment.text.empty()) out.push_back(std::move(segment));
    } else {
      split_with(normalized_trie_, segment, out);
    }
  }
  return out;
}

}  // namespace fast_llm::tokenizer
