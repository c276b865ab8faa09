// PCRE2 (8-bit, UTF + UCP, JIT) behind UnicodeRegex; see unicode_regex.h for why class escapes are rewritten.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "fast_llm/tokenizer/unicode_regex.h"

#include <pcre2.h>

#include <new>

#include "fast_llm/core/error.h"
#include "fast_llm/tokenizer/utf8.h"

namespace fast_llm::tokenizer {
namespace {

// Unicode White_Space, Oniguruma's `\s`.
constexpr std::string_view kSpaceMembers =
    "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
// Oniguruma's Unicode `\w`: Letter, Mark, Number, Connector_Punctuation.
constexpr std::string_view kWordMembers = "\\p{L}\\p{M}\\p{N}\\p{Pc}";

}  // namespace

std::string oniguruma_classes_for_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char escaped = pattern[i + 1];
      const bool space = escaped == 's' || escaped == 'S', word = escaped == 'w' || escaped == 'W';
      if (space || word) {
        const std::string_view members = space ? kSpaceMembers : kWordMembers;
        const bool negated = escaped == 'S' || escaped == 'W';
        if (!in_class) {
          out += negated ? "[^" : "[";
          out += members;
          out += ']';
          ++i;
          continue;
        }
        if (!negated) {
          out += members;
          ++i;
          continue;
        }
      }
      out += c;
      out += escaped;
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A `]` right after `[` or `[^` is a member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct UnicodeRegex::Compiled {
  pcre2_code* code = nullptr;
};

UnicodeRegex::UnicodeRegex(std::string_view pattern, std::string_view where)
    : pattern_(pattern), compiled_(std::make_unique<Compiled>()) {
  const std::string rewritten = oniguruma_classes_for_pcre2(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    throw Error("tokenizer", fmt::format("{}: regex /{}/ does not compile (PCRE2, at offset {}: {})", where, pattern,
                                         error_offset, reinterpret_cast<const char*>(message)));
  }
  // Without JIT support PCRE2 interprets the pattern: slower, same matches.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

UnicodeRegex::~UnicodeRegex() { pcre2_code_free(compiled_->code); }

void UnicodeRegex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  matches.clear();
  const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), &pcre2_match_data_free);
  if (data == nullptr) throw std::bad_alloc();
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  size_t previous_end = std::string_view::npos;
  while (start <= text.size()) {
    const int result =
        pcre2_match(compiled_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (result == PCRE2_ERROR_NOMATCH) break;
    if (result < 0) {
      // Resource limits (match, depth, JIT stack) on pathological text: an error, never a different tokenization.
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(result, message, sizeof(message));
      throw Error("tokenizer", fmt::format("regex /{}/ failed on a text of {} bytes at byte {}: {}", pattern_,
                                           text.size(), start, reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ovector[0], end = ovector[1];
    // Oniguruma's iterator drops an empty match right where the previous match ended.
    if (!(begin == end && previous_end == end)) matches.emplace_back(begin, end);
    previous_end = end;
    if (end > begin) {
      start = end;
    } else {
      if (end >= text.size()) break;
      start = end + utf8_length(static_cast<unsigned char>(text[end]));
    }
  }
}

}  // namespace fast_llm::tokenizer
