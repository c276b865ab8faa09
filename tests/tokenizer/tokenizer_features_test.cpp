// One test per tokenizer.json feature, on small hand-written files, with the expected pieces worked out by hand from
// Hugging Face's rules (no npm needed). Each expectation was also checked once against tokenizers@0.23.2: with
// FAST_LLM_TOKENIZER_CASES=FILE set, every check appends {file, text or ids, expected} as a JSON line to FILE, and
// tests/tokenizer/check_feature_cases.js replays them with the library.
//
// Most files here use a "piece vocabulary": every single character of the text plus the pieces a test expects, and
// `ignore_merges`, so that a pre-token in the vocabulary is one id and anything else falls apart into characters:
// the ids show exactly how the text was cut.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "fast_llm/core/error.h"
#include "fast_llm/tokenizer/tokenizer.h"
#include "fast_llm/tokenizer/utf8.h"

namespace fast_llm::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Pieces = std::vector<std::string>;

class TokenizerFeatures : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    folder_ = fs::temp_directory_path() / (std::string("fast_llm_tokenizer_features_") + info->name());
    fs::remove_all(folder_);
    fs::create_directories(folder_);
    const char* cases = std::getenv("FAST_LLM_TOKENIZER_CASES");
    keep_ = cases != nullptr;
    if (keep_) cases_file_ = cases;
  }
  void TearDown() override {
    if (!keep_) fs::remove_all(folder_);
  }

  std::unique_ptr<Tokenizer> load(const json& file) {
    file_ = folder_ / ("tokenizer_" + std::to_string(count_++) + ".json");
    std::ofstream(file_) << file.dump();
    return Tokenizer::load(file_);
  }
  void record(json entry) {
    if (!keep_) return;
    entry["file"] = fs::absolute(file_).string();
    std::ofstream(cases_file_, std::ios::app) << entry.dump() << "\n";
  }
  // The token strings of encode(text).
  Pieces pieces(const Tokenizer& tokenizer, const std::string& text, bool add_special_tokens = false) {
    const auto ids = tokenizer.encode(text, add_special_tokens);
    record({{"text", text}, {"add_special_tokens", add_special_tokens}, {"ids", ids}});
    Pieces out;
    for (const int32_t id : ids) out.push_back(tokenizer.id_to_token(id).value_or("?"));
    return out;
  }
  std::string decode(const Tokenizer& tokenizer, const Pieces& tokens, bool skip_special_tokens = false) {
    std::vector<int32_t> ids;
    for (const auto& token : tokens) ids.push_back(tokenizer.token_to_id(token).value());
    const std::string text = tokenizer.decode(ids, skip_special_tokens);
    record({{"decode_ids", ids}, {"skip_special_tokens", skip_special_tokens}, {"decoded", text}});
    return text;
  }

  fs::path folder_, file_;
  std::string cases_file_;
  bool keep_ = false;
  int count_ = 0;
};

json added_token(const std::string& content, bool special, json flags = json::object()) {
  json token{{"content", content}, {"single_word", false}, {"lstrip", false},
             {"rstrip", false},    {"normalized", false},  {"special", special}};
  token.update(flags);
  return token;
}

// Adds `tokens` after the vocabulary, with the ids Hugging Face's library gives them (the vocabulary's size onwards);
// returns the first.
int add_tokens(json& file, std::vector<json> tokens) {
  const int first = static_cast<int>(file["model"]["vocab"].size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i]["id"] = first + static_cast<int>(i);
    file["added_tokens"].push_back(tokens[i]);
  }
  return first;
}

// A BPE file whose vocabulary is every character of `alphabet` and every piece of `pieces`, with `ignore_merges`.
json piece_vocabulary(const std::string& alphabet, const Pieces& pieces) {
  std::set<std::string> tokens(pieces.begin(), pieces.end());
  for (size_t position = 0; position < alphabet.size();) {
    const size_t start = position;
    next_code_point(alphabet, position);
    tokens.insert(alphabet.substr(start, position - start));
  }
  json vocabulary = json::object();
  int id = 0;
  for (const auto& token : tokens) vocabulary[token] = id++;
  return json{{"version", "1.0"},
              {"added_tokens", json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", nullptr},
              {"model",
               {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false},
                {"byte_fallback", false}, {"ignore_merges", true}, {"vocab", vocabulary},
                {"merges", json::array()}}}};
}

