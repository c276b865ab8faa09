// The `fim` dataset wrapper on documents whose rewrite can be checked by hand: a character tokenizer (one id per
// byte, special tokens as in Hugging Face's added tokens) makes decoded text and re-encoded ids the same characters,
// so each rewritten document can be read back as prefix / middle / suffix and compared with the original text.
#include "fast_llm/data/fim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>

#include "byte_tokenizer_json.h"
#include "data_test_util.h"
#include "fast_llm/data/data.h"
#include "fast_llm/tokenizer/tokenizer.h"

namespace fast_llm::data {
namespace {

using testing::error_message;

constexpr int64_t kBos = 256, kEos = 257, kPrefix = 258, kMiddle = 259, kSuffix = 260, kPad = 261;

// Ids 0-255 are bytes; 256-261 are the special tokens below, found in text before bytes (as added tokens are).
class CharacterTokenizer final : public tokenizer::Tokenizer {
 public:
  explicit CharacterTokenizer(bool with_bos = true) {
    if (with_bos) bos_id_ = int32_t(kBos);
    eos_id_ = int32_t(kEos);
  }
  std::vector<int32_t> encode(std::string_view text, bool) const override {
    std::vector<int32_t> ids;
    for (size_t index = 0; index < text.size();) {
      bool special = false;
      for (const auto& [token, id] : kSpecial)
        if (text.substr(index).starts_with(token)) {
          ids.push_back(id);
          index += token.size();
          special = true;
          break;
        }
      if (!special) ids.push_back(int32_t(static_cast<unsigned char>(text[index++])));
    }
    return ids;
  }
  std::string decode(std::span<const int32_t> ids, bool) const override {
    std::string text;
    for (int32_t id : ids) text += *id_to_token(id);
    return text;
  }
  int64_t vocab_size() const override { return 262; }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    for (const auto& [name, id] : kSpecial)
      if (name == token) return id;
    if (token.size() == 1) return int32_t(static_cast<unsigned char>(token[0]));
    return std::nullopt;
  }
  std::optional<std::string> id_to_token(int32_t id) const override {
    if (id >= 0 && id < 256) return std::string(1, char(id));
    for (const auto& [name, value] : kSpecial)
      if (value == id) return std::string(name);
    return std::nullopt;
  }
  bool is_special(int32_t id) const override { return id >= 256; }

 private:
  static constexpr std::array<std::pair<std::string_view, int32_t>, 6> kSpecial{
      {{"<s>", 256}, {"</s>", 257}, {"<fim_prefix>", 258}, {"<fim_middle>", 259}, {"<fim_suffix>", 260},
       {"<fim_pad>", 261}}};
};

std::vector<int64_t> ids(std::string_view text) {
  std::vector<int64_t> result;
  for (char character : text) result.push_back(static_cast<unsigned char>(character));
  return result;
}

std::vector<int64_t> join(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> result;
  for (const auto& part : parts) result.insert(result.end(), part.begin(), part.end());
  return result;
}

// The same samples whatever the index: `documents` each time.
class FixedSampledDataset final : public SampledDataset {
 public:
  explicit FixedSampledDataset(std::vector<Document> documents, int64_t samples = 64)
      : documents_(std::move(documents)), samples_(samples) {}
  const std::string& name() const override { return name_; }
  int64_t num_samples() const override { return samples_; }
  std::vector<Document> get_sample(int64_t) const override { return documents_; }

