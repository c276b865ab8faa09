// Pre-tokenizer types of tokenizer.json and Hugging Face's split behaviours (see pre_tokenizers.h).
#include "fast_llm/tokenizer/pre_tokenizers.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <functional>
#include <utility>

#include "fast_llm/tokenizer/byte_level.h"
#include "fast_llm/tokenizer/string_pattern.h"
#include "fast_llm/tokenizer/unicode_regex.h"
#include "fast_llm/tokenizer/utf8.h"

namespace fast_llm::tokenizer {
namespace {

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

SplitBehavior parse_behavior(const Json& node, const JsonPlace& place, SplitBehavior fallback) {
  if (!json_present(node, "behavior")) return fallback;
  const std::string name = json_string(node, "behavior", place);
  if (name == "Removed") return SplitBehavior::removed;
  if (name == "Isolated") return SplitBehavior::isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (name == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (name == "Contiguous") return SplitBehavior::contiguous;
  json_unsupported(place / "behavior", fmt::format("split behavior \"{}\"", name));
}

using Ranges = std::vector<std::pair<size_t, size_t>>;

// Splits `piece` at `matches` (sorted, non-overlapping) as Hugging Face's NormalizedString::split does; appends the
// non-empty results to `out`.
void split_piece(const TextPiece& piece, const Ranges& matches, SplitBehavior behavior, bool invert,
                 std::vector<TextPiece>& out) {
  struct Span {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t previous = 0;
  for (const auto& [begin, end] : matches) {
    if (previous != begin) spans.push_back({previous, begin, invert});
    spans.push_back({begin, end, !invert});
    previous = end;
  }
  if (previous != piece.text.size()) spans.push_back({previous, piece.text.size(), invert});

  // Each kept span: [begin, end).
  std::vector<std::pair<size_t, size_t>> kept;
  kept.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const Span& span : spans) kept.emplace_back(span.begin, span.end);
      break;
    case SplitBehavior::removed:
      for (const Span& span : spans)
        if (!span.is_match) kept.emplace_back(span.begin, span.end);
      break;
    case SplitBehavior::contiguous:
      for (const Span& span : spans) {
        if (span.is_match == previous_match && !kept.empty()) kept.back().second = span.end;
        else kept.emplace_back(span.begin, span.end);
        previous_match = span.is_match;
      }
      break;
    case SplitBehavior::merged_with_previous:
      for (const Span& span : spans) {
        if (span.is_match && !previous_match && !kept.empty()) kept.back().second = span.end;
        else kept.emplace_back(span.begin, span.end);
        previous_match = span.is_match;
      }
      break;
    case SplitBehavior::merged_with_next:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) kept.back().first = it->begin;
        else kept.emplace_back(it->begin, it->end);
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const auto& [begin, end] : kept)
    if (end > begin) out.push_back({piece.text.substr(begin, end - begin), piece.at_text_start && begin == 0});
}

// Each code point for which `predicate` holds is one match.
void find_code_points(std::string_view text, const std::function<bool(char32_t)>& predicate, Ranges& matches) {
  matches.clear();
  for (size_t position = 0; position < text.size();) {
    const size_t begin = position;
    if (predicate(next_code_point(text, position))) matches.emplace_back(begin, position);
  }
}

// Rust's char::is_whitespace: Unicode White_Space.
bool is_whitespace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }
// Rust's char::is_numeric: general categories Nd, Nl, No.
bool is_numeric(char32_t c) {
  const int8_t type = u_charType(static_cast<UChar32>(c));
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}
// Hugging Face's is_punc: ASCII punctuation (symbols included) or a Unicode punctuation category.
bool is_punctuation(char32_t c) {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  return u_ispunct(static_cast<UChar32>(c));
}

