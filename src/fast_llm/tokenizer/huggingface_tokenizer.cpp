// Composition of tokenizer.json's components (see huggingface_tokenizer.h).
#include "fast_llm/tokenizer/huggingface_tokenizer.h"

#include "fast_llm/tokenizer/utf8.h"

namespace fast_llm::tokenizer {

HuggingFaceTokenizer::HuggingFaceTokenizer(const Json& json, const std::filesystem::path& file) {
  const JsonPlace root{file.string(), ""};
  if (!json.is_object()) json_error(root, "expected a JSON object");
  for (const char* key : {"truncation", "padding"})
    if (json_present(json, key)) json_unsupported(root / key, fmt::format("a non-null {}", key));
  model_ = make_model(json_required(json, "model", root), root / "model");
  const auto component = [&](const char* key) -> const Json& {
    static const Json null_value;
    return json.contains(key) ? json.at(key) : null_value;
  };
  normalizer_ = make_normalizer(component("normalizer"), root / "normalizer");
  pre_tokenizer_ = make_pre_tokenizer(component("pre_tokenizer"), root / "pre_tokenizer");
  post_processor_ = make_post_processor(component("post_processor"), root / "post_processor");
  decoder_ = make_decoder(component("decoder"), root / "decoder");
  added_ = std::make_unique<AddedVocabulary>(
      component("added_tokens"), root / "added_tokens", normalizer_.get(),
      [this](std::string_view token) { return model_->token_to_id(token); }, model_->entries());
}

std::vector<int32_t> HuggingFaceTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  const std::string valid = is_valid_utf8(text) ? std::string() : to_valid_utf8(text);
  const std::string_view input = valid.empty() ? text : std::string_view(valid);
  std::vector<TextPiece> pieces;
  for (TextSegment& segment : added_->split(input, normalizer_.get())) {
    if (segment.id) {
      ids.push_back(*segment.id);
      continue;
    }
    pieces.clear();
    pieces.push_back({std::move(segment.text), segment.at_text_start});
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
    for (const TextPiece& piece : pieces) model_->tokenize(piece.text, ids);
  }
  if (add_special_tokens && post_processor_) post_processor_->process(ids);
  return ids;
}

std::string HuggingFaceTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const AddedToken* added = added_->find(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
    } else if (const std::string* token = model_->id_to_token(id)) {
      tokens.push_back(*token);
    } else {
      throw Error("tokenizer", fmt::format("decode: id {} is not in the vocabulary (size {})", id, vocab_size()));
    }
  }
  if (decoder_) {
    decoder_->decode_chain(tokens);
    std::string text;
    for (const std::string& token : tokens) text += token;
    return text;
  }
  // Without a decoder Hugging Face's library joins the tokens with spaces.
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) text += ' ';
    text += tokens[i];
  }
  return text;
}

int64_t HuggingFaceTokenizer::vocab_size() const { return std::max(model_->size(), added_->end_id()); }

std::optional<int32_t> HuggingFaceTokenizer::token_to_id(std::string_view token) const {
  if (const auto id = added_->token_to_id(token)) return id;
  return model_->token_to_id(token);
}

std::optional<std::string> HuggingFaceTokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* added = added_->find(id)) return added->content;
  if (const std::string* token = model_->id_to_token(id)) return *token;
  return std::nullopt;
}

bool HuggingFaceTokenizer::is_special(int32_t id) const {
  const AddedToken* added = added_->find(id);
  return added != nullptr && added->special;
}

}  // namespace fast_llm::tokenizer
