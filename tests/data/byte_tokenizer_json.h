// A Hugging Face tokenizer.json whose ids are those of `prepare byte_corpus` (data/corpus.h): id b < 256 is the byte
// b, 256 is `<s>` (BOS) and 257 `</s>` (EOS), then the four FIM sentinels 258-261. It is a byte-level BPE without
// merges (GPT-2's byte-to-character mapping, so every byte is one token), so datasets made by `byte_corpus` decode and
// encode exactly with it. Tests write it, with the tokenizer_config.json that names BOS and EOS, into a folder.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

namespace fast_llm::testing {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others for 256, 257, ... in order.
inline int byte_level_character(int byte) {
  auto printable = [](int value) {
    return (value >= 33 && value <= 126) || (value >= 161 && value <= 172) || (value >= 174 && value <= 255);
  };
  if (printable(byte)) return byte;
  int shifted = 0;
  for (int value = 0; value < byte; ++value)
    if (!printable(value)) ++shifted;
  return 256 + shifted;
}

inline std::string byte_tokenizer_json() {
  std::string vocab;
  for (int byte = 0; byte < 256; ++byte)
    vocab += fmt::format("{}\"\\u{:04x}\": {}", byte == 0 ? "" : ", ", byte_level_character(byte), byte);
  const char* special[] = {"<s>", "</s>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>"};
  std::string added;
  for (int index = 0; index < 6; ++index) {
    vocab += fmt::format(", \"{}\": {}", special[index], 256 + index);
    added += fmt::format("{}{{\"id\": {}, \"content\": \"{}\", \"single_word\": false, \"lstrip\": false, "
                         "\"rstrip\": false, \"normalized\": false, \"special\": true}}",
                         index == 0 ? "" : ", ", 256 + index, special[index]);
  }
  return fmt::format(
      R"({{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [{}], "normalizer": null,
"pre_tokenizer": {{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}},
"post_processor": null, "decoder": {{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
"use_regex": true}}, "model": {{"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
"end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": {{{}}},
"merges": []}}}})",
      added, vocab);
}

// Writes tokenizer.json and tokenizer_config.json into `folder` (created) and returns the folder.
inline std::filesystem::path write_byte_tokenizer(const std::filesystem::path& folder) {
  std::filesystem::create_directories(folder);
  std::ofstream(folder / "tokenizer.json") << byte_tokenizer_json();
  std::ofstream(folder / "tokenizer_config.json") << R"({"bos_token": "<s>", "eos_token": "</s>"})";
  return folder;
}

}  // namespace fast_llm::testing
