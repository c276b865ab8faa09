// Added tokens of tokenizer.json (`added_tokens`): strings that are cut out of the text before normalization and
// pre-tokenization and become one id each, as Hugging Face's AddedVocabulary does. Tokens with `normalized: false`
// are found in the raw text; the rest of the text is normalized, then tokens with `normalized: true` (their content
// normalized too) are found in it. Matching is leftmost-longest over all tokens of a kind (a trie walked from each
// position); `single_word` drops a match touching a word character, `lstrip` / `rstrip` take the whitespace beside it.
// The library does not take an added token's id from the file: it gives the model's id when the model has the
// content, else the next id after the vocabulary; a file whose ids disagree is refused rather than tokenized with ids
// it does not state.
#pragma once

#include <bitset>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fast_llm/tokenizer/json_fields.h"
#include "fast_llm/tokenizer/normalizers.h"
#include "fast_llm/tokenizer/vocabulary.h"

namespace fast_llm::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id;
  bool special;
  bool single_word;
  bool lstrip;
  bool rstrip;
  bool normalized;
};

// A stretch of text: an added token (`id` set) or text for the model.
struct TextSegment {
  std::string text;
  std::optional<int32_t> id;
  bool at_text_start;
};

class AddedVocabulary {
 public:
  // `model_id`: the model's id of a token string; `model_size`: the number of entries of its vocabulary.
  AddedVocabulary(const Json& list, const JsonPlace& place, const Normalizer* normalizer,
                  const std::function<std::optional<int32_t>(std::string_view)>& model_id, int64_t model_size);

  // `text` (valid UTF-8) as segments; text segments are normalized.
  std::vector<TextSegment> split(std::string_view text, const Normalizer* normalizer) const;

  std::optional<int32_t> token_to_id(std::string_view content) const { return find_token(ids_, content); }
  const AddedToken* find(int32_t id) const;
  // One more than the largest added id; 0 without added tokens.
  int64_t end_id() const { return end_id_; }

 private:
  // A byte trie of token contents; `token` is the index in tokens_ of the token ending at a node, or -1.
  struct Trie {
    std::vector<int32_t> token{-1};
    std::unordered_map<uint64_t, int32_t> edges;  // (node << 8 | byte) -> child
    std::bitset<256> first_bytes;
    void insert(std::string_view content, int32_t token_index);
    // The longest token starting at text[position], or -1.
    int32_t longest_at(std::string_view text, size_t position, size_t& end) const;
  };
  void split_with(const Trie& trie, const TextSegment& segment, std::vector<TextSegment>& out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> index_of_id_;
  TokenIdMap ids_;
  Trie raw_trie_, normalized_trie_;
  int64_t end_id_ = 0;
};

}  // namespace fast_llm::tokenizer
