#include "fast_llm/config/yaml11_scalars.h"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

namespace fast_llm::config::yaml11 {

namespace {

bool is_digit_in_base(char c, int base) {
  if (base == 16) return std::isxdigit(static_cast<unsigned char>(c)) != 0;
  return c >= '0' && c < char('0' + base);
}

int digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  return std::tolower(static_cast<unsigned char>(c)) - 'a' + 10;
}

// Digits of `base` with underscores anywhere after the first character, accumulated into `value` (unsigned, so that
// the negative limit fits). Returns false when the text is not of that form.
bool accumulate(std::string_view digits, int base, unsigned __int128& value, bool& overflow) {
  if (digits.empty()) return false;
  bool any_digit = false;
  for (char c : digits) {
    if (c == '_') continue;
    if (!is_digit_in_base(c, base)) return false;
    any_digit = true;
    value = value * unsigned(base) + unsigned(digit_value(c));
    if (value > (unsigned __int128)(std::numeric_limits<uint64_t>::max())) overflow = true;
  }
  return any_digit;
}

// Base 60: a leading [1-9][0-9_]* then groups of :[0-5]?[0-9].
bool read_sexagesimal(std::string_view text, unsigned __int128& value, bool& overflow) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos || colon == 0 || text[0] == '0') return false;
  if (!accumulate(text.substr(0, colon), 10, value, overflow)) return false;
  std::string_view rest = text.substr(colon);
  while (!rest.empty()) {
    if (rest[0] != ':') return false;
    rest.remove_prefix(1);
    size_t length = 0;
    while (length < rest.size() && length < 2 && std::isdigit(static_cast<unsigned char>(rest[length]))) ++length;
    if (length == 0 || (length == 2 && rest[0] > '5')) return false;
    unsigned group = 0;
    for (size_t i = 0; i < length; ++i) group = group * 10 + unsigned(rest[i] - '0');
    value = value * 60 + group;
    if (value > (unsigned __int128)(std::numeric_limits<uint64_t>::max())) overflow = true;
    rest.remove_prefix(length);
  }
  return true;
}

}  // namespace

std::optional<bool> read_bool(std::string_view text) {
  static constexpr std::array<std::string_view, 9> kTrue{"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"};
  static constexpr std::array<std::string_view, 9> kFalse{"no",    "No",    "NO",  "false", "False",
                                                          "FALSE", "off",   "Off", "OFF"};
  for (std::string_view word : kTrue)
    if (text == word) return true;
  for (std::string_view word : kFalse)
    if (text == word) return false;
  return std::nullopt;
}

IntegerReading read_integer(std::string_view text) {
  IntegerReading reading;
  bool negative = false;
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) {
    negative = text[0] == '-';
    text.remove_prefix(1);
  }
  if (text.empty()) return reading;
  unsigned __int128 magnitude = 0;
  bool overflow = false;
  bool matched = false;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'b' || text[1] == 'B'))
    matched = text[1] == 'b' && accumulate(text.substr(2), 2, magnitude, overflow);
  else if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X'))
    matched = text[1] == 'x' && accumulate(text.substr(2), 16, magnitude, overflow);
  else if (text.size() > 1 && text[0] == '0')
    matched = accumulate(text.substr(1), 8, magnitude, overflow);
  else if (text.find(':') != std::string_view::npos)
    matched = read_sexagesimal(text, magnitude, overflow);
  else
    matched = text[0] != '_' && accumulate(text, 10, magnitude, overflow);
  if (!matched) return reading;
  reading.matched = true;
  const unsigned __int128 limit =
      negative ? (unsigned __int128)(std::numeric_limits<int64_t>::max()) + 1 : std::numeric_limits<int64_t>::max();
  if (overflow || magnitude > limit) {
    reading.out_of_range = true;
    return reading;
  }
  reading.value = negative ? int64_t(-(__int128)magnitude) : int64_t(magnitude);
  return reading;
}

std::optional<double> read_float(std::string_view text) {
  for (std::string_view word : {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "inf"})
    if (text == word) return std::numeric_limits<double>::infinity();
  for (std::string_view word : {"-.inf", "-.Inf", "-.INF", "-inf"})
    if (text == word) return -std::numeric_limits<double>::infinity();
  for (std::string_view word : {".nan", ".NaN", ".NAN", "nan"})
    if (text == word) return std::numeric_limits<double>::quiet_NaN();
  const IntegerReading integer = read_integer(text);
  if (integer.matched && !integer.out_of_range) return double(integer.value);
  // Base 60 with a fraction: 1:30.5 is 90.5.
  const size_t colon = text.find(':');
  if (colon != std::string_view::npos) {
    const size_t dot = text.find('.', colon);
    if (dot == std::string_view::npos) return std::nullopt;
    const IntegerReading whole = read_integer(text.substr(0, dot));
    if (!whole.matched || whole.out_of_range) return std::nullopt;
    std::string fraction_text = "0";
    fraction_text.append(text.substr(dot));
    const std::optional<double> fraction = read_float(fraction_text);
    if (!fraction) return std::nullopt;
    return whole.value < 0 || text[0] == '-' ? double(whole.value) - *fraction : double(whole.value) + *fraction;
  }
  // Decimal forms, underscores removed (not before the first digit, nor in the exponent).
  std::string plain;
  plain.reserve(text.size());
  bool seen_digit = false, in_exponent = false;
  for (char c : text) {
    if (c == 'e' || c == 'E') in_exponent = true;
    if (c == '_') {
      if (!seen_digit || in_exponent) return std::nullopt;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) seen_digit = true;
    else if (c != '.' && c != '-' && c != '+' && c != 'e' && c != 'E') return std::nullopt;
    plain.push_back(c);
  }
  if (!seen_digit) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(plain.c_str(), &end);
  if (end != plain.c_str() + plain.size()) return std::nullopt;
  return value;
}

}  // namespace fast_llm::config::yaml11