constexpr const char* kAscii =
    " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~\t\n";

json split(const json& pattern, const std::string& behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}};
}

TEST_F(TokenizerFeatures, SplitBehaviors) {
  json file = piece_vocabulary(kAscii, {"ab", "cd", "ab,", ",cd", ",,", "ab,,", ",,cd"});
  const json comma{{"String", ","}};
  file["pre_tokenizer"] = split(comma, "Isolated");
  EXPECT_EQ(pieces(*load(file), "ab,cd"), (Pieces{"ab", ",", "cd"}));
  file["pre_tokenizer"] = split(comma, "Removed");
  EXPECT_EQ(pieces(*load(file), "ab,cd"), (Pieces{"ab", "cd"}));
  file["pre_tokenizer"] = split(comma, "MergedWithPrevious");
  // The second of two delimiters in a row stays alone.
  EXPECT_EQ(pieces(*load(file), "ab,cd"), (Pieces{"ab,", "cd"}));
  EXPECT_EQ(pieces(*load(file), "ab,,cd"), (Pieces{"ab,", ",", "cd"}));
  file["pre_tokenizer"] = split(comma, "MergedWithNext");
  EXPECT_EQ(pieces(*load(file), "ab,cd"), (Pieces{"ab", ",cd"}));
  EXPECT_EQ(pieces(*load(file), "ab,,cd"), (Pieces{"ab", ",", ",cd"}));
  file["pre_tokenizer"] = split(comma, "Contiguous");
  EXPECT_EQ(pieces(*load(file), "ab,,cd,"), (Pieces{"ab", ",,", "cd", ","}));
  // Inverted: the matches are the pieces and the rest is the delimiter.
  file["pre_tokenizer"] = split(json{{"Regex", "[a-z]+"}}, "Removed", true);
  EXPECT_EQ(pieces(*load(file), "ab,,cd"), (Pieces{"ab", "cd"}));
}

TEST_F(TokenizerFeatures, SplitRegexThatCanMatchEmpty) {
  // "a*" also matches nothing between other characters. Empty pieces vanish, but empty matches still count as
  // delimiters for the merging behaviours, except one right where a match ended (Oniguruma's iterator drops it): so
  // "aa" merges with the "b" after it.
  json file = piece_vocabulary(kAscii, {"aa", "bc"});
  file["pre_tokenizer"] = split(json{{"Regex", "a*"}}, "Isolated");
  EXPECT_EQ(pieces(*load(file), "baabc"), (Pieces{"b", "aa", "b", "c"}));
  file["pre_tokenizer"] = split(json{{"Regex", "a*"}}, "MergedWithNext");
  file["model"]["vocab"]["aab"] = file["model"]["vocab"].size();
  EXPECT_EQ(pieces(*load(file), "bcaabc"), (Pieces{"b", "c", "aab", "c"}));
}

TEST_F(TokenizerFeatures, SplitRegexWithUnicodeClasses) {
  // Llama 3's pattern: contractions, letters with one leading non-letter, digits by three, spaces before a word kept.
  const std::string pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
      R"(|\s*[\r\n]+|\s+(?!\S)|\s+)";
  json file = piece_vocabulary(std::string(kAscii) + "éΣ", {"I", "'M", "123", "45", " ok", " éΣ", "  ", "?!\n"});
  file["pre_tokenizer"] = split(json{{"Regex", pattern}}, "Isolated");
  EXPECT_EQ(pieces(*load(file), "I'M 12345 ok   éΣ?!\n"),
            (Pieces{"I", "'M", " ", "123", "45", " ok", "  ", " éΣ", "?!\n"}));
}

