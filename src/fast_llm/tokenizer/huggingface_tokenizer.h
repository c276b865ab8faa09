// A tokenizer.json tokenizer: added vocabulary, normalizer, pre-tokenizer, BPE model, post-processor and decoder,
// composed as Hugging Face's Tokenizer composes them:
//   encode: lossy UTF-8 -> added tokens cut out (raw, then normalized) -> each text segment pre-tokenized -> each
//           pre-token through the model -> with add_special_tokens, the post-processor.
//   decode: each id's token string (added tokens included; special ones dropped with skip_special_tokens) -> the
//           decoder chain -> joined.
// Refused at load: models other than BPE and WordPiece, `truncation` and `padding` (they would change encode's
// output), and each component's unsupported types (see their headers).
#pragma once

#include <filesystem>
#include <memory>

#include "fast_llm/tokenizer/added_vocabulary.h"
#include "fast_llm/tokenizer/model.h"
#include "fast_llm/tokenizer/decoders.h"
#include "fast_llm/tokenizer/normalizers.h"
#include "fast_llm/tokenizer/post_processors.h"
#include "fast_llm/tokenizer/pre_tokenizers.h"
#include "fast_llm/tokenizer/tokenizer.h"

namespace fast_llm::tokenizer {

class HuggingFaceTokenizer final : public Tokenizer {
 public:
  // `json`: the parsed file; `file` names it in errors.
  HuggingFaceTokenizer(const Json& json, const std::filesystem::path& file);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const override;
  int64_t vocab_size() const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  bool is_special(int32_t id) const override;

 private:
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<AddedVocabulary> added_;
};

}  // namespace fast_llm::tokenizer
