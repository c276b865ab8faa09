// The byte-level BPE trainer: merges of tiny texts worked out by hand (counts, the tie-break), special tokens, the
// alphabet, exact vocabulary sizes, the files' fields, and our loader encoding the training text as the merges imply
// (an independent naive BPE here) and decoding it back. With FAST_LLM_BPE_AGREEMENT_DIR set, it also writes what
// check_bpe_training.js compares with Hugging Face's own trainer and tokenizer (ctest: bpe_training_agrees).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "fast_llm/core/error.h"
#include "fast_llm/tokenizer/bpe_tokenizer_json.h"
#include "fast_llm/tokenizer/bpe_trainer.h"
#include "fast_llm/tokenizer/byte_level.h"
#include "fast_llm/tokenizer/tokenizer.h"

namespace fast_llm::tokenizer {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kSpecials = {"<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>",
                                            "<fim_pad>"};

TrainedBpe train(const std::vector<std::string>& texts, BpeTrainerOptions options) {
  const std::vector<std::string_view> documents(texts.begin(), texts.end());
  return train_byte_level_bpe(documents, options);
}

std::vector<std::pair<std::string, std::string>> merge_strings(const TrainedBpe& trained) {
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& [left, right] : trained.merges)
    merges.emplace_back(trained.vocabulary[left], trained.vocabulary[right]);
  return merges;
}

// A varied text, the same on every run: words from syllables (several scripts), numbers, code, punctuation, runs of
// spaces and newlines, contractions, and the special-token strings.
std::vector<std::string> varied_lines(int count) {
  const std::vector<std::string> syllables = {"ka", "lo", "mi", "tra", "en", "the", "ing", "qu", "é", "ça", "über",
                                              "на", "ли", "日本", "語", "de", "ab", "x", "🙂", "ion", "st"};
  const std::vector<std::string> glue = {" ", " ", " ", ", ", ". ", "  ", "\t", "'s ", "'ll ", " (", ") ", " = ",
                                         "();\n", " -> ", "\n\n", " \n", "!", " 42", " 1984 ", " 3.14"};
  uint64_t state = 12345;
  auto next = [&state](size_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>((state >> 33) % n);
  };
  std::vector<std::string> lines;
  for (int line = 0; line < count; ++line) {
    std::string text;
    const size_t words = 3 + next(10);
    for (size_t w = 0; w < words; ++w) {
      const size_t parts = 1 + next(3);
      for (size_t p = 0; p < parts; ++p) text += syllables[next(syllables.size())];
      text += glue[next(glue.size())];
    }
    if (next(20) == 0) text += "<|endoftext|>";
    lines.push_back(text + "\n");
  }
  return lines;
}

// The ids that the merges imply for `text`, by the textbook rule (apply the lowest-ranked merge present everywhere,
// left to right, until none applies), on the words the trained tokenizer's own pre-tokenizer gives.
std::vector<int32_t> naive_encode(const TrainedBpe& trained, const Tokenizer& loaded, const std::string& word_text) {
  std::map<std::pair<std::string, std::string>, size_t> rank;
  for (size_t r = 0; r < trained.merges.size(); ++r)
    rank.emplace(std::pair{trained.vocabulary[trained.merges[r].first], trained.vocabulary[trained.merges[r].second]},
                 r);
  std::string mapped;
  append_byte_level(mapped, word_text);
  std::vector<std::string> symbols;
  for (size_t i = 0; i < mapped.size();) {
    const size_t length = (static_cast<unsigned char>(mapped[i]) < 0x80) ? 1 : 2;  // the alphabet is below U+0800
    symbols.push_back(mapped.substr(i, length));
    i += length;
  }
  while (symbols.size() > 1) {
    size_t best = SIZE_MAX;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = rank.find({symbols[i], symbols[i + 1]});
      if (it != rank.end()) best = std::min(best, it->second);
    }
    if (best == SIZE_MAX) break;
    const std::string& left = trained.vocabulary[trained.merges[best].first];
    const std::string& right = trained.vocabulary[trained.merges[best].second];
    std::vector<std::string> merged;
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
        merged.push_back(left + right);
        ++i;
      } else {
        merged.push_back(symbols[i]);
      }
    }
    symbols = std::move(merged);
  }
  std::vector<int32_t> ids;
  for (const std::string& symbol : symbols) ids.push_back(loaded.token_to_id(symbol).value());
  return ids;
}