TEST_F(TokenizerFeatures, Digits) {
  json file = piece_vocabulary(kAscii, {"123", "ab"});
  file["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_EQ(pieces(*load(file), "ab123ab"), (Pieces{"ab", "123", "ab"}));
  file["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", true}};
  EXPECT_EQ(pieces(*load(file), "ab123ab"), (Pieces{"ab", "1", "2", "3", "ab"}));
  // Every numeric category counts: Arabic-Indic digits (Nd), vulgar fractions (No), Roman numerals (Nl).
  file = piece_vocabulary(std::string(kAscii) + "٣٤½Ⅻ", {"ab", "٣٤½Ⅻ"});
  file["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_EQ(pieces(*load(file), "ab٣٤½Ⅻab"), (Pieces{"ab", "٣٤½Ⅻ", "ab"}));
}

TEST_F(TokenizerFeatures, MetaspacePrependSchemes) {
  json file = piece_vocabulary(std::string(kAscii) + "▁", {"▁hi", "hi", "▁there"});
  add_tokens(file, {added_token("<x>", true)});
  file["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(pieces(*load(file), "hi there"), (Pieces{"▁hi", "▁there"}));
  EXPECT_EQ(pieces(*load(file), "<x>hi"), (Pieces{"<x>", "▁hi"}));
  file["pre_tokenizer"]["prepend_scheme"] = "first";
  // Only text at the very start of the input gets the prefix, not text after an added token.
  EXPECT_EQ(pieces(*load(file), "hi there"), (Pieces{"▁hi", "▁there"}));
  EXPECT_EQ(pieces(*load(file), "<x>hi"), (Pieces{"<x>", "hi"}));
  file["pre_tokenizer"]["prepend_scheme"] = "never";
  file["pre_tokenizer"]["split"] = false;
  EXPECT_EQ(pieces(*load(file), "hi"), (Pieces{"hi"}));
  EXPECT_EQ(pieces(*load(file), "hi hi"), (Pieces{"h", "i", "▁", "h", "i"}));
}

TEST_F(TokenizerFeatures, WhitespaceAndPunctuation) {
  json file = piece_vocabulary(kAscii, {"hello", "world", "!!", "a_b"});
  file["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  EXPECT_EQ(pieces(*load(file), " hello \t world\n"), (Pieces{"hello", "world"}));
  file["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_EQ(pieces(*load(file), "hello, world!! a_b"), (Pieces{"hello", ",", "world", "!!", "a_b"}));
  file["pre_tokenizer"] = {{"type", "Punctuation"}, {"behavior", "Isolated"}};
  EXPECT_EQ(pieces(*load(file), "hello!!world"), (Pieces{"hello", "!", "!", "world"}));
  // ASCII symbols count as punctuation, Unicode only its punctuation categories (« » yes, € no).
  json other = piece_vocabulary(std::string(kAscii) + "«»€", {"hello", "a€b"});
  other["pre_tokenizer"] = {{"type", "Punctuation"}, {"behavior", "Removed"}};
  EXPECT_EQ(pieces(*load(other), "«hello»$a€b"), (Pieces{"hello", "a€b"}));
  // White_Space: no-break space yes, U+180E no.
  other = piece_vocabulary(std::string(kAscii) + "\u180E", {"a\u180Eb", "c"});
  other["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  EXPECT_EQ(pieces(*load(other), "a\u180Eb\u00A0c"), (Pieces{"a\u180Eb", "c"}));
  file["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({json{{"type", "WhitespaceSplit"}}, json{{"type", "Punctuation"}, {"behavior", "Contiguous"}}})}};
  EXPECT_EQ(pieces(*load(file), "hello!! world"), (Pieces{"hello", "!!", "world"}));
}

TEST_F(TokenizerFeatures, ByteLevelPreTokenizerAddsPrefixSpaceAndMapsBytes) {
  json file = piece_vocabulary("", {"Ġhi", "Ġ", "Ã", "Ã©", "ĠÃ©", "hi"});
  file["pre_tokenizer"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  file["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  const auto tokenizer = load(file);
  // "é" is bytes C3 A9, shown as Ã and ©; GPT-2's pattern keeps " é" together.
  EXPECT_EQ(pieces(*tokenizer, "hi é"), (Pieces{"Ġhi", "ĠÃ©"}));
  EXPECT_EQ(decode(*tokenizer, {"Ġhi", "ĠÃ©"}), " hi é");
  // Half a character decodes to U+FFFD.
  EXPECT_EQ(decode(*tokenizer, {"hi", "Ã"}), "hi\xEF\xBF\xBD");
}

// A file whose model knows every byte (<0xXX>) and no character, decoded by ByteFallback + Fuse: decode(encode(x))
// is the normalized x.
json byte_model() {
  json vocabulary = json::object();
  for (int byte = 0; byte < 256; ++byte) vocabulary[fmt::format("<0x{:02X}>", byte)] = byte;
  vocabulary["<unk>"] = 256;
  return json{{"version", "1.0"},
              {"added_tokens", json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder",
               {{"type", "Sequence"},
                {"decoders", json::array({json{{"type", "ByteFallback"}}, json{{"type", "Fuse"}}})}}},
              {"model",
               {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"}, {"fuse_unk", true},
                {"byte_fallback", true}, {"vocab", vocabulary}, {"merges", json::array()}}}};
}

class Normalized : public TokenizerFeatures {
 protected:
  std::string normalize(const json& normalizer, const std::string& text) {
    json file = byte_model();
    file["normalizer"] = normalizer;
    const auto tokenizer = load(file);
    const auto ids = tokenizer->encode(text);
    record({{"text", text}, {"add_special_tokens", false}, {"ids", ids}});
    return tokenizer->decode(ids);
  }
};

TEST_F(Normalized, UnicodeForms) {
  EXPECT_EQ(normalize({{"type", "NFC"}}, "e\u0301"), "\u00E9");
  EXPECT_EQ(normalize({{"type", "NFD"}}, "\u00E9"), "e\u0301");
  EXPECT_EQ(normalize({{"type", "NFKC"}}, "\uFB01 \u2460 \uFF21"), "fi 1 A");
  EXPECT_EQ(normalize({{"type", "NFKD"}}, "\u00E9\uFB01"), "e\u0301fi");
}

TEST_F(Normalized, LowercaseStripAccentsStrip) {
  // Each character on its own: no final sigma; İ lowercases to i + combining dot.
  EXPECT_EQ(normalize({{"type", "Lowercase"}}, "HÉLLO ΣΑΣ İ"), "héllo σασ i\u0307");
  // Capital sharp s, a titlecase digraph, a Roman numeral, fullwidth A, a Deseret capital (outside the BMP).
  EXPECT_EQ(normalize({{"type", "Lowercase"}}, "\u1E9E \u01C5 \u2160 \uFF21 \U00010400"),
            "\u00DF \u01C6 \u2170 \uFF41 \U00010428");
  const json strip_accents{{"type", "Sequence"},
                           {"normalizers", json::array({json{{"type", "NFD"}}, json{{"type", "StripAccents"}}})}};
  EXPECT_EQ(normalize(strip_accents, "café naïve"), "cafe naive");
  EXPECT_EQ(normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, " \t a b \u3000"), "a b");
  EXPECT_EQ(normalize({{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}}, "  a  "), "  a");
}

TEST_F(Normalized, PrependAndReplace) {
  const json llama2_style{{"type", "Sequence"},
                          {"normalizers", json::array({json{{"type", "Prepend"}, {"prepend", "▁"}},
                                                       json{{"type", "Replace"},
                                                            {"pattern", {{"String", " "}}},
                                                            {"content", "▁"}}})}};
  EXPECT_EQ(normalize(llama2_style, "a b  c"), "▁a▁b▁▁c");
  EXPECT_EQ(normalize(llama2_style, ""), "");
  EXPECT_EQ(normalize({{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}}, "a \t\n b\u00A0c"),
            "a b c");
}

TEST_F(TokenizerFeatures, ByteFallbackUnknownAndFusedUnknown) {
  json file = piece_vocabulary("ab", {"<unk>", "<0xE2>", "<0x9C>", "<0x93>"});
  file["model"]["unk_token"] = "<unk>";
  file["model"]["ignore_merges"] = false;
  // ✓ is E2 9C 93: all three bytes are in the vocabulary; ✗ (E2 9C 97) is not, so it is unknown.
  file["model"]["byte_fallback"] = true;
  EXPECT_EQ(pieces(*load(file), "a✓b"), (Pieces{"a", "<0xE2>", "<0x9C>", "<0x93>", "b"}));
  file["model"]["fuse_unk"] = true;
  EXPECT_EQ(pieces(*load(file), "a✗✗b"), (Pieces{"a", "<unk>", "b"}));
  file["model"]["fuse_unk"] = false;
  EXPECT_EQ(pieces(*load(file), "a✗✗b"), (Pieces{"a", "<unk>", "<unk>", "b"}));
  file["model"]["byte_fallback"] = false;
  EXPECT_EQ(pieces(*load(file), "a✓b"), (Pieces{"a", "<unk>", "b"}));
}

TEST_F(TokenizerFeatures, IgnoreMerges) {
  // Merges make "ab" + "c"; the vocabulary also has "abc", which ignore_merges takes whole.
  json file = piece_vocabulary("abc", {"ab", "abc"});
  file["model"]["merges"] = json::array({"a b"});
  file["model"]["ignore_merges"] = false;
  EXPECT_EQ(pieces(*load(file), "abc"), (Pieces{"ab", "c"}));
  file["model"]["ignore_merges"] = true;
  EXPECT_EQ(pieces(*load(file), "abc"), (Pieces{"abc"}));
}

TEST_F(TokenizerFeatures, MergeRanksDecideOverlaps) {
  // "abc": a+b (rank 1) or b+c (rank 0): the lower rank wins, leaving a + bc. "aaaaa": a+a (rank 2) merges leftmost
  // first, twice (aa a a a, then aa aa a), before aa+a (rank 3) joins the last two.
  json file = piece_vocabulary("abc", {"ab", "bc", "aa", "aaa"});
  file["model"]["ignore_merges"] = false;
  file["model"]["merges"] = json::array({"b c", "a b", "a a", "aa a"});
  EXPECT_EQ(pieces(*load(file), "abc"), (Pieces{"a", "bc"}));
  EXPECT_EQ(pieces(*load(file), "aaaaa"), (Pieces{"aa", "aaa"}));
}

TEST_F(TokenizerFeatures, AddedTokenFlags) {
  json file = piece_vocabulary(kAscii, {"ab"});
  const int first = add_tokens(file, {added_token("<m>", true, {{"lstrip", true}, {"rstrip", true}}),
                                      added_token("cat", false, {{"single_word", true}}),
                                      added_token("dog", false, {{"normalized", true}})});
  file["normalizer"] = {{"type", "Lowercase"}};
  file["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  const auto tokenizer = load(file);
  // lstrip/rstrip take the spaces around <m>; single_word matches "cat" only between non-word characters; "dog" is
  // found after normalization (DOG lowercased), "<m>" in the raw text.
  EXPECT_EQ(pieces(*tokenizer, "ab  <m>  ab"), (Pieces{"ab", "<m>", "ab"}));
  EXPECT_EQ(pieces(*tokenizer, "cat concat cat."), (Pieces{"cat", "c", "o", "n", "c", "a", "t", "cat", "."}));
  EXPECT_EQ(pieces(*tokenizer, "hotDOGs"), (Pieces{"h", "o", "t", "dog", "s"}));
  EXPECT_TRUE(tokenizer->is_special(first));
  EXPECT_FALSE(tokenizer->is_special(first + 1));
  EXPECT_EQ(tokenizer->vocab_size(), first + 3);
}

TEST_F(TokenizerFeatures, NormalizedAddedTokenIsMatchedAfterPrepend) {
  // Llama 2 style normalizer: a normalized added token is normalized too ("<x>" becomes "▁<x>"), so it matches only
  // where the normalized text has "▁<x>": after a space, or at the start of a segment.
  json file = piece_vocabulary(std::string(kAscii) + "▁", {"▁a", "a"});
  file["normalizer"] = {{"type", "Sequence"},
                        {"normalizers", json::array({json{{"type", "Prepend"}, {"prepend", "▁"}},
                                                     json{{"type", "Replace"},
                                                          {"pattern", {{"String", " "}}},
                                                          {"content", "▁"}}})}};
  add_tokens(file, {added_token("<x>", false, {{"normalized", true}})});
  const auto tokenizer = load(file);
  EXPECT_EQ(pieces(*tokenizer, "a <x>"), (Pieces{"▁a", "<x>"}));
  EXPECT_EQ(pieces(*tokenizer, "a<x>"), (Pieces{"▁", "a", "<", "x", ">"}));
}

TEST_F(TokenizerFeatures, AddedTokensLeftmostLongest) {
  json file = piece_vocabulary(std::string(kAscii) + "é", {"x"});
  add_tokens(file, {added_token("<a>", true), added_token("<a><b>", false), added_token("b>", false),
                    added_token("cat", false, {{"single_word", true}}),
                    added_token("<r>", false, {{"rstrip", true}}), added_token("<l>", false, {{"lstrip", true}})});
  const auto tokenizer = load(file);
  // The longest token at the leftmost position wins, even over one that would start inside it.
  EXPECT_EQ(pieces(*tokenizer, "x<a><b>x<a>b>"), (Pieces{"x", "<a><b>", "x", "<a>", "b>"}));
  // A letter with an accent is a word character: no single-word match beside it.
  EXPECT_EQ(pieces(*tokenizer, "écat cat"), (Pieces{"é", "c", "a", "t", " ", "cat"}));
  // rstrip takes the spaces and newlines after; lstrip stops at the previous added token.
  EXPECT_EQ(pieces(*tokenizer, "<r> \n x <r>  <l>"), (Pieces{"<r>", "x", " ", "<r>", "<l>"}));
}

TEST_F(TokenizerFeatures, MoreSplitShapes) {
  json file = piece_vocabulary(std::string(kAscii) + "é\u180E", {"ab", "cd", "éé", ",,", " x"});
  // Contiguous on the inverted pattern: runs of letters are the delimiters, glued when adjacent.
  file["pre_tokenizer"] = split(json{{"Regex", "[,;]"}}, "Contiguous", true);
  EXPECT_EQ(pieces(*load(file), "ab,,cd;éé"), (Pieces{"ab", ",,", "cd", ";", "éé"}));
  // `\w` and `\s` in a pattern mean Oniguruma's sets: é is a word character, U+180E is not a space.
  file["pre_tokenizer"] = split(json{{"Regex", "\\w+|\\s+"}}, "Isolated");
  EXPECT_EQ(pieces(*load(file), "éé x\u180E"), (Pieces{"éé", " ", "x", "\u180E"}));
  // ByteLevel without its regex: one piece, a space put in front.
  file["pre_tokenizer"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", false}};
  file["model"]["vocab"]["Ġx"] = file["model"]["vocab"].size();
  EXPECT_EQ(pieces(*load(file), "x"), (Pieces{"Ġx"}));
}

TEST_F(TokenizerFeatures, PostProcessors) {
  json file = piece_vocabulary(kAscii, {"ab"});
  const int bos = add_tokens(file, {added_token("<s>", true), added_token("</s>", true)}), eos = bos + 1;
  file["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({json{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              json{{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
      {"pair", json::array()},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {bos}}, {"tokens", {"<s>"}}}},
                          {"</s>", {{"id", "</s>"}, {"ids", {eos}}, {"tokens", {"</s>"}}}}}}};
  EXPECT_EQ(pieces(*load(file), "ab", true), (Pieces{"<s>", "ab", "</s>"}));
  EXPECT_EQ(pieces(*load(file), "ab", false), (Pieces{"ab"}));
  file["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"</s>", eos}}, {"cls", {"<s>", bos}},
                            {"trim_offsets", true}, {"add_prefix_space", true}};
  EXPECT_EQ(pieces(*load(file), "ab", true), (Pieces{"<s>", "ab", "</s>"}));
  file["post_processor"] = {{"type", "Sequence"},
                            {"processors", json::array({json{{"type", "ByteLevel"},
                                                             {"add_prefix_space", false},
                                                             {"trim_offsets", false},
                                                             {"use_regex", false}},
                                                        json{{"type", "BertProcessing"}, {"sep", {"</s>", eos}},
                                                             {"cls", {"<s>", bos}}}})}};
  EXPECT_EQ(pieces(*load(file), "ab", true), (Pieces{"<s>", "ab", "</s>"}));
}

TEST_F(TokenizerFeatures, Decoders) {
  json file = piece_vocabulary(std::string(kAscii) + "▁", {"▁hi", "▁▁", "<0xC3>", "<0xA9>", "<0xFF>"});
  add_tokens(file, {added_token("<s>", true)});
  file["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(decode(*load(file), {"▁hi", "▁hi"}), "hi hi");
  file["decoder"] = {{"type", "Sequence"},
                     {"decoders", json::array({json{{"type", "Replace"},
                                                    {"pattern", {{"String", "▁"}}},
                                                    {"content", " "}},
                                               json{{"type", "ByteFallback"}}, json{{"type", "Fuse"}},
                                               json{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  const auto tokenizer = load(file);
  EXPECT_EQ(decode(*tokenizer, {"▁hi", "<0xC3>", "<0xA9>", "▁▁"}), "hié  ");
  // An invalid byte run becomes one U+FFFD per byte; special tokens go through the decoder too unless skipped.
  EXPECT_EQ(decode(*tokenizer, {"<0xC3>", "<0xFF>", "▁hi"}), "\xEF\xBF\xBD\xEF\xBF\xBD hi");
  EXPECT_EQ(decode(*tokenizer, {"<s>", "▁hi"}), "<s> hi");
  EXPECT_EQ(decode(*tokenizer, {"<s>", "▁hi"}, true), "hi");
  file["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "never"}, {"split", true}};
  EXPECT_EQ(decode(*load(file), {"▁hi", "▁hi"}), " hi hi");
  file["decoder"] = {{"type", "Strip"}, {"content", "▁"}, {"start", 0}, {"stop", 2}};
  EXPECT_EQ(decode(*load(file), {"▁hi", "▁▁", "▁hi"}), "▁hi▁hi");
}

// A BERT-style file: BertNormalizer, BertPreTokenizer, WordPiece model and decoder, [CLS] ... [SEP].
json wordpiece_file(int max_input_chars_per_word = 100) {
  const Pieces tokens{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", ",", "!", "hello", "want", "##ed",
                      "中", "'", "s", "do", "not", "a", "##a", "runn", "##ing"};
  json vocabulary = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocabulary[tokens[i]] = i;
  json added = json::array();
  for (int id = 0; id < 4; ++id) added.push_back({{"id", id}, {"content", tokens[id]}, {"single_word", false},
                                                  {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                                                  {"special", true}});
  return json{{"version", "1.0"},
              {"added_tokens", added},
              {"normalizer", {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                              {"strip_accents", nullptr}, {"lowercase", true}}},
              {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
              {"post_processor", {{"type", "BertProcessing"}, {"sep", {"[SEP]", 3}}, {"cls", {"[CLS]", 2}}}},
              {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
              {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"},
                         {"max_input_chars_per_word", max_input_chars_per_word}, {"vocab", vocabulary}}}};
}

TEST_F(TokenizerFeatures, WordPieceWithBertNormalizer) {
  const auto tokenizer = load(wordpiece_file());
  // Lowercased, accents stripped (é), the control character dropped, the tab a space; greedy longest pieces.
  EXPECT_EQ(pieces(*tokenizer, "UNaffable,\tH\u00e9llo\x07!"), (Pieces{"un", "##aff", "##able", ",", "hello", "!"}));
  // A word with a part no piece covers is [UNK] as a whole; CJK ideographs are words of their own.
  EXPECT_EQ(pieces(*tokenizer, "wanted wantxed 中中"), (Pieces{"want", "##ed", "[UNK]", "中", "中"}));
  EXPECT_EQ(pieces(*tokenizer, "hello", true), (Pieces{"[CLS]", "hello", "[SEP]"}));
  EXPECT_EQ(pieces(*load(wordpiece_file(5)), "runnaaa runn"), (Pieces{"[UNK]", "runn"}));
  // The decoder joins pieces and drops "##"; its cleanup works on each token alone, so it takes the space before
  // punctuation but never sees " do not" or " 's" across two tokens.
  EXPECT_EQ(decode(*tokenizer, {"un", "##aff", "##able", ",", "hello", "!", "do", "not", "want", "'", "s"}),
            "unaffable, hello! do not want ' s");
  EXPECT_EQ(decode(*tokenizer, {"[CLS]", "hello", "[SEP]"}, true), "hello");
}

TEST_F(TokenizerFeatures, WithoutDecoderTokensAreJoinedBySpaces) {
  json file = piece_vocabulary(kAscii, {"ab", "cd"});
  add_tokens(file, {added_token("<s>", true)});
  const auto tokenizer = load(file);
  EXPECT_EQ(decode(*tokenizer, {"ab", "cd", "<s>", "!"}), "ab cd <s> !");
  EXPECT_EQ(decode(*tokenizer, {"ab", "<s>", "cd"}, true), "ab cd");
}

TEST_F(TokenizerFeatures, InvalidUtf8IsReplacedAsTheLibraryDoes) {
  json file = byte_model();
  const auto tokenizer = load(file);
  // Maximal invalid subparts: FF alone, C3 before '(', E2 82 cut short, a surrogate ED A0 80 as three.
  const std::string text = "a\xFF" "b\xC3(c\xE2\x82" "d\xED\xA0\x80";
  const auto ids = tokenizer->encode(text);
  record({{"text_hex", [&] {
             std::string hex;
             for (const char c : text) hex += fmt::format("{:02x}", static_cast<unsigned char>(c));
             return hex;
           }()},
          {"add_special_tokens", false},
          {"ids", ids}});
  EXPECT_EQ(tokenizer->decode(ids), "a\uFFFDb\uFFFD(c\uFFFDd\uFFFD\uFFFD\uFFFD");
}

TEST_F(TokenizerFeatures, RefusedFeaturesNameTheField) {
  const auto refused = [&](json file, const std::string& field) {
    try {
      load(file);
      ADD_FAILURE() << "accepted " << field;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(field), std::string::npos) << error.what();
    }
  };
  json file = piece_vocabulary("ab", {});
  json changed = file;
  changed["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  refused(changed, "pre_tokenizer.type");
  changed = file;
  changed["decoder"] = {{"type", "CTC"}, {"pad_token", "<pad>"}};
  refused(changed, "decoder.type");
  changed = file;
  changed["model"]["type"] = "Unigram";
  refused(changed, "model.type");
  changed = file;
  changed["truncation"] = {{"max_length", 10}};
  refused(changed, "truncation");
  changed = file;
  changed["model"]["continuing_subword_prefix"] = "##";
  refused(changed, "model.continuing_subword_prefix");
  changed = file;
  changed["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({json{{"type", "Split"}, {"pattern", {{"Regex", "(("}}}, {"behavior", "Isolated"}}})}};
  refused(changed, "pre_tokenizer.pretokenizers[0].pattern.Regex");
  changed = file;
  changed["model"]["merges"] = json::array({"a b c"});
  refused(changed, "model.merges[0]");
  changed = file;
  changed["model"]["merges"] = json::array({"a z"});
  refused(changed, "model.merges[0]");
}

}  // namespace
}  // namespace fast_llm::tokenizer
