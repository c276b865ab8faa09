// A compiled regular expression with Unicode properties, as the tokenizer files use them (pre-tokenizer split
// patterns such as GPT-2's and Llama 3's, Replace normalizers), matched with PCRE2 in UTF + UCP mode with its JIT.
//
// Hugging Face's library matches these patterns with Oniguruma, whose `\s` is exactly Unicode's White_Space and whose
// `\w` is letters, marks, numbers and connector punctuation; PCRE2's differ slightly (its `\s` also takes U+180E, its
// `\w` leaves out marks), so the class escapes outside brackets are rewritten to Oniguruma's sets before compiling.
// Immutable after construction and safe to share between threads (match data is per call).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fast_llm::tokenizer {

class UnicodeRegex {
 public:
  // `where` names the file and field for the error raised on a pattern PCRE2 cannot compile.
  UnicodeRegex(std::string_view pattern, std::string_view where);
  ~UnicodeRegex();
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  // Byte ranges [begin, end) of the successive non-overlapping matches in `text` (valid UTF-8), leftmost first; after
  // an empty match the search resumes one character later, and an empty match where the previous match ended is
  // dropped, as Oniguruma's iterator does.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

// The pattern with `\s`, `\S`, `\w`, `\W` (outside and `\s`, `\w` inside brackets) replaced by Oniguruma's sets.
std::string oniguruma_classes_for_pcre2(std::string_view pattern);

}  // namespace fast_llm::tokenizer