TEST(BpeTrainer, FirstMergesOfAHandCheckedText) {
  // "aaabdaaabac" is one word. Pairs: aa 4, ab 2, bd da ba ac 1. Merge a+a ("aa a b d aa a b a c"); then aa+a and a+b
  // both count 2 and the smaller ids win: a+b (0, 1) before aa+a (4, 0). Then aa+ab 2; then four pairs of count 1,
  // of which a+c (0, 2) has the smallest ids; then d+aaab, aaab+daaab and the whole word.
  const TrainedBpe trained = train({"aaabdaaabac"}, {.vocab_size = 100, .full_byte_alphabet = false, .threads = 1});
  EXPECT_EQ(trained.vocabulary, (std::vector<std::string>{"a", "b", "c", "d", "aa", "ab", "aaab", "ac", "daaab",
                                                          "aaabdaaab", "aaabdaaabac"}));
  EXPECT_EQ(merge_strings(trained), (std::vector<std::pair<std::string, std::string>>{
                                        {"a", "a"}, {"a", "b"}, {"aa", "ab"}, {"a", "c"}, {"d", "aaab"},
                                        {"aaab", "daaab"}, {"aaabdaaab", "ac"}}));
  EXPECT_EQ(trained.words, 1);
}

TEST(BpeTrainer, CountsWeightWordsByTheirFrequency) {
  // Words "ab" x2, " cd" x2, " ab" x1 (a space joins the word after it; Ġ is the space's byte-level character, which
  // sorts after the letters). Pairs: a+b 3, Ġ+c 2, c+d 2, Ġ+a 1. a+b first; then c+d (ids 2, 3) before Ġ+c (4, 2);
  // then Ġ+cd (count 2), then Ġ+ab (1).
  const TrainedBpe trained =
      train({"ab cd ab", "ab cd"}, {.vocab_size = 100, .full_byte_alphabet = false, .threads = 2});
  EXPECT_EQ(merge_strings(trained), (std::vector<std::pair<std::string, std::string>>{
                                        {"a", "b"}, {"c", "d"}, {"\xC4\xA0", "cd"}, {"\xC4\xA0", "ab"}}));
  EXPECT_EQ(trained.words, 5);
  EXPECT_EQ(trained.distinct_words, 3);
}

TEST(BpeTrainer, StopsAtTheVocabularySizeExactly) {
  const std::vector<std::string> lines = varied_lines(400);
  for (const int64_t size : {261, 262, 300, 777}) {
    const TrainedBpe trained = train(lines, {.vocab_size = size, .special_tokens = kSpecials});
    EXPECT_EQ(static_cast<int64_t>(trained.vocabulary.size()), size);
    EXPECT_GE(static_cast<int64_t>(trained.merges.size()), size - 261);
  }
}

TEST(BpeTrainer, SpecialTokensFirstThenTheByteAlphabetByCodePoint) {
  const TrainedBpe trained = train({"hello"}, {.vocab_size = 300, .special_tokens = kSpecials});
  ASSERT_GE(trained.vocabulary.size(), 261u);
  for (size_t i = 0; i < kSpecials.size(); ++i) EXPECT_EQ(trained.vocabulary[i], kSpecials[i]);
  // GPT-2's order: '!' .. '~', then the other printable Latin-1 characters, then U+0100.. for the rest.
  EXPECT_EQ(trained.vocabulary[5], "!");
  EXPECT_EQ(trained.vocabulary[5 + 94], "\xC2\xA1");       // byte 0xA1 is U+00A1
  EXPECT_EQ(trained.vocabulary[5 + 188], "\xC4\x80");      // byte 0x00 is U+0100
  EXPECT_EQ(trained.vocabulary[5 + 255], "\xC5\x83");      // the last one, U+0143
  std::set<std::string> alphabet(trained.vocabulary.begin() + 5, trained.vocabulary.begin() + 261);
  EXPECT_EQ(alphabet.size(), 256u);
  for (int byte = 0; byte < 256; ++byte) {
    std::string mapped;
    append_byte_level(mapped, std::string(1, static_cast<char>(byte)));
    EXPECT_TRUE(alphabet.count(mapped)) << byte;
  }
}

