// Hand-written tokenizer.json files, one feature at a time, with ids worked out by hand from the merge ranks and the
// rules of Hugging Face's library (no npm needed); the exactness test checks real files against the library itself.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "fast_llm/core/error.h"
#include "fast_llm/tokenizer/tokenizer.h"

namespace fast_llm::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A fresh folder per test holding the files it writes.
class TokenizerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    folder_ = fs::temp_directory_path() / (std::string("fast_llm_tokenizer_test_") + info->name());
    fs::remove_all(folder_);
    fs::create_directories(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }

  fs::path write(const std::string& name, const std::string& text) {
    const fs::path path = folder_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::unique_ptr<Tokenizer> load(const json& tokenizer_json) {
    return Tokenizer::load(write("tokenizer.json", tokenizer_json.dump()));
  }
  // The error message of loading `tokenizer_json`, which must fail.
  std::string load_error(const json& tokenizer_json) {
    try {
      load(tokenizer_json);
    } catch (const Error& error) {
      return error.what();
    }
    ADD_FAILURE() << "load accepted " << tokenizer_json.dump();
    return "";
  }

  fs::path folder_;
};

// A GPT-2 style byte-level BPE: "hello" merges l+l first (rank 0), then h+e, he+ll, hell+o; "Ġworld" merges Ġ+w
// (rank 4), o+r, Ġw+or and keeps l, d.
json byte_level_bpe() {
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array({json{{"id", 15}, {"content", "<|end|>"}, {"single_word", false}, {"lstrip", false},
                                         {"rstrip", false}, {"normalized", false}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", {{"h", 0}, {"e", 1}, {"l", 2}, {"o", 3}, {"w", 4}, {"r", 5}, {"d", 6}, {"Ġ", 7}, {"ll", 8},
                   {"he", 9}, {"hell", 10}, {"hello", 11}, {"Ġw", 12}, {"or", 13}, {"Ġwor", 14}}},
        {"merges", json::array({"l l", "h e", "he ll", "hell o", "Ġ w", "o r", "Ġw or"})}}}};
}

TEST_F(TokenizerFiles, ByteLevelBpeMergesByRank) {
  const auto tokenizer = load(byte_level_bpe());
  EXPECT_EQ(tokenizer->encode("hello world"), (std::vector<int32_t>{11, 14, 2, 6}));
  EXPECT_EQ(tokenizer->decode(std::vector<int32_t>{11, 14, 2, 6}), "hello world");
  EXPECT_EQ(tokenizer->vocab_size(), 16);
  EXPECT_EQ(tokenizer->token_to_id("Ġwor"), 14);
  EXPECT_EQ(tokenizer->id_to_token(10), "hell");
  EXPECT_FALSE(tokenizer->token_to_id("xyz").has_value());
}

TEST_F(TokenizerFiles, MergesAsPairs) {
  json file = byte_level_bpe();
  file["model"]["merges"] = json::array({json::array({"l", "l"}), json::array({"h", "e"}), json::array({"he", "ll"}),
                                         json::array({"hell", "o"})});
  EXPECT_EQ(load(file)->encode("hello"), (std::vector<int32_t>{11}));
}

TEST_F(TokenizerFiles, SpecialAddedTokenIsCutOutAndSkippable) {
  const auto tokenizer = load(byte_level_bpe());
  EXPECT_EQ(tokenizer->encode("hello<|end|>hello"), (std::vector<int32_t>{11, 15, 11}));
  EXPECT_TRUE(tokenizer->is_special(15));
  EXPECT_FALSE(tokenizer->is_special(11));
  EXPECT_EQ(tokenizer->decode(std::vector<int32_t>{11, 15, 11}), "hello<|end|>hello");
  EXPECT_EQ(tokenizer->decode(std::vector<int32_t>{11, 15, 11}, true), "hellohello");
}

TEST_F(TokenizerFiles, CharacterOutsideVocabularyIsDroppedWithoutUnk) {
  // As Hugging Face's BPE (checked with tokenizers@0.23.2): no unk_token, no byte fallback: the character produces no
  // symbol, so its neighbours merge across it ("hexllo" as "hello").
  EXPECT_EQ(load(byte_level_bpe())->encode("hexllo"), (std::vector<int32_t>{11}));
}

TEST_F(TokenizerFiles, DecodeRejectsUnknownId) {
  EXPECT_THROW(load(byte_level_bpe())->decode(std::vector<int32_t>{99}), Error);
}

