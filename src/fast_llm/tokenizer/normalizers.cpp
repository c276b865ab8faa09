// Normalizer types of tokenizer.json (see normalizers.h); Unicode normalization and case mapping are ICU's.
#include "fast_llm/tokenizer/normalizers.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <vector>

#include "fast_llm/tokenizer/string_pattern.h"
#include "fast_llm/tokenizer/utf8.h"

namespace fast_llm::tokenizer {
namespace {

class UnicodeNormalization final : public Normalizer {
 public:
  UnicodeNormalization(const std::string& form, const JsonPlace& place) {
    UErrorCode status = U_ZERO_ERROR;
    normalizer_ = form == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                  : form == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                  : form == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                   : icu::Normalizer2::getNFKDInstance(status);
    if (U_FAILURE(status)) json_error(place, fmt::format("ICU has no {} data ({})", form, u_errorName(status)));
  }
  void normalize(std::string& text) const override {
    UErrorCode status = U_ZERO_ERROR;
    if (normalizer_->isNormalizedUTF8(text, status) && U_SUCCESS(status)) return;
    std::string out;
    icu::StringByteSink<std::string> sink(&out);
    status = U_ZERO_ERROR;
    normalizer_->normalizeUTF8(0, text, sink, nullptr, status);
    FLM_ASSERT(U_SUCCESS(status), "ICU normalization failed: {}", u_errorName(status));
    text = std::move(out);
  }

 private:
  const icu::Normalizer2* normalizer_ = nullptr;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    for (size_t position = 0; position < text.size();) {
      const auto byte = static_cast<unsigned char>(text[position]);
      if (byte < 0x80) {
        out += static_cast<char>(byte >= 'A' && byte <= 'Z' ? byte + 32 : byte);
        ++position;
        continue;
      }
      // One code point at a time, so that no context (final sigma) applies, as in Rust's char::to_lowercase.
      const char32_t code_point = next_code_point(text, position);
      UChar source[2];
      int32_t source_length = 0;
      U16_APPEND_UNSAFE(source, source_length, code_point);
      UChar lowered[8];
      UErrorCode status = U_ZERO_ERROR;
      const int32_t length = u_strToLower(lowered, 8, source, source_length, "", &status);
      FLM_ASSERT(U_SUCCESS(status), "ICU lowercase failed: {}", u_errorName(status));
      for (int32_t i = 0; i < length;) {
        UChar32 unit;
        U16_NEXT(lowered, i, length, unit);
        append_utf8(out, static_cast<char32_t>(unit));
      }
    }
    text = std::move(out);
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    // Code point boundaries: first the leading White_Space, then the trailing.
    std::vector<size_t> starts;
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!u_isUWhiteSpace(static_cast<UChar32>(next_code_point(text, next)))) break;
        begin = next;
      }
    }
    if (right_) {
      for (size_t position = begin; position < end;) {
        starts.push_back(position);
        next_code_point(text, position);
      }
      while (!starts.empty()) {
        size_t position = starts.back();
        if (!u_isUWhiteSpace(static_cast<UChar32>(next_code_point(text, position)))) break;
        end = starts.back();
        starts.pop_back();
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class StripAccents final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    for (size_t position = 0; position < text.size();) {
      const size_t start = position;
      const char32_t code_point = next_code_point(text, position);
      if (u_charType(static_cast<UChar32>(code_point)) != U_NON_SPACING_MARK)
        out.append(text, start, position - start);
    }
    text = std::move(out);
  }
};

