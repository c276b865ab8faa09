// SentencePiece .model files: a small BPE model is trained here with libsentencepiece's trainer (no file to download),
// then loaded through Tokenizer::load as a file and as a folder. libsentencepiece does the tokenizing itself, so these
// tests check our wiring: lossless round trips, the model's BOS/EOS and special ids, vocabulary lookups, id range
// checks, and which file a folder load picks.
#include <gtest/gtest.h>

#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>

#include "fast_llm/core/error.h"
#include "fast_llm/tokenizer/tokenizer.h"

namespace fast_llm::tokenizer {
namespace {

namespace fs = std::filesystem;

class SentencePieceModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    folder_ = fs::temp_directory_path() / "fast_llm_sentencepiece_test";
    fs::remove_all(folder_);
    fs::create_directories(folder_);
    {
      std::ofstream corpus(folder_ / "corpus.txt");
      const char* lines[] = {"the quick brown fox jumps over the lazy dog", "hello world, hello tokenizer",
                             "sentence piece models split words into pieces", "numbers 12345 and symbols !?"};
      for (int repeat = 0; repeat < 50; ++repeat)
        for (const char* line : lines) corpus << line << " " << repeat << "\n";
    }
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + (folder_ / "corpus.txt").string() + " --model_prefix=" + (folder_ / "tokenizer").string() +
        " --vocab_size=300 --model_type=bpe --byte_fallback=true --normalization_rule_name=identity"
        " --minloglevel=2");
    ASSERT_TRUE(status.ok()) << status.ToString();
  }
  static void TearDownTestSuite() { fs::remove_all(folder_); }

  static fs::path folder_;
};
fs::path SentencePieceModel::folder_;

TEST_F(SentencePieceModel, RoundTripsAndSpecialIds) {
  const auto tokenizer = Tokenizer::load(folder_ / "tokenizer.model");
  EXPECT_EQ(tokenizer->vocab_size(), 300);
  // SentencePiece's defaults: <unk> 0, <s> 1, </s> 2.
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_EQ(tokenizer->token_to_id("<unk>"), 0);
  EXPECT_EQ(tokenizer->id_to_token(1), "<s>");
  EXPECT_FALSE(tokenizer->token_to_id("no such piece").has_value());
  EXPECT_TRUE(tokenizer->is_special(1));
  for (const std::string text : {"hello world", "the lazy fox 42", "émoji 🙂 falls back to bytes"}) {
    const auto ids = tokenizer->encode(text);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tokenizer->decode(ids), text);
    const auto with_bos = tokenizer->encode(text, true);
    ASSERT_EQ(with_bos.size(), ids.size() + 1);
    EXPECT_EQ(with_bos[0], 1);
    EXPECT_EQ(tokenizer->decode(with_bos, true), text);
  }
  EXPECT_THROW(tokenizer->decode(std::vector<int32_t>{300}), Error);
}

TEST_F(SentencePieceModel, FolderLoadTakesTheModelAndTokenizerConfig) {
  std::ofstream(folder_ / "tokenizer_config.json") << R"({"bos_token": "<s>", "eos_token": {"content": "<unk>"}})";
  const auto tokenizer = Tokenizer::load(folder_);
  EXPECT_EQ(tokenizer->vocab_size(), 300);
  EXPECT_EQ(tokenizer->eos_id(), 0);
  fs::remove(folder_ / "tokenizer_config.json");
}

TEST_F(SentencePieceModel, NotAModelIsAnErrorNamingTheFile) {
  std::ofstream(folder_ / "broken.model") << "not a protobuf";
  try {
    Tokenizer::load(folder_ / "broken.model");
    FAIL() << "loaded a broken model";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("broken.model"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace fast_llm::tokenizer
