// Plain scalars as PyYAML (YAML 1.1) reads them, so that a Fast-LLM config means here what it means to Fast-LLM.
// yaml-cpp hands every scalar over as text; the config codecs read numbers and booleans through these functions:
//   booleans  yes/no, on/off, true/false in the three spellings y-e-s, Y-e-s, Y-E-S (not y/n: PyYAML reads those
//             as strings);
//   integers  underscores as digit separators (100_000), 0b binary, 0x hex, a leading 0 for octal (010 is 8, as in
//             Fast-LLM), base 60 (1:30 is 90), a sign;
//   floats    PyYAML's forms (1.5, .5, 1_000.5, 1.0e-5, .inf, -.Inf, .NaN, base 60 with a fraction), an integer of the
//             forms above, and also an exponent without a dot (1e-5): PyYAML reads that as a string, which Fast-LLM
//             then refuses in a float field, and every user who writes it means the number. Likewise 08 and 09 (not
//             octal, so strings to PyYAML) are the decimal numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace fast_llm::config::yaml11 {

std::optional<bool> read_bool(std::string_view text);

struct IntegerReading {
  bool matched = false;       // the text is an integer in one of the forms above
  bool out_of_range = false;  // ... but does not fit in int64
  int64_t value = 0;
};
IntegerReading read_integer(std::string_view text);

std::optional<double> read_float(std::string_view text);

}  // namespace fast_llm::config::yaml11