TEST(BpeTrainer, SpecialTokensAreNeverSplitNorMerged) {
  // The special strings are everywhere, yet no merge may build them or glue them to their neighbours.
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i) texts.push_back("<|endoftext|>x<fim_prefix>y<fim_middle><|endoftext|>");
  const TrainedBpe trained = train(texts, {.vocab_size = 400, .special_tokens = kSpecials});
  for (size_t id = 261; id < trained.vocabulary.size(); ++id) {
    EXPECT_EQ(trained.vocabulary[id].find('<'), std::string::npos) << trained.vocabulary[id];
    EXPECT_EQ(trained.vocabulary[id].find('>'), std::string::npos) << trained.vocabulary[id];
  }
  // Only "x" and "y" are left as words: no pair to merge, so the vocabulary stays at specials + alphabet.
  EXPECT_EQ(trained.vocabulary.size(), 261u);
  EXPECT_EQ(trained.words, 100);
}

TEST(BpeTrainer, SameResultOnAnyNumberOfThreads) {
  const std::vector<std::string> lines = varied_lines(300);
  const TrainedBpe one = train(lines, {.vocab_size = 600, .special_tokens = kSpecials, .threads = 1});
  const TrainedBpe three = train(lines, {.vocab_size = 600, .special_tokens = kSpecials, .threads = 3});
  EXPECT_EQ(one.vocabulary, three.vocabulary);
  EXPECT_EQ(one.merges, three.merges);
  EXPECT_EQ(one.words, three.words);
}

TEST(BpeTrainer, BadOptionsAreErrors) {
  EXPECT_THROW(train({"abc"}, {.vocab_size = 260, .special_tokens = kSpecials}), Error);
  EXPECT_THROW(train({"abc"}, {.vocab_size = 300, .special_tokens = {"<a>", "<a>"}}), Error);
  EXPECT_THROW(train({"abc"}, {.vocab_size = 300, .special_tokens = {""}}), Error);
  TrainedBpe trained = train({"abc"}, {.vocab_size = 300, .special_tokens = kSpecials});
  EXPECT_THROW(write_byte_level_bpe_tokenizer(fs::temp_directory_path() / "fast_llm_bpe_unused", trained, {}), Error);
}

class TrainedTokenizerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    folder_ = fs::temp_directory_path() / (std::string("fast_llm_bpe_trainer_test_") + info->name());
    fs::remove_all(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }
  fs::path folder_;
};