 private:
  std::vector<Document> documents_;
  int64_t samples_;
  std::string name_ = "fixed";
};

FimSettings settings(double rate, double spm_rate = 0.0) {
  return {.rate = rate, .spm_rate = spm_rate, .prefix_id = kPrefix, .middle_id = kMiddle, .suffix_id = kSuffix,
          .pad_id = kPad, .bos_id = kBos, .eos_id = kEos};
}

std::vector<int64_t> transform(const std::vector<int64_t>& tokens, const FimSettings& fim, uint64_t seed = 5,
                               int64_t index = 0, int64_t place = 0) {
  CharacterTokenizer tokenizer;
  FimRandom random(seed, index, place);
  return fim_transform(tokens, fim, tokenizer, random);
}

// The cuts FimRandom(seed, index, 0) gives a rewrite of `characters` characters at rate 1 (its first draw), and the
// SPM draw that follows.
struct Cuts {
  int64_t first, second;
  bool spm;
};
Cuts draw_cuts(int64_t characters, double spm_rate, uint64_t seed = 5, int64_t index = 0) {
  FimRandom random(seed, index, 0);
  EXPECT_TRUE(random.bernoulli(1.0));
  int64_t first = random.integer(0, characters + 1), second = random.integer(0, characters + 1);
  if (second < first) std::swap(first, second);
  return {first, second, random.bernoulli(spm_rate)};
}

// A rewritten segment read back: the texts of prefix, middle and suffix, and the layout. BOS (start of the prefix),
// EOS (end of the suffix) and pads are checked and dropped; false if the tokens are not a FIM layout.
struct Layout {
  std::string prefix, middle, suffix;
  bool spm = false;
  bool suffix_has_eos = false;
};
std::string text_of(std::span<const int64_t> tokens) {
  std::vector<int32_t> narrow(tokens.begin(), tokens.end());
  return CharacterTokenizer().decode(narrow, false);
}
std::optional<Layout> read_layout(const std::vector<int64_t>& tokens) {
  auto find = [&](int64_t token, size_t from) {
    return size_t(std::find(tokens.begin() + std::ptrdiff_t(from), tokens.end(), token) - tokens.begin());
  };
  if (tokens.size() < 3 || tokens[0] != kPrefix) return std::nullopt;
  Layout layout;
  std::span<const int64_t> all(tokens);
  auto read_suffix = [&](std::span<const int64_t> part) {
    while (!part.empty() && part.back() == kPad) part = part.first(part.size() - 1);
    if (!part.empty() && part.back() == kEos) {
      layout.suffix_has_eos = true;
      part = part.first(part.size() - 1);
    }
    layout.suffix = text_of(part);
  };
  const size_t middle = find(kMiddle, 1);
  if (middle == tokens.size()) return std::nullopt;
  if (tokens[1] == kSuffix) {
    layout.spm = true;
    read_suffix(all.subspan(2, middle - 2));
    if (middle + 1 >= tokens.size() || tokens[middle + 1] != kBos) return std::nullopt;
    // SPM puts prefix and middle together after <middle>: the caller splits them by length.
    layout.prefix = text_of(all.subspan(middle + 2));
    return layout;
  }
  const size_t suffix = find(kSuffix, 1);
  if (tokens[1] != kBos || suffix > middle) return std::nullopt;
  layout.prefix = text_of(all.subspan(2, suffix - 2));
  read_suffix(all.subspan(suffix + 1, middle - suffix - 1));
  layout.middle = text_of(all.subspan(middle + 1));
  return layout;
}

TEST(Fim, RateZeroIsTheIdentity) {
  auto tokenizer = std::make_shared<CharacterTokenizer>();
  std::vector<Document> documents(3);
  documents[0].tokens = join({{kBos}, ids("def main():\n    return 1\n"), {kEos}});
  documents[1].tokens = join({ids("abc"), {kEos}, ids("defgh"), {kEos, kEos}});
  documents[2].tokens = ids("x");
  FimSettings fim = settings(0.0, 0.5);
  fim.split_sample_id = '#';
  FimSampledDataset dataset(std::make_shared<FixedSampledDataset>(documents), tokenizer, fim, 11);
  EXPECT_EQ(dataset.name(), "fixed_fim");
  EXPECT_EQ(dataset.num_samples(), 64);
  for (int64_t index = 0; index < 64; ++index) {
    std::vector<Document> sample = dataset.get_sample(index);
    ASSERT_EQ(sample.size(), documents.size());
    for (size_t place = 0; place < documents.size(); ++place) EXPECT_EQ(sample[place].tokens, documents[place].tokens);
  }
}

// A 16-character document at rate 1: PSM puts <prefix> BOS prefix <suffix> suffix EOS <middle> middle, then the
// document is cut back to 16 tokens. The cuts are the stream's two integers in [0, 16].
TEST(Fim, PsmLayoutByHand) {
  const std::string text = "abcdefghijklmnop";
  const Cuts cuts = draw_cuts(16, 0.0);
  ASSERT_FALSE(cuts.spm);
  const std::string prefix = text.substr(0, size_t(cuts.first));
  const std::string middle = text.substr(size_t(cuts.first), size_t(cuts.second - cuts.first));
  const std::string suffix = text.substr(size_t(cuts.second));
  std::vector<int64_t> expected =
      join({{kPrefix, kBos}, ids(prefix), {kSuffix}, ids(suffix), {kEos, kMiddle}, ids(middle)});
  ASSERT_EQ(expected.size(), 21u);
  expected.resize(16);
  EXPECT_EQ(transform(ids(text), settings(1.0, 0.0)), expected)
      << "cuts " << cuts.first << ", " << cuts.second;

  // One case written out in full, so a change of the stream or the layout shows: seed 5 cuts at 2 and 13.
  ASSERT_EQ(cuts.first, 2);
  ASSERT_EQ(cuts.second, 13);
  EXPECT_EQ(transform(ids(text), settings(1.0, 0.0)),
            join({{kPrefix, kBos}, ids("ab"), {kSuffix}, ids("nop"), {kEos, kMiddle}, ids("cdefgh")}));
}

TEST(Fim, SpmLayoutByHand) {
  const std::string text = "abcdefghijklmnop";
  const Cuts cuts = draw_cuts(16, 1.0);
  ASSERT_TRUE(cuts.spm);
  const std::string prefix = text.substr(0, size_t(cuts.first));
  const std::string middle = text.substr(size_t(cuts.first), size_t(cuts.second - cuts.first));
  const std::string suffix = text.substr(size_t(cuts.second));
  std::vector<int64_t> expected =
      join({{kPrefix, kSuffix}, ids(suffix), {kEos, kMiddle, kBos}, ids(prefix), ids(middle)});
  expected.resize(16);
  EXPECT_EQ(transform(ids(text), settings(1.0, 1.0)), expected);
  EXPECT_EQ(transform(ids(text), settings(1.0, 1.0)),
            join({{kPrefix, kSuffix}, ids("nop"), {kEos, kMiddle, kBos}, ids("ab"), ids("cdefgh")}));
}

// tokenizer.max_vocab_size: re-encoded ids (BOS and EOS included) are taken modulo it, the sentinels are not.
TEST(Fim, MaxVocabSizeFoldsReencodedIds) {
  FimSettings fim = settings(1.0, 0.0);
  fim.max_vocab_size = 100;
  const std::vector<int64_t> golden =
      join({{kPrefix, kBos}, ids("ab"), {kSuffix}, ids("nop"), {kEos, kMiddle}, ids("cdefgh")});
  std::vector<int64_t> expected;
  for (int64_t token : golden)
    expected.push_back(token == kPrefix || token == kSuffix || token == kMiddle ? token : token % 100);
  EXPECT_EQ(transform(ids("abcdefghijklmnop"), fim), expected);
}

// Over many streams: every rewrite keeps the length, reads back as a layout whose parts are the text in order, and
// both layouts occur at spm_rate 0.5.
TEST(Fim, EveryRewriteIsALayoutOfTheText) {
  const std::string text = "fn add(a, b) { a + b }";
  int64_t spm = 0, psm = 0;
  FimSettings fim = settings(1.0, 0.5);
  // The suffix absorbs the five added tokens (three sentinels, BOS, EOS): it loses its EOS and four characters.
  fim.truncate_or_pad = true;
  for (int64_t index = 0; index < 200; ++index) {
    const std::vector<int64_t> result = transform(ids(text), fim, 3, index);
    ASSERT_EQ(result.size(), text.size());
    if (result == ids(text)) continue;  // a suffix of at most 5 tokens cannot absorb them: left alone
    std::optional<Layout> layout = read_layout(result);
    ASSERT_TRUE(layout.has_value()) << index;
    EXPECT_FALSE(layout->suffix_has_eos);  // cut off to keep the length
    if (layout->spm) {
      ++spm;
      // SPM: prefix and middle follow each other; the suffix (cut by 5) is a prefix of the rest of the text.
      const std::string& together = layout->prefix;
      ASSERT_TRUE(text.starts_with(together)) << index;
      EXPECT_TRUE(text.substr(together.size()).starts_with(layout->suffix)) << index;
      EXPECT_EQ(together.size() + layout->suffix.size() + 4, text.size()) << index;
    } else {
      ++psm;
      const std::string head = layout->prefix;
      ASSERT_TRUE(text.starts_with(head)) << index;
      const std::string rest = text.substr(head.size());
      // The middle is a prefix of the rest, and the truncated suffix starts where the middle ends.
      ASSERT_TRUE(rest.starts_with(layout->middle)) << index;
      EXPECT_TRUE(rest.substr(layout->middle.size()).starts_with(layout->suffix)) << index;
      EXPECT_EQ(head.size() + layout->middle.size() + layout->suffix.size() + 4, text.size()) << index;
    }
  }
  EXPECT_GT(spm, 20);
  EXPECT_GT(psm, 20);
}

TEST(Fim, TruncateOrPadKeepsEachSegmentsLength) {
  // Text that re-encodes to fewer ids than were decoded (a special-token string typed out as characters becomes one
  // id when no cut falls inside it, 11 fewer): the suffix is padded back to the segment's length.
  const std::vector<int64_t> tokens = ids("ab<fim_prefix>cdefghijklmnopqrstuv");
  FimSettings fim = settings(1.0, 0.0);
  fim.truncate_or_pad = true;
  int64_t padded = 0;
  for (int64_t index = 0; index < 100; ++index) {
    const std::vector<int64_t> result = transform(tokens, fim, 9, index);
    ASSERT_EQ(result.size(), tokens.size());
    std::optional<Layout> layout = read_layout(result);
    if (!layout) {
      EXPECT_EQ(result, tokens) << index;
      continue;
    }
    // The pads sit right before <middle>, at the end of the suffix.
    const size_t middle = size_t(std::find(result.begin(), result.end(), kMiddle) - result.begin());
    if (result[middle - 1] == kPad) ++padded;
  }
  EXPECT_GT(padded, 0);
}

TEST(Fim, DocumentsAreCutAtEosAndKeepTheirLength) {
  // Two segments and an empty one between the two EOS, kept as it is. The empty piece after the last EOS is rewritten
  // too, but its five tokens do not fit in its length of 0, so it stays empty.
  const std::vector<int64_t> tokens = join({ids("abcdefghijkl"), {kEos, kEos}, ids("mnopqrstuvwx"), {kEos}});
  FimSettings fim = settings(1.0, 0.0);
  fim.truncate_or_pad = true;
  for (int64_t index = 0; index < 50; ++index) {
    const std::vector<int64_t> result = transform(tokens, fim, 4, index);
    ASSERT_EQ(result.size(), tokens.size());
    // Each 12-token segment keeps its length, then its EOS.
    EXPECT_EQ(result[12], kEos) << index;
    EXPECT_EQ(result[13], kEos) << index;
    EXPECT_EQ(result[26], kEos) << index;
    for (auto [begin, text] : {std::pair<size_t, std::string>{0, "abcdefghijkl"}, {14, "mnopqrstuvwx"}}) {
      std::vector<int64_t> segment(result.begin() + std::ptrdiff_t(begin), result.begin() + std::ptrdiff_t(begin + 12));
      if (segment == ids(text)) continue;
      std::optional<Layout> layout = read_layout(segment);
      ASSERT_TRUE(layout.has_value()) << index;
      EXPECT_TRUE(text.starts_with(layout->prefix + layout->middle)) << index;
    }
  }
}

TEST(Fim, MaxMiddleLenBoundsTheMiddle) {
  const std::string text = "abcdefghijklmnopqrstuvwxyz0123456789";
  FimSettings fim = settings(1.0, 0.0);
  fim.max_middle_len = 4;
  fim.truncate_or_pad = true;
  std::map<size_t, int64_t> lengths;
  for (int64_t index = 0; index < 300; ++index) {
    const std::vector<int64_t> result = transform(ids(text), fim, 8, index);
    std::optional<Layout> layout = read_layout(result);
    if (!layout) continue;
    EXPECT_LE(layout->middle.size(), 4u) << index;
    EXPECT_TRUE(text.substr(layout->prefix.size()).starts_with(layout->middle)) << index;
    ++lengths[layout->middle.size()];
  }
  // Every length from 0 to 4 is drawn.
  EXPECT_EQ(lengths.size(), 5u);
}

TEST(Fim, CutsFallBetweenCharactersNotBytes) {
  // Two-byte characters: a cut inside one would leave a lone byte, which reads back as a different character.
  const std::string text = "ééééééééééééééé";
  for (int64_t index = 0; index < 100; ++index) {
    FimSettings fim = settings(1.0, 0.0);
    fim.truncate_or_pad = true;
    std::optional<Layout> layout = read_layout(transform(ids(text), fim, 2, index));
    if (!layout) continue;
    EXPECT_EQ(layout->prefix.size() % 2, 0u) << index;
    EXPECT_EQ(layout->middle.size() % 2, 0u) << index;
  }
}

TEST(Fim, SplitSampleRewritesEachFragment) {
  const std::string first = "abcdefghijklmnop", second = "ABCDEFGHIJKLMNOP";
  const std::vector<int64_t> tokens = join({ids(first), ids("#"), ids(second)});
  FimSettings fim = settings(1.0, 0.0);
  fim.split_sample_id = '#';
  fim.fragment_rate = 1.0;
  fim.truncate_or_pad = true;
  int64_t both = 0;
  for (int64_t index = 0; index < 100; ++index) {
    const std::vector<int64_t> result = transform(tokens, fim, 6, index);
    ASSERT_EQ(result.size(), tokens.size());
    ASSERT_EQ(result[16], '#') << index;
    int64_t rewritten = 0;
    for (auto [begin, text] : {std::pair<size_t, std::string>{0, first}, {17, second}}) {
      std::vector<int64_t> fragment(result.begin() + std::ptrdiff_t(begin), result.begin() + std::ptrdiff_t(begin + 16));
      if (fragment == ids(text)) continue;
      std::optional<Layout> layout = read_layout(fragment);
      ASSERT_TRUE(layout.has_value()) << index;
      EXPECT_TRUE(text.starts_with(layout->prefix + layout->middle)) << index;
      ++rewritten;
    }
    if (rewritten == 2) ++both;
  }
  EXPECT_GT(both, 10);

  // fragment_rate 0: the segment's own draw passes, then no fragment is rewritten.
  fim.fragment_rate = 0.0;
  for (int64_t index = 0; index < 20; ++index) EXPECT_EQ(transform(tokens, fim, 6, index), tokens);
  // A segment without the split token is rewritten whole at `rate`.
  fim.fragment_rate = 1.0;
  fim.rate = 0.0;
  EXPECT_EQ(transform(tokens, fim), tokens);
  fim.rate = 1.0;
  int64_t layouts = 0;
  for (int64_t index = 0; index < 20; ++index)
    layouts += read_layout(transform(ids(first + second), fim, 6, index)).has_value();
  EXPECT_GT(layouts, 10);
}

TEST(Fim, IgnorePrefixLeavesThoseDocumentsAlone) {
  FimSettings fim = settings(1.0, 0.5);
  fim.ignore_prefix = "#!";
  const std::vector<int64_t> script = ids("#!/bin/sh\necho hello world\n");
  const std::vector<int64_t> other = ids("echo hello world #!\n");
  for (int64_t index = 0; index < 20; ++index) {
    EXPECT_EQ(transform(script, fim, 1, index), script);
    EXPECT_NE(transform(other, fim, 1, index), other);
  }
}

TEST(Fim, SamplesAreAPureFunctionOfSeedAndIndex) {
  auto tokenizer = std::make_shared<CharacterTokenizer>();
  std::vector<Document> documents(2);
  documents[0].tokens = join({{kBos}, ids("the quick brown fox jumps over the lazy dog"), {kEos}});
  documents[1].tokens = join({{kBos}, ids("the quick brown fox jumps over the lazy dog"), {kEos}});
  auto inner = std::make_shared<FixedSampledDataset>(documents);
  FimSampledDataset one(inner, tokenizer, settings(0.5, 0.5), 42);
  FimSampledDataset two(inner, tokenizer, settings(0.5, 0.5), 42);
  FimSampledDataset other_seed(inner, tokenizer, settings(0.5, 0.5), 43);
  // Read in opposite orders (as two ranks or two runs would reach them): the same samples.
  std::vector<std::vector<Document>> forward(64), backward(64);
  for (int64_t index = 0; index < 64; ++index) forward[size_t(index)] = one.get_sample(index);
  for (int64_t index = 63; index >= 0; --index) backward[size_t(index)] = two.get_sample(index);
  int64_t changed = 0, documents_differ = 0, seeds_differ = 0;
  for (size_t index = 0; index < 64; ++index) {
    for (size_t place = 0; place < 2; ++place) {
      EXPECT_EQ(forward[index][place].tokens, backward[index][place].tokens) << index;
      EXPECT_EQ(forward[index][place].size(), documents[place].size());
      if (forward[index][place].tokens != documents[place].tokens) ++changed;
    }
    // Equal documents of one sample are drawn from streams of their own.
    if (forward[index][0].tokens != forward[index][1].tokens) ++documents_differ;
    if (forward[index][0].tokens != other_seed.get_sample(int64_t(index))[0].tokens) ++seeds_differ;
  }
  EXPECT_GT(changed, 20);  // rate 0.5 over 128 documents
  EXPECT_GT(documents_differ, 10);
  EXPECT_GT(seeds_differ, 10);
}

TEST(Fim, RandomStream) {
  FimRandom random(1, 2, 3);
  std::map<int64_t, int64_t> counts;
  for (int draw = 0; draw < 7000; ++draw) {
    const int64_t value = random.integer(-3, 4);
    ASSERT_GE(value, -3);
    ASSERT_LT(value, 4);
    ++counts[value];
  }
  ASSERT_EQ(counts.size(), 7u);
  for (const auto& [value, count] : counts) EXPECT_NEAR(double(count), 1000.0, 150.0) << value;
  int64_t heads = 0;
  for (int draw = 0; draw < 1000; ++draw) {
    EXPECT_FALSE(random.bernoulli(0.0));
    EXPECT_TRUE(random.bernoulli(1.0));
    heads += random.bernoulli(0.25);
  }
  EXPECT_NEAR(double(heads), 250.0, 60.0);
  FimRandom same(1, 2, 3), other(1, 2, 4);
  EXPECT_EQ(same.integer(0, 1000000), FimRandom(1, 2, 3).integer(0, 1000000));
  EXPECT_NE(FimRandom(1, 2, 3).integer(0, int64_t(1) << 40), other.integer(0, int64_t(1) << 40));
}

TEST(Fim, RefusesSpansTokenDataAndForeignTokens) {
  auto tokenizer = std::make_shared<CharacterTokenizer>();
  std::vector<Document> documents(1);
  documents[0].tokens = ids("abcdef");
  documents[0].loss_masking_spans = {{1, 3}};
  FimSampledDataset spans(std::make_shared<FixedSampledDataset>(documents), tokenizer, settings(1.0), 0);
  std::string message = error_message([&] { spans.get_sample(0); });
  EXPECT_NE(message.find("fixed_fim: sample 0 holds a document with loss-masking or preference spans"),
            std::string::npos)
      << message;
  documents[0].loss_masking_spans.clear();
  documents[0].advantages.assign(6, 1.0f);
  documents[0].old_log_probabilities.assign(6, -1.0f);
  FimSampledDataset token_data(std::make_shared<FixedSampledDataset>(documents), tokenizer, settings(1.0), 0);
  message = error_message([&] { token_data.get_sample(0); });
  EXPECT_NE(message.find("sample 0 holds a document with token data"), std::string::npos) << message;
  documents[0].advantages.clear();
  documents[0].old_log_probabilities.clear();
  documents[0].tokens = {1, 2, 300};
  FimSampledDataset foreign(std::make_shared<FixedSampledDataset>(documents), tokenizer, settings(1.0), 0);
  message = error_message([&] { foreign.get_sample(3); });
  EXPECT_NE(message.find("sample 3 holds token 300, outside the tokenizer's 262 ids"), std::string::npos) << message;
}

// Built from its config, as a run builds it: the tokenizer file is loaded (a tokenizer.json with the ids of
// CharacterTokenizer for ASCII text), the wrapped dataset is sampled with data.seed, and each document of each sample
// is the rewrite of the wrapped one that the transform gives for (seed, sample, place).
TEST(FimDataset, BuiltFromItsConfigWithATokenizerFile) {
  testing::TemporaryFolder folder;
  std::vector<Document> documents;
  for (std::string text : {"def twice(x):\n    return x * 2\n", "fill in the middle, please", "0123456789abcdef"})
    documents.push_back({.tokens = join({{kBos}, ids(text), {kEos}})});
  testing::write_dataset(folder / "data.fast_llm_dataset", documents);
  const std::filesystem::path tokenizer = fast_llm::testing::write_byte_tokenizer(folder / "tokenizer");
  const std::string memmap = "{type: memmap, path: '" + (folder / "data.fast_llm_dataset").string() + "'}";
  auto fim = [&](const std::string& fields) {
    return "{type: fim, dataset: " + memmap + ", tokenizer: {path: '" + tokenizer.string() + "'}, " + fields + "}";
  };
  GPTDataConfig config;
  config.load(YAML::Load("{datasets: {plain: " + memmap + ", fim: " + fim("rate: 1.0") + ", identity: " +
                         fim("rate: 0.0") + "}, micro_batch_size: 24, seed: 31}"),
              "data");
  config.validate("data");
  GPTData data(config, {.vocab_size = 262});
  const auto plain = data.sample_dataset("plain", 12);
  const auto rewritten = data.sample_dataset("fim", 12);
  const auto identity = data.sample_dataset("identity", 12);
  EXPECT_EQ(rewritten->name(), plain->name() + "_fim");
  ASSERT_EQ(rewritten->num_samples(), 12);
  int64_t changed = 0;
  for (int64_t index = 0; index < 12; ++index) {
    const std::vector<Document> original = plain->get_sample(index), sample = rewritten->get_sample(index),
                                unchanged = identity->get_sample(index);
    ASSERT_EQ(sample.size(), original.size());
    ASSERT_EQ(unchanged.size(), original.size());
    for (size_t place = 0; place < original.size(); ++place) {
      EXPECT_EQ(unchanged[place].tokens, original[place].tokens) << index << " " << place;
      EXPECT_EQ(sample[place].tokens, transform(original[place].tokens, settings(1.0, 0.5), 31, index, int64_t(place)))
          << index << " " << place;
      changed += sample[place].tokens != original[place].tokens;
    }
  }
  EXPECT_GT(changed, 12);

  // A sentinel the tokenizer file lacks: an error naming the field, when the dataset is built.
  GPTDataConfig unknown;
  unknown.load(YAML::Load("{datasets: {training: " + fim("middle_token: '<MID>'") + "}}"), "data");
  unknown.validate("data");
  GPTData unknown_data(unknown, {.vocab_size = 262});
  std::string message = error_message([&] { unknown_data.sample_dataset("training", 4); });
  EXPECT_NE(message.find("data.datasets.training.middle_token: token '<MID>' is not in the vocabulary of the tokenizer"),
            std::string::npos)
      << message;

  // A sentinel the model cannot embed (a model vocabulary of 260 ids holds <fim_prefix> and <fim_middle>, not
  // <fim_suffix>).
  GPTDataConfig small;
  small.load(YAML::Load("{datasets: {training: " + fim("rate: 0.5") + "}}"), "data");
  small.validate("data");
  GPTData small_data(small, {.vocab_size = 260});
  message = error_message([&] { small_data.sample_dataset("training", 4); });
  EXPECT_NE(message.find("data.datasets.training.suffix_token: token has id 260 in the tokenizer"), std::string::npos)
      << message;
  EXPECT_NE(message.find("outside the model's vocabulary of 260"), std::string::npos) << message;
}

// ---------------------------------------------------------------------------------------------------------------
// Settings from the config

FimDatasetConfig fim_config(const std::string& fields, const std::string& tokenizer = "{path: tok.json}") {
  GPTDataConfig data;
  data.load(YAML::Load("{datasets: {training: {type: fim, dataset: {type: random}, tokenizer: " + tokenizer + ", " +
                       fields + "}}}"),
            "data");
  data.validate("data");
  return *data.datasets.at("training").as<FimDatasetConfig>();
}

TEST(FimTokens, TokenNamesAreLookedUpInTheTokenizer) {
  CharacterTokenizer tokenizer;
  FimSettings resolved = resolve_fim_settings(fim_config("rate: 0.3, split_sample: '#', max_middle_len: 7"), tokenizer);
  EXPECT_EQ(resolved.prefix_id, kPrefix);
  EXPECT_EQ(resolved.middle_id, kMiddle);
  EXPECT_EQ(resolved.suffix_id, kSuffix);
  EXPECT_EQ(resolved.pad_id, kPad);
  EXPECT_EQ(resolved.bos_id, kBos);
  EXPECT_EQ(resolved.eos_id, kEos);
  EXPECT_EQ(resolved.split_sample_id, '#');
  EXPECT_DOUBLE_EQ(resolved.rate, 0.3);
  EXPECT_DOUBLE_EQ(resolved.spm_rate, 0.5);
  EXPECT_EQ(resolved.max_middle_len, 7);
  // Other names, as Fast-LLM's own test uses with a tokenizer that has no FIM tokens.
  resolved = resolve_fim_settings(
      fim_config("prefix_token: w, middle_token: x, pad_token: y, suffix_token: z", "{path: t, bos_token: '|'}"),
      tokenizer);
  EXPECT_EQ(resolved.prefix_id, 'w');
  EXPECT_EQ(resolved.middle_id, 'x');
  EXPECT_EQ(resolved.pad_id, 'y');
  EXPECT_EQ(resolved.suffix_id, 'z');
  EXPECT_EQ(resolved.bos_id, '|');
}

TEST(FimTokens, UnknownTokensNameTheField) {
  CharacterTokenizer tokenizer;
  auto message = [&](const std::string& fields, const tokenizer::Tokenizer& used,
                     const std::string& tokenizer_config = "{path: tok.json}") {
    return error_message([&] { resolve_fim_settings(fim_config(fields, tokenizer_config), used); });
  };
  EXPECT_NE(message("prefix_token: '<PRE>'", tokenizer)
                .find("data.datasets.training.prefix_token: token '<PRE>' is not in the vocabulary of the tokenizer "
                      "tok.json"),
            std::string::npos);
  EXPECT_NE(message("middle_token: '<MID>'", tokenizer).find("training.middle_token: token '<MID>'"),
            std::string::npos);
  EXPECT_NE(message("pad_token: '<PAD>'", tokenizer).find("training.pad_token: token '<PAD>'"), std::string::npos);
  EXPECT_NE(message("suffix_token: '<SUF>'", tokenizer).find("training.suffix_token: token '<SUF>'"),
            std::string::npos);
  EXPECT_NE(message("split_sample: '<file>'", tokenizer).find("training.split_sample: token '<file>'"),
            std::string::npos);
  EXPECT_NE(message("rate: 0.5", tokenizer, "{path: t, bos_token: '<bos>'}")
                .find("training.tokenizer.bos_token: token '<bos>'"),
            std::string::npos);
  CharacterTokenizer without_bos(false);
  EXPECT_NE(message("rate: 0.5", without_bos).find("training.tokenizer: fill-in-the-middle needs a BOS token"),
            std::string::npos);
  EXPECT_EQ(message("rate: 0.5", without_bos, "{path: t, bos_token: '|'}"), "");
}

}  // namespace
}  // namespace fast_llm::data
