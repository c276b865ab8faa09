// The WordPiece model of tokenizer.json (`model.type: WordPiece`, BERT's): each word is cut greedily into the longest
// vocabulary entries from its start, every piece after the first carrying `continuing_subword_prefix` ("##"); a word
// with a part no entry covers, or longer than `max_input_chars_per_word` characters, is `unk_token` as a whole, as
// Hugging Face's library does it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/tokenizer/json_fields.h"
#include "fast_llm/tokenizer/model.h"
#include "fast_llm/tokenizer/vocabulary.h"

namespace fast_llm::tokenizer {

class WordPieceModel final : public Model {
 public:
  WordPieceModel(const Json& model, const JsonPlace& place);

  void tokenize(std::string_view word, std::vector<int32_t>& ids) const override;

  std::optional<int32_t> token_to_id(std::string_view token) const override { return find_token(vocabulary_, token); }
  const std::string* id_to_token(int32_t id) const override;
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  int64_t entries() const override { return static_cast<int64_t>(vocabulary_.size()); }

 private:
  TokenIdMap vocabulary_;
  std::vector<std::string> tokens_;
  std::vector<bool> has_token_;
  int32_t unk_id_ = 0;  // the id of `unk_token`, found at load
  std::string prefix_;
  int64_t max_input_chars_per_word_;
};

}  // namespace fast_llm::tokenizer