TEST_F(TokenizerFiles, RefusesDropoutNamingFileAndField) {
  json file = byte_level_bpe();
  file["model"]["dropout"] = 0.1;
  const std::string message = load_error(file);
  EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << message;
  EXPECT_NE(message.find("model.dropout"), std::string::npos) << message;
}

TEST_F(TokenizerFiles, RefusesUnknownNormalizer) {
  json file = byte_level_bpe();
  file["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  const std::string message = load_error(file);
  EXPECT_NE(message.find("normalizer.type"), std::string::npos) << message;
  EXPECT_NE(message.find("Precompiled"), std::string::npos) << message;
}

TEST_F(TokenizerFiles, RefusesOtherModels) {
  json file = byte_level_bpe();
  file["model"]["type"] = "Unigram";
  EXPECT_NE(load_error(file).find("Unigram"), std::string::npos);
}

TEST_F(TokenizerFiles, MalformedJsonNamesTheFile) {
  // Truncated, and a number too large for a double (the JSON library reports that as out_of_range, not parse_error;
  // found by fuzz_tokenizer_json).
  for (const char* text : {"{\"model\": ", "310e310e1,", "{\"model\": {\"dropout\": 1e999}}"}) {
    write("tokenizer.json", text);
    try {
      Tokenizer::load(folder_);
      FAIL() << "load accepted " << text;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("tokenizer.json"), std::string::npos) << error.what();
    }
  }
}

TEST_F(TokenizerFiles, TokenizerConfigGivesBosAndEos) {
  write("tokenizer.json", byte_level_bpe().dump());
  write("tokenizer_config.json", R"({"bos_token": {"content": "hello"}, "eos_token": "<|end|>"})");
  const auto tokenizer = Tokenizer::load(folder_);
  EXPECT_EQ(tokenizer->bos_id(), 11);
  EXPECT_EQ(tokenizer->eos_id(), 15);
}

TEST_F(TokenizerFiles, TokenizerConfigNullBosMeansNone) {
  // As Qwen's tokenizer_config.json says it: no BOS token.
  write("tokenizer.json", byte_level_bpe().dump());
  write("tokenizer_config.json", R"({"bos_token": null, "eos_token": {"content": "<|end|>", "special": true}})");
  const auto tokenizer = Tokenizer::load(folder_ / "tokenizer.json");
  EXPECT_FALSE(tokenizer->bos_id().has_value());
  EXPECT_EQ(tokenizer->eos_id(), 15);
}

TEST_F(TokenizerFiles, TokenizerConfigNamingAnUnknownTokenIsAnError) {
  write("tokenizer.json", byte_level_bpe().dump());
  write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  EXPECT_THROW(Tokenizer::load(folder_), Error);
}

TEST_F(TokenizerFiles, EncodeBatchMatchesEncode) {
  const auto tokenizer = load(byte_level_bpe());
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i) texts.push_back(i % 2 ? "hello world" : "world<|end|>hello hello");
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  const auto batch = tokenizer->encode_batch(views, false, 3);
  ASSERT_EQ(batch.size(), texts.size());
  EXPECT_EQ(batch[1], (std::vector<int32_t>{11, 14, 2, 6}));
  EXPECT_EQ(batch[0], (std::vector<int32_t>{4, 13, 2, 6, 15, 11, 7, 11}));
}

TEST_F(TokenizerFiles, EncodeBatchFromSeveralThreadsAtOnce) {
  // Calls share the process's tokenizing threads (queued in turn) and each gets its own texts' ids.
  const auto tokenizer = load(byte_level_bpe());
  const std::vector<std::string> texts{"hello world", "world", "hello<|end|>"};
  const std::vector<std::vector<int32_t>> expected{{11, 14, 2, 6}, {4, 13, 2, 6}, {11, 15}};
  std::vector<std::thread> callers;
  std::atomic<int> mismatches{0};
  for (int caller = 0; caller < 3; ++caller) {
    callers.emplace_back([&, caller] {
      std::vector<std::string_view> views;
      for (int i = 0; i < 30; ++i) views.push_back(texts[(i + caller) % 3]);
      for (int round = 0; round < 20; ++round) {
        const auto batch = tokenizer->encode_batch(views, false, 3);
        for (int i = 0; i < 30; ++i) mismatches += batch[i] != expected[(i + caller) % 3];
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace fast_llm::tokenizer