// A pre-tokenizer that splits every piece by one rule.
class SplitBy : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    std::vector<TextPiece> out;
    out.reserve(pieces.size() * 4);
    Ranges matches;
    for (const TextPiece& piece : pieces) {
      find(piece.text, matches);
      split_piece(piece, matches, behavior_, invert_, out);
    }
    pieces = std::move(out);
  }

 protected:
  SplitBy(SplitBehavior behavior, bool invert) : behavior_(behavior), invert_(invert) {}
  virtual void find(std::string_view text, Ranges& matches) const = 0;

 private:
  SplitBehavior behavior_;
  bool invert_;
};

class Split final : public SplitBy {
 public:
  Split(const Json& node, const JsonPlace& place)
      : SplitBy(parse_behavior(node, place, SplitBehavior::isolated), json_bool(node, "invert", place, false)),
        pattern_(json_required(node, "pattern", place), place / "pattern") {
    if (!json_present(node, "behavior")) json_error(place / "behavior", "missing");
  }

 private:
  void find(std::string_view text, Ranges& matches) const override { pattern_.find_all(text, matches); }
  StringPattern pattern_;
};

class SplitByCodePoint final : public SplitBy {
 public:
  SplitByCodePoint(std::function<bool(char32_t)> predicate, SplitBehavior behavior)
      : SplitBy(behavior, false), predicate_(std::move(predicate)) {}

 private:
  void find(std::string_view text, Ranges& matches) const override { find_code_points(text, predicate_, matches); }
  std::function<bool(char32_t)> predicate_;
};

// Keeps the matches of a regex, drops the rest.
class KeepRegexMatches final : public SplitBy {
 public:
  KeepRegexMatches(std::string_view pattern, const JsonPlace& place)
      : SplitBy(SplitBehavior::removed, true), regex_(pattern, place.str()) {}

 private:
  void find(std::string_view text, Ranges& matches) const override { regex_.find_all(text, matches); }
  UnicodeRegex regex_;
};

// GPT-2's pattern, as Hugging Face's ByteLevel pre-tokenizer writes it.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(const Json& node, const JsonPlace& place)
      : add_prefix_space_(json_bool(node, "add_prefix_space", place, true)) {
    if (json_bool(node, "use_regex", place, true)) regex_ = std::make_unique<UnicodeRegex>(kGpt2Pattern, place.str());
  }
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    std::vector<TextPiece> split;
    Ranges matches;
    for (TextPiece& piece : pieces) {
      if (add_prefix_space_ && !piece.text.starts_with(' ')) piece.text.insert(piece.text.begin(), ' ');
      if (regex_) {
        regex_->find_all(piece.text, matches);
        split_piece(piece, matches, SplitBehavior::isolated, false, split);
      } else if (!piece.text.empty()) {
        split.push_back(std::move(piece));
      }
    }
    for (TextPiece& piece : split) {
      std::string mapped;
      mapped.reserve(piece.text.size() * 2);
      append_byte_level(mapped, piece.text);
      piece.text = std::move(mapped);
    }
    pieces = std::move(split);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<UnicodeRegex> regex_;
};

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(const Json& node, const JsonPlace& place) {
    const std::string replacement = json_string(node, "replacement", place);
    size_t position = 0;
    if (replacement.empty() || (next_code_point(replacement, position), position != replacement.size()))
      json_error(place / "replacement", "expected one character");
    replacement_ = replacement;
    replacement_code_point_ = [&] {
      size_t start = 0;
      return next_code_point(replacement, start);
    }();
    if (json_present(node, "prepend_scheme")) {
      const std::string scheme = json_string(node, "prepend_scheme", place);
      if (scheme == "always") prepend_ = Prepend::always;
      else if (scheme == "first") prepend_ = Prepend::first;
      else if (scheme == "never") prepend_ = Prepend::never;
      else json_unsupported(place / "prepend_scheme", fmt::format("prepend_scheme \"{}\"", scheme));
    } else {
      // Files written before prepend_scheme existed say add_prefix_space.
      prepend_ = json_bool(node, "add_prefix_space", place, true) ? Prepend::always : Prepend::never;
    }
    split_ = json_bool(node, "split", place, true);
  }
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    std::vector<TextPiece> out;
    Ranges matches;
    for (TextPiece& piece : pieces) {
      std::string replaced;
      replaced.reserve(piece.text.size() + replacement_.size());
      for (const char c : piece.text) {
        if (c == ' ') replaced += replacement_;
        else replaced += c;
      }
      const bool prepend = prepend_ == Prepend::always || (prepend_ == Prepend::first && piece.at_text_start);
      if (prepend && !replaced.starts_with(replacement_)) replaced = replacement_ + replaced;
      piece.text = std::move(replaced);
      if (split_) {
        find_code_points(piece.text, [this](char32_t c) { return c == replacement_code_point_; }, matches);
        split_piece(piece, matches, SplitBehavior::merged_with_next, false, out);
      } else if (!piece.text.empty()) {
        out.push_back(std::move(piece));
      }
    }
    pieces = std::move(out);
  }

 private:
  enum class Prepend { always, first, never };
  std::string replacement_;
  char32_t replacement_code_point_ = 0;
  Prepend prepend_ = Prepend::always;
  bool split_ = true;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    for (const auto& step : steps_) step->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

