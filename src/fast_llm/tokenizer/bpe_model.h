// The BPE model of tokenizer.json (`model.type: BPE`): a word (one pre-token) is split into characters, each
// looked up in the vocabulary (else its bytes as `<0xXX>` tokens with `byte_fallback`, else `unk_token`, fused when
// `fuse_unk`, else dropped, as Hugging Face's library does), then adjacent pairs are merged lowest rank first
// (leftmost on ties) until no pair of the merge table remains. With `ignore_merges` a word that is itself in the
// vocabulary is one token.
//
// Merging uses a linked list of symbols and, for long words, a priority queue of candidate pairs (a linear scan for
// short ones, which is faster there and picks the same pair). Merges sit in an open-addressing table keyed by the id
// pair, and single characters' ids in a direct table for the Basic Multilingual Plane: both are looked up once per
// symbol, where a std::unordered_map of strings cost most of the time on long words (Llama 2's, which have no
// pre-tokenizer). Results are cached per word in a bounded cache of each thread (no lock or shared cache line on the
// hot path, so threads scale), keyed by the model's serial number so that a later model never sees an earlier one's
// entries. Refused: `dropout` (random merges), non-empty `continuing_subword_prefix` /
// `end_of_word_suffix`.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fast_llm/tokenizer/json_fields.h"
#include "fast_llm/tokenizer/model.h"
#include "fast_llm/tokenizer/vocabulary.h"

namespace fast_llm::tokenizer {

class BpeModel final : public Model {
 public:
  BpeModel(const Json& model, const JsonPlace& place);

  // Appends the ids of `word` to `ids`.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const override;

  std::optional<int32_t> token_to_id(std::string_view token) const override { return find_token(vocabulary_, token); }
  // The token of `id`, or nullptr when the vocabulary has none.
  const std::string* id_to_token(int32_t id) const override;
  // One more than the largest id of the vocabulary.
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  // The number of entries of the vocabulary.
  int64_t entries() const override { return static_cast<int64_t>(vocabulary_.size()); }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const {
    const uint64_t key = pair_key(left, right);
    for (size_t slot = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;; slot = (slot + 1) & merge_mask_) {
      if (merge_keys_[slot] == key) return &merge_values_[slot];
      if (merge_keys_[slot] == kEmptyKey) return nullptr;
    }
  }
  void insert_merge(uint64_t key, Merge merge);
  // The id of the one-character token `character`, or -1.
  int32_t character_id(std::string_view character) const;
  void tokenize_uncached(std::string_view word, std::vector<int32_t>& ids) const;

  TokenIdMap vocabulary_;
  std::vector<std::string> tokens_;
  std::vector<bool> has_token_;
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};  // ids are non-negative, so no pair has this key
  std::vector<uint64_t> merge_keys_;
  std::vector<Merge> merge_values_;
  size_t merge_mask_ = 0;
  int merge_shift_ = 64;
  std::vector<int32_t> bmp_character_ids_;  // code point < 0x10000 -> id of that one-character token, or -1
  std::array<int32_t, 256> byte_fallback_ids_{};  // -1 where the vocabulary lacks <0xXX>
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::optional<int32_t> unk_id_;

  // Words longer than this are not cached (they rarely repeat).
  static constexpr size_t kCacheMaxWordBytes = 128;
  uint64_t serial_;
};

}  // namespace fast_llm::tokenizer
