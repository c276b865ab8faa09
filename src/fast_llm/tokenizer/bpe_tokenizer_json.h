// The tokenizer.json and tokenizer_config.json of a byte-level BPE tokenizer trained by bpe_trainer.h, in Hugging
// Face's exact formats, so that its `tokenizers` library, transformers' AutoTokenizer and our Tokenizer::load read it.
//
// The pipeline is Llama 3's: no normalizer; pre-tokenizer Sequence[Split(Llama 3's pattern, Isolated), ByteLevel
// (no prefix space, no regex)]; BPE model with the merges in rank order (`ignore_merges: false`, so that encoding a
// word always follows the merges: what the trainer learned is exactly what encode does); ByteLevel decoder. The first
// special token is BOS and EOS: the post-processor (TemplateProcessing) puts it before the text when special tokens are
// asked for, and tokenizer_config.json names it `bos_token` and `eos_token`. Keys are written in the order the library
// writes them and the vocabulary in id order, so the file reads like one the library saved.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "fast_llm/tokenizer/bpe_trainer.h"

namespace fast_llm::tokenizer {

// Llama 3's split pattern (letters, up to three digits, punctuation runs, newlines and spaces; English contractions).
inline constexpr const char* kLlama3SplitPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// The `pre_tokenizer` node of the files: what the trainer cuts words with, so that training and encoding agree.
nlohmann::ordered_json byte_level_bpe_pre_tokenizer();

// The whole tokenizer.json of `trained`; `special_tokens` as given to the trainer (ids 0..), the first one BOS.
nlohmann::ordered_json byte_level_bpe_tokenizer_json(const TrainedBpe& trained,
                                                     const std::vector<std::string>& special_tokens);

struct TokenizerFilesOptions {
  std::vector<std::string> special_tokens;  // as given to the trainer; the first one is BOS and EOS
  int64_t model_max_length = 2048;          // tokenizer_config.json's `model_max_length`
};

// Writes `folder`/tokenizer.json and `folder`/tokenizer_config.json (atomically, folders created as needed).
void write_byte_level_bpe_tokenizer(const std::filesystem::path& folder, const TrainedBpe& trained,
                                    const TokenizerFilesOptions& options);

}  // namespace fast_llm::tokenizer