// BERT's: drops NUL, U+FFFD and control characters and turns whitespace into spaces (`clean_text`), puts spaces
// around CJK ideographs (`handle_chinese_chars`), strips accents (NFD, then no non-spacing marks; `strip_accents`,
// which defaults to `lowercase`) and lowercases, in that order, as Hugging Face's BertNormalizer does.
class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(const Json& node, const JsonPlace& place)
      : clean_text_(json_bool(node, "clean_text", place, true)),
        handle_chinese_chars_(json_bool(node, "handle_chinese_chars", place, true)),
        lowercase_(json_bool(node, "lowercase", place, true)) {
    strip_accents_ = json_present(node, "strip_accents") ? json_bool(node, "strip_accents", place, false) : lowercase_;
    UErrorCode status = U_ZERO_ERROR;
    nfd_ = icu::Normalizer2::getNFDInstance(status);
    if (U_FAILURE(status)) json_error(place, fmt::format("ICU has no NFD data ({})", u_errorName(status)));
  }
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    for (size_t position = 0; position < text.size();) {
      const size_t start = position;
      const char32_t c = next_code_point(text, position);
      const auto code = static_cast<UChar32>(c);
      if (clean_text_) {
        if (c == 0 || c == 0xFFFD) continue;
        const bool whitespace = c == '\t' || c == '\n' || c == '\r' || u_isUWhiteSpace(code);
        if (whitespace) {
          out += ' ';
          continue;
        }
        const int8_t type = u_charType(code);
        if (type == U_CONTROL_CHAR || type == U_FORMAT_CHAR || type == U_UNASSIGNED || type == U_PRIVATE_USE_CHAR ||
            type == U_SURROGATE)
          continue;
      }
      if (handle_chinese_chars_ && is_chinese_char(c)) {
        out += ' ';
        out.append(text, start, position - start);
        out += ' ';
        continue;
      }
      out.append(text, start, position - start);
    }
    if (strip_accents_) {
      std::string decomposed;
      icu::StringByteSink<std::string> sink(&decomposed);
      UErrorCode status = U_ZERO_ERROR;
      nfd_->normalizeUTF8(0, out, sink, nullptr, status);
      FLM_ASSERT(U_SUCCESS(status), "ICU normalization failed: {}", u_errorName(status));
      out = std::move(decomposed);
      StripAccents().normalize(out);
    }
    if (lowercase_) Lowercase().normalize(out);
    text = std::move(out);
  }

 private:
  static bool is_chinese_char(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
  }
  bool clean_text_, handle_chinese_chars_, lowercase_, strip_accents_;
  const icu::Normalizer2* nfd_ = nullptr;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class Replace final : public Normalizer {
 public:
  Replace(const Json& node, const JsonPlace& place)
      : pattern_(json_required(node, "pattern", place), place / "pattern"),
        content_(json_string(node, "content", place)) {}
  void normalize(std::string& text) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    pattern_.find_all(text, matches);
    if (matches.empty()) return;
    std::string out;
    out.reserve(text.size() + matches.size() * content_.size());
    size_t previous = 0;
    for (const auto& [begin, end] : matches) {
      out.append(text, previous, begin - previous);
      out += content_;
      previous = end;
    }
    out.append(text, previous);
    text = std::move(out);
  }

 private:
  StringPattern pattern_;
  std::string content_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const Json& node, const JsonPlace& place) {
  if (node.is_null()) return nullptr;
  const std::string type = json_string(node, "type", place);
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD")
    return std::make_unique<UnicodeNormalization>(type, place);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip")
    return std::make_unique<Strip>(json_bool(node, "strip_left", place, true),
                                   json_bool(node, "strip_right", place, true));
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Prepend") return std::make_unique<Prepend>(json_string(node, "prepend", place));
  if (type == "BertNormalizer") return std::make_unique<BertNormalizer>(node, place);
  if (type == "Replace") return std::make_unique<Replace>(node, place);
  if (type == "Sequence") {
    const Json& list = json_required(node, "normalizers", place);
    if (!list.is_array()) json_error(place / "normalizers", "expected an array");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      auto step = make_normalizer(list[i], (place / "normalizers")[i]);
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  json_unsupported(place / "type", fmt::format("normalizer type \"{}\"", type));
}

}  // namespace fast_llm::tokenizer
