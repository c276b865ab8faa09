// SentencePiece .model files through libsentencepiece (see sentencepiece_tokenizer.h).
#include "fast_llm/tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "fast_llm/core/error.h"

namespace fast_llm::tokenizer {

SentencePieceTokenizer::SentencePieceTokenizer(const std::filesystem::path& file)
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const auto status = processor_->Load(file.string());
  if (!status.ok())
    throw Error("tokenizer", fmt::format("{}: not a SentencePiece model ({})", file.string(), status.ToString()));
  if (processor_->bos_id() >= 0) bos_id_ = processor_->bos_id();
  if (processor_->eos_id() >= 0) eos_id_ = processor_->eos_id();
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int> pieces;
  const auto status = processor_->Encode(std::string(text), &pieces);
  if (!status.ok()) throw Error("tokenizer", fmt::format("SentencePiece encode failed: {}", status.ToString()));
  std::vector<int32_t> ids;
  ids.reserve(pieces.size() + 1);
  if (add_special_tokens && processor_->bos_id() >= 0) ids.push_back(processor_->bos_id());
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  return ids;
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<int> pieces;
  pieces.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id < 0 || id >= processor_->GetPieceSize())
      throw Error("tokenizer", fmt::format("decode: id {} is not in the vocabulary (size {})", id, vocab_size()));
    if (skip_special_tokens && processor_->IsControl(id)) continue;
    pieces.push_back(id);
  }
  std::string text;
  const auto status = processor_->Decode(pieces, &text);
  if (!status.ok()) throw Error("tokenizer", fmt::format("SentencePiece decode failed: {}", status.ToString()));
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }

std::optional<int32_t> SentencePieceTokenizer::token_to_id(std::string_view token) const {
  const int id = processor_->PieceToId(std::string(token));
  // PieceToId answers the unknown id for any unknown piece: only the unknown piece itself maps to it.
  if (processor_->IsUnknown(id) && processor_->IdToPiece(id) != token) return std::nullopt;
  return id;
}

std::optional<std::string> SentencePieceTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= processor_->GetPieceSize()) return std::nullopt;
  return processor_->IdToPiece(id);
}

bool SentencePieceTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < processor_->GetPieceSize() && (processor_->IsControl(id) || processor_->IsUnknown(id));
}

}  // namespace fast_llm::tokenizer
