// Greedy longest-match WordPiece (see wordpiece_model.h).
#include "fast_llm/tokenizer/wordpiece_model.h"

#include "fast_llm/tokenizer/utf8.h"

namespace fast_llm::tokenizer {

WordPieceModel::WordPieceModel(const Json& model, const JsonPlace& place) {
  const std::string unk_token = json_optional_string(model, "unk_token", place).value_or("[UNK]");
  prefix_ = json_optional_string(model, "continuing_subword_prefix", place).value_or("##");
  max_input_chars_per_word_ =
      json_present(model, "max_input_chars_per_word") ? json_integer(model, "max_input_chars_per_word", place) : 100;
  read_model_vocabulary(model, place, vocabulary_, tokens_, has_token_);
  const std::optional<int32_t> unk = find_token(vocabulary_, unk_token);
  if (!unk) json_error(place / "unk_token", fmt::format("\"{}\" is not in the vocabulary", unk_token));
  unk_id_ = *unk;
}

const std::string* WordPieceModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

void WordPieceModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  const int32_t unk = unk_id_;
  // Character boundaries: piece ends shrink one character at a time.
  std::vector<size_t> boundaries;
  for (size_t position = 0; position < word.size();) {
    boundaries.push_back(position);
    next_code_point(word, position);
  }
  boundaries.push_back(word.size());
  if (static_cast<int64_t>(boundaries.size()) - 1 > max_input_chars_per_word_) {
    ids.push_back(unk);
    return;
  }
  const size_t first = ids.size();
  std::string candidate;
  size_t start = 0;  // index into boundaries
  while (start + 1 < boundaries.size()) {
    std::optional<int32_t> found;
    size_t end = boundaries.size() - 1;
    for (; end > start; --end) {
      const std::string_view piece = word.substr(boundaries[start], boundaries[end] - boundaries[start]);
      if (start == 0) {
        found = find_token(vocabulary_, piece);
      } else {
        candidate.assign(prefix_);
        candidate.append(piece);
        found = find_token(vocabulary_, candidate);
      }
      if (found) break;
    }
    if (!found) {
      ids.resize(first);
      ids.push_back(unk);
      return;
    }
    ids.push_back(*found);
    start = end;
  }
}

}  // namespace fast_llm::tokenizer
