// Records to documents: BOS / EOS, character spans to token spans (Fast-LLM's inclusive [begin, last] in code
// points), preference packing, and every bad record named by its location.
#include <gtest/gtest.h>

#include "fast_llm/core/error.h"
#include "fast_llm/preparation/document_preparer.h"
#include "preparation/test_tokenizer.h"

namespace fast_llm::preparation {
namespace {

using testing::ByteTestTokenizer;
using testing::bytes_of;
constexpr int64_t kBos = ByteTestTokenizer::kBos;
constexpr int64_t kEos = ByteTestTokenizer::kEos;

std::vector<int64_t> concat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

std::string error_of(const DocumentPreparer& preparer, const std::string& line) {
  try {
    preparer.from_json(line, "in.jsonl:7");
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(DocumentPreparer, TextWithBosAndEos) {
  const ByteTestTokenizer tokenizer;
  const DocumentPreparer preparer(tokenizer, {});
  const data::Document document = preparer.from_json(R"({"text": "hi", "other": 3})", "x");
  EXPECT_EQ(document.tokens, concat({{kBos}, bytes_of("hi"), {kEos}}));
  EXPECT_TRUE(document.loss_masking_spans.empty());
  EXPECT_EQ(preparer.from_text("a b", "f.txt").tokens, concat({{kBos}, bytes_of("a b"), {kEos}}));
  const DocumentPreparer bare(tokenizer, {.text_field = "content", .add_bos = false, .add_eos = false});
  EXPECT_EQ(bare.from_json(R"({"content": "hi"})", "x").tokens, bytes_of("hi"));
}

TEST(DocumentPreparer, LossMaskingSpansAreInclusiveCharacterSpans) {
  const ByteTestTokenizer tokenizer;
  const DocumentPreparer preparer(tokenizer, {.loss_masking_spans_field = "spans"});
  // "é" is two bytes: characters [1, 2] are "é" and "l", bytes [1, 4), tokens [2, 5) after the BOS.
  const std::string line = R"({"text": "hélo", "spans": [[1, 2]]})";
  const data::Document document = preparer.from_json(line, "x");
  EXPECT_EQ(document.tokens, concat({{kBos}, bytes_of("hélo"), {kEos}}));
  ASSERT_EQ(document.loss_masking_spans.size(), 1u);
  EXPECT_EQ(document.loss_masking_spans[0], (data::Range{2, 5}));
  // A flat list, unsorted spans, and an empty list.
  const data::Document flat = preparer.from_json(R"({"text": "abcdef", "spans": [4, 4, 0, 1]})", "x");
  EXPECT_EQ(flat.loss_masking_spans, (std::vector<data::Range>{{1, 3}, {5, 6}}));
  EXPECT_TRUE(preparer.from_json(R"({"text": "abc", "spans": []})", "x").loss_masking_spans.empty());
}

TEST(DocumentPreparer, SplitsAreTokenBoundariesInTheirOriginalOrder) {
  const ByteTestTokenizer tokenizer;
  const DocumentPreparer preparer(tokenizer, {});
  std::vector<int64_t> token_splits;
  // "<s>" cut in the middle is no longer the BOS string: the pieces are tokenized apart.
  const std::vector<int64_t> tokens = preparer.tokenize_with_splits("ab<s>cd", {6, 3, 1}, token_splits);
  EXPECT_EQ(tokens, concat({{kBos}, bytes_of("ab<"), bytes_of("s>c"), bytes_of("d"), {kEos}}));
  EXPECT_EQ(token_splits, (std::vector<int64_t>{7, 4, 2}));
  EXPECT_EQ(preparer.tokenize_with_splits("ab<s>cd", {}, token_splits),
            concat({{kBos}, bytes_of("ab"), {kBos}, bytes_of("cd"), {kEos}}));
}

TEST(DocumentPreparer, PreferenceDocumentsPackChosenAndRejected) {
  const ByteTestTokenizer tokenizer;
  const DocumentPreparer preparer(tokenizer, {.chosen_field = "chosen", .rejected_field = "rejected"});
  const data::Document document = preparer.from_json(R"({"text": "Q", "chosen": "A", "rejected": "B"})", "x");
  // "Q" "A</s>" "<s>Q" "B": BOS Q | A EOS | BOS Q | B | EOS.
  EXPECT_EQ(document.tokens, concat({{kBos}, bytes_of("QA"), {kEos, kBos}, bytes_of("QB"), {kEos}}));
  EXPECT_EQ(document.chosen_spans, (std::vector<data::Range>{{2, 4}}));
  EXPECT_EQ(document.rejected_spans, (std::vector<data::Range>{{6, 8}}));  // B and the final EOS
}

TEST(DocumentPreparer, TokenizerOptions) {
  const ByteTestTokenizer no_bos(false, true);
  EXPECT_THROW(DocumentPreparer(no_bos, {}), Error);
  EXPECT_NO_THROW(DocumentPreparer(no_bos, {.add_bos = false}));
  const DocumentPreparer with_bos(no_bos, {.bos_token = "^"});
  EXPECT_EQ(with_bos.from_text("a", "f.txt").tokens, (std::vector<int64_t>{'^', 'a', kEos}));
  EXPECT_THROW(DocumentPreparer(no_bos, {.bos_token = "<nothing>"}), Error);
  const ByteTestTokenizer no_eos(true, false);
  EXPECT_THROW(DocumentPreparer(no_eos, {}), Error);
  EXPECT_THROW(DocumentPreparer(no_eos, {.chosen_field = "c", .rejected_field = "r", .add_eos = false}), Error);
  const ByteTestTokenizer tokenizer;
  const DocumentPreparer modulo(tokenizer, {.max_vocab_size = 100});
  EXPECT_EQ(modulo.from_text("a", "f.txt").tokens, (std::vector<int64_t>{kBos % 100, 'a' % 100, kEos % 100}));
}

TEST(DocumentPreparer, TextFilesMustBeUtf8) {
  const ByteTestTokenizer tokenizer;
  const DocumentPreparer preparer(tokenizer, {});
  EXPECT_NO_THROW(preparer.from_text("h\xc3\xa9llo \xf0\x9f\x98\x80", "f.txt"));
  // A stray byte, a sequence cut short, an overlong form, a surrogate: each named by its line.
  const std::vector<std::pair<std::string, std::string>> cases{{"ok\nline two \xff", "f.txt:2"},
                                                               {"ok\nok\n\xc3", "f.txt:3"},
                                                               {"ok\nover\xc0\xaflong", "f.txt:2"},
                                                               {"\xed\xa0\x80", "f.txt:1"}};
  for (const auto& [bad, location] : cases) {
    try {
      preparer.from_text(bad, "f.txt");
      ADD_FAILURE() << "no error for " << location;
    } catch (const Error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(location + ": not valid UTF-8"), std::string::npos) << message;
    }
  }
}

TEST(DocumentPreparer, BadRecordsNameTheirLocation) {
  const ByteTestTokenizer tokenizer;
  const DocumentPreparer preparer(tokenizer, {.loss_masking_spans_field = "spans"});
  const std::vector<std::pair<std::string, std::string>> cases{
      {R"({"text": "abc", "spans": [[0, 1]])", "not a JSON line"},
      {R"(["abc"])", "expected a JSON object"},
      {R"({"txt": "abc", "spans": []})", "no field `text`"},
      {R"({"text": null, "spans": []})", "must be a string"},
      {"{\"text\": \"a\xff\", \"spans\": []}", "not a JSON line"},
      {R"({"text": "abc"})", "no field `spans`"},
      {R"({"text": "abc", "spans": [[0, 3]]})", "outside the text"},
      {R"({"text": "abc", "spans": [[2, 0]]})", "outside the text"},
      {R"({"text": "abc", "spans": [[0, 1], [1, 2]]})", "overlaps"},
      {R"({"text": "abc", "spans": [0, 1, 2]})", "even number"},
      {R"({"text": "abc", "spans": [[0, "1"]]})", "integers"},
      {R"({"text": "abc", "spans": "0-1"})", "expected a list"},
  };
  for (const auto& [line, expected] : cases) {
    const std::string message = error_of(preparer, line);
    EXPECT_NE(message.find("in.jsonl:7"), std::string::npos) << line << " -> " << message;
    EXPECT_NE(message.find(expected), std::string::npos) << line << " -> " << message;
  }
}

}  // namespace
}  // namespace fast_llm::preparation
