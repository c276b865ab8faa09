// Training a byte-level BPE vocabulary (GPT-2's and Llama 3's kind) from text, as Hugging Face's BpeTrainer does.
//
// The text is cut as the tokenizer will cut it when encoding: special-token strings first (never split, never merged),
// then the pre-tokenizer of the file we write (Llama 3's split pattern, then the byte-level alphabet; see
// bpe_tokenizer_json.h), so that training and encoding see the same words. Distinct words are counted in parallel.
// Merging starts from the special tokens (ids 0..), then the alphabet sorted by code point (all 256 byte-level
// characters with `full_byte_alphabet`, else those that occur), and repeatedly merges the most frequent adjacent pair,
// counted over all words weighted by their counts. Ties go to the pair with the smaller (left id, right id): this is
// Hugging Face's rule, so that on the same words both trainers give the same merges in the same order (tested against
// the library). Pair counts are updated incrementally from the words that hold the merged pair, and the next pair
// comes from a max-heap whose stale entries are re-counted when popped, so one merge costs the occurrences it
// touches, not the corpus.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fast_llm::tokenizer {

struct BpeTrainingProgress {
  enum class Stage { counting_words, merging };
  Stage stage;
  int64_t done;   // documents counted, or vocabulary entries made
  int64_t total;  // documents, or the vocabulary size asked for
};

struct BpeTrainerOptions {
  // Entries of the vocabulary, special tokens and alphabet included. Training stops earlier when no pair is left.
  int64_t vocab_size = 4096;
  // Added tokens, in id order from 0: found in the text before pre-tokenization and never merged.
  std::vector<std::string> special_tokens;
  // All 256 byte-level characters in the vocabulary (any text can be encoded), not only those of the training text.
  bool full_byte_alphabet = true;
  // Threads for counting words (0: all cores).
  int threads = 0;
  // Called now and then from the calling thread.
  std::function<void(const BpeTrainingProgress&)> progress;
};

struct TrainedBpe {
  // The token string of each id (byte-level alphabet), special tokens first.
  std::vector<std::string> vocabulary;
  // The merges in rank order, as the ids of their two parts.
  std::vector<std::pair<int32_t, int32_t>> merges;
  int64_t words = 0;           // pre-tokenized words in the text
  int64_t distinct_words = 0;  // of which distinct
};

// Trains on `documents` (valid UTF-8 each). Throws fast_llm::Error("bpe_trainer", ...) when vocab_size cannot hold the
// special tokens and the alphabet, or when a special token is empty or repeated.
TrainedBpe train_byte_level_bpe(std::span<const std::string_view> documents, const BpeTrainerOptions& options);

}  // namespace fast_llm::tokenizer