// Rust regex's `\w` (Alphabetic, marks, decimal numbers, connector punctuation, joiners) and `\s` (White_Space),
// which Hugging Face's Whitespace pre-tokenizer uses in `\w+|[^\w\s]+`.
constexpr std::string_view kRustWordMembers = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D})";
constexpr std::string_view kWhiteSpaceMembers =
    R"(\x{09}-\x{0D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& node, const JsonPlace& place) {
  if (node.is_null()) return nullptr;
  const std::string type = json_string(node, "type", place);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(node, place);
  if (type == "Split") return std::make_unique<Split>(node, place);
  if (type == "Metaspace") return std::make_unique<Metaspace>(node, place);
  if (type == "Digits")
    return std::make_unique<SplitByCodePoint>(is_numeric, json_bool(node, "individual_digits", place, false)
                                                              ? SplitBehavior::isolated
                                                              : SplitBehavior::contiguous);
  if (type == "WhitespaceSplit") return std::make_unique<SplitByCodePoint>(is_whitespace, SplitBehavior::removed);
  if (type == "Punctuation")
    return std::make_unique<SplitByCodePoint>(is_punctuation, parse_behavior(node, place, SplitBehavior::isolated));
  if (type == "CharDelimiterSplit") {
    const std::string delimiter = json_string(node, "delimiter", place);
    size_t position = 0;
    if (delimiter.empty()) json_error(place / "delimiter", "expected one character");
    const char32_t code_point = next_code_point(delimiter, position);
    if (position != delimiter.size()) json_error(place / "delimiter", "expected one character");
    return std::make_unique<SplitByCodePoint>([code_point](char32_t c) { return c == code_point; },
                                              SplitBehavior::removed);
  }
  if (type == "Whitespace") {
    const std::string pattern = fmt::format("[{0}]+|[^{0}{1}]+", kRustWordMembers, kWhiteSpaceMembers);
    return std::make_unique<KeepRegexMatches>(pattern, place);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    steps.push_back(std::make_unique<SplitByCodePoint>(is_whitespace, SplitBehavior::removed));
    steps.push_back(std::make_unique<SplitByCodePoint>(is_punctuation, SplitBehavior::isolated));
    return std::make_unique<Sequence>(std::move(steps));
  }
  if (type == "Sequence") {
    const Json& list = json_required(node, "pretokenizers", place);
    if (!list.is_array()) json_error(place / "pretokenizers", "expected an array");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      auto step = make_pre_tokenizer(list[i], (place / "pretokenizers")[i]);
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  json_unsupported(place / "type", fmt::format("pre_tokenizer type \"{}\"", type));
}

}  // namespace fast_llm::tokenizer