TEST_F(TrainedTokenizerFiles, FieldsOfTokenizerJsonAndConfig) {
  const TrainedBpe trained = train(varied_lines(200), {.vocab_size = 500, .special_tokens = kSpecials});
  write_byte_level_bpe_tokenizer(folder_, trained, {.special_tokens = kSpecials, .model_max_length = 1024});
  const nlohmann::json file = nlohmann::json::parse(std::ifstream(folder_ / "tokenizer.json"));
  EXPECT_EQ(file["version"], "1.0");
  ASSERT_EQ(file["added_tokens"].size(), 5u);
  EXPECT_EQ(file["added_tokens"][3]["content"], "<fim_suffix>");
  EXPECT_EQ(file["added_tokens"][3]["id"], 3);
  EXPECT_EQ(file["added_tokens"][3]["special"], true);
  EXPECT_EQ(file["added_tokens"][3]["normalized"], false);
  EXPECT_TRUE(file["normalizer"].is_null());
  EXPECT_EQ(file["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], kLlama3SplitPattern);
  EXPECT_EQ(file["pre_tokenizer"]["pretokenizers"][1]["type"], "ByteLevel");
  EXPECT_EQ(file["post_processor"]["single"][0]["SpecialToken"]["id"], "<|endoftext|>");
  EXPECT_EQ(file["decoder"]["type"], "ByteLevel");
  const nlohmann::json& model = file["model"];
  EXPECT_EQ(model["type"], "BPE");
  EXPECT_EQ(model["ignore_merges"], false);
  EXPECT_EQ(model["vocab"].size(), 500u);
  EXPECT_EQ(model["vocab"]["<|endoftext|>"], 0);
  EXPECT_EQ(model["vocab"]["!"], 5);
  ASSERT_EQ(model["merges"].size(), trained.merges.size());
  const auto& [left, right] = trained.merges.back();
  EXPECT_EQ(model["merges"].back(), nlohmann::json::array({trained.vocabulary[left], trained.vocabulary[right]}));
  // The vocabulary is written in id order, as the library writes it.
  int64_t expected_id = 0;
  const auto ordered = nlohmann::ordered_json::parse(std::ifstream(folder_ / "tokenizer.json"));
  for (const auto& [token, id] : ordered["model"]["vocab"].items()) EXPECT_EQ(id, expected_id++) << token;

  const nlohmann::json config = nlohmann::json::parse(std::ifstream(folder_ / "tokenizer_config.json"));
  EXPECT_EQ(config["bos_token"], "<|endoftext|>");
  EXPECT_EQ(config["eos_token"], "<|endoftext|>");
  EXPECT_EQ(config["model_max_length"], 1024);
  EXPECT_EQ(config["tokenizer_class"], "PreTrainedTokenizerFast");
}

TEST_F(TrainedTokenizerFiles, OurLoaderEncodesAsTheMergesImplyAndDecodesBack) {
  const std::vector<std::string> lines = varied_lines(500);
  const TrainedBpe trained = train(lines, {.vocab_size = 700, .special_tokens = kSpecials});
  write_byte_level_bpe_tokenizer(folder_, trained, {.special_tokens = kSpecials});
  const std::unique_ptr<Tokenizer> loaded = Tokenizer::load(folder_);
  EXPECT_EQ(loaded->vocab_size(), 700);
  EXPECT_EQ(loaded->bos_id(), 0);
  EXPECT_EQ(loaded->eos_id(), 0);
  EXPECT_EQ(loaded->token_to_id("<fim_pad>"), 4);
  EXPECT_TRUE(loaded->is_special(2));

  // "word" pieces of the first lines cut by hand where the split pattern cuts them (letters with one leading
  // non-letter, up to 3 digits, a punctuation run with one leading space): each is one pre-token.
  for (const std::string word : {"hello", " hello", "kaloing", " traen", "12", "...", " (", "\xC3\xA9\xC3\xA7" "a"})
    EXPECT_EQ(loaded->encode(word), naive_encode(trained, *loaded, word)) << word;
  std::string all;
  for (const std::string& line : lines) {
    const std::vector<int32_t> ids = loaded->encode(line);
    EXPECT_EQ(loaded->decode(ids), line);
    all += line;
  }
  // Special tokens are one id each; with special tokens asked for, BOS comes first.
  const std::vector<int32_t> ids = loaded->encode("a<|endoftext|>b<fim_middle>", true);
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[2], 0);
  EXPECT_EQ(ids[4], 2);
  EXPECT_EQ(loaded->decode(loaded->encode(all)), all);
  // Training should shorten the text: 700 tokens give well under one id per byte on the text it learned.
  EXPECT_LT(loaded->encode(all).size() * 2, all.size());
}

// Writes what tests/tokenizer/check_bpe_training.js compares with Hugging Face's library: `corpus.txt` and
// `trained_like_library.json` (trained on its lines as the library's default BpeTrainer would: no special tokens, only
// the characters seen, 30000 entries at most), and `tokenizer.json` with `encoded.jsonl` (our ids for each line).
TEST(BpeTrainer, WritesTheLibraryAgreementCase) {
  const char* folder_name = std::getenv("FAST_LLM_BPE_AGREEMENT_DIR");
  if (folder_name == nullptr) GTEST_SKIP() << "FAST_LLM_BPE_AGREEMENT_DIR is not set (bpe_training_agrees sets it)";
  const fs::path folder = folder_name;
  fs::create_directories(folder);
  const std::vector<std::string> lines = varied_lines(2000);
  std::ofstream corpus(folder / "corpus.txt", std::ios::binary);
  for (const std::string& line : lines) corpus << line;
  corpus.close();

  // The library reads a file line by line, each line with its "\n": the same documents here.
  std::vector<std::string> file_lines;
  for (const std::string& line : lines) {
    for (size_t start = 0; start < line.size();) {
      const size_t end = std::min(line.find('\n', start), line.size() - 1) + 1;
      file_lines.push_back(line.substr(start, end - start));
      start = end;
    }
  }
  const TrainedBpe like_library = train(file_lines, {.vocab_size = 30000, .full_byte_alphabet = false});
  std::ofstream(folder / "trained_like_library.json", std::ios::binary)
      << byte_level_bpe_tokenizer_json(like_library, {}).dump(2);

  const TrainedBpe trained = train(lines, {.vocab_size = 1500, .special_tokens = kSpecials});
  write_byte_level_bpe_tokenizer(folder, trained, {.special_tokens = kSpecials});
  const std::unique_ptr<Tokenizer> loaded = Tokenizer::load(folder);
  std::ofstream encoded(folder / "encoded.jsonl", std::ios::binary);
  for (size_t i = 0; i < lines.size(); i += 7)
    encoded << nlohmann::json{{"text", lines[i]}, {"ids", loaded->encode(lines[i], true)}}.dump() << "\n";
}

}  // namespace
}  // namespace fast_llm::tokenizer
