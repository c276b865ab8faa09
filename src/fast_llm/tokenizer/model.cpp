// make_model: the `model.type` of tokenizer.json to its implementation (see model.h).
#include "fast_llm/tokenizer/model.h"

#include "fast_llm/tokenizer/bpe_model.h"
#include "fast_llm/tokenizer/wordpiece_model.h"

namespace fast_llm::tokenizer {

std::unique_ptr<Model> make_model(const Json& node, const JsonPlace& place) {
  // Files written by old versions of the library leave out the model type; a BPE model has merges.
  const std::string type = json_present(node, "type")      ? json_string(node, "type", place)
                           : json_present(node, "merges") ? "BPE"
                                                          : "(none)";
  if (type == "BPE") return std::make_unique<BpeModel>(node, place);
  if (type == "WordPiece") return std::make_unique<WordPieceModel>(node, place);
  json_unsupported(place / "type", fmt::format("model type \"{}\"", type));
}

}  // namespace fast_llm::tokenizer
