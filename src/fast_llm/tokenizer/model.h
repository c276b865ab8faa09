// The model stage of a tokenizer.json (`model`): what turns one pre-token into ids. BPE (bpe_model.h) and WordPiece
// (wordpiece_model.h) implement it; make_model refuses the other types.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/tokenizer/json_fields.h"

namespace fast_llm::tokenizer {

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of `word` to `ids`.
  virtual void tokenize(std::string_view word, std::vector<int32_t>& ids) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  // The token of `id`, or nullptr when the vocabulary has none.
  virtual const std::string* id_to_token(int32_t id) const = 0;
  // One more than the largest id of the vocabulary.
  virtual int64_t size() const = 0;
  // The number of entries of the vocabulary.
  virtual int64_t entries() const = 0;
};

std::unique_ptr<Model> make_model(const Json& node, const JsonPlace& place);

}  // namespace fast_llm::tokenizer
