// Decoder types of tokenizer.json (see decoders.h).
#include "fast_llm/tokenizer/decoders.h"

#include <optional>

#include "fast_llm/tokenizer/byte_level.h"
#include "fast_llm/tokenizer/string_pattern.h"
#include "fast_llm/tokenizer/utf8.h"

namespace fast_llm::tokenizer {
namespace {

char32_t single_code_point(const std::string& text, const JsonPlace& place) {
  size_t position = 0;
  if (text.empty()) json_error(place, "expected one character");
  const char32_t code_point = next_code_point(text, position);
  if (position != text.size()) json_error(place, "expected one character");
  return code_point;
}

class ByteLevel final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      // A token with a character outside the alphabet keeps its own UTF-8 bytes, as Hugging Face's decoder does.
      const size_t start = bytes.size();
      bool in_alphabet = true;
      for (size_t position = 0; position < token.size();) {
        const auto byte = byte_of_byte_level_char(next_code_point(token, position));
        if (!byte) {
          in_alphabet = false;
          break;
        }
        bytes += static_cast<char>(*byte);
      }
      if (!in_alphabet) {
        bytes.resize(start);
        bytes += token;
      }
    }
    tokens.assign(1, to_valid_utf8(bytes));
  }
};

class Metaspace final : public Decoder {
 public:
  Metaspace(const Json& node, const JsonPlace& place) {
    replacement_ = json_string(node, "replacement", place);
    single_code_point(replacement_, place / "replacement");
    if (json_present(node, "prepend_scheme"))
      strip_first_space_ = json_string(node, "prepend_scheme", place) != "never";
    else
      strip_first_space_ = json_bool(node, "add_prefix_space", place, true);
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& token = tokens[i];
      for (size_t position = 0; position < token.size();) {
        if (token.compare(position, replacement_.size(), replacement_) == 0) {
          out += ' ';
          position += replacement_.size();
        } else {
          out += token[position++];
        }
      }
      if (i == 0 && strip_first_space_ && out.starts_with(' ')) out.erase(0, 1);
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_space_ = true;
};

class ByteFallback final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string bytes;
    size_t byte_count = 0;
    const auto flush = [&] {
      if (byte_count == 0) return;
      if (is_valid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < byte_count; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      byte_count = 0;
    };
    for (std::string& token : tokens) {
      if (const auto byte = parse_byte_token(token)) {
        bytes += static_cast<char>(*byte);
        ++byte_count;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static std::optional<uint8_t> parse_byte_token(const std::string& token) {
    if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return std::nullopt;
    const int high = hex_digit(token[3]), low = hex_digit(token[4]);
    if (high < 0 || low < 0) return std::nullopt;
    return static_cast<uint8_t>(high * 16 + low);
  }
};

class Fuse final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    tokens.assign(1, std::move(joined));
  }
};

class Strip final : public Decoder {
 public:
  Strip(const Json& node, const JsonPlace& place)
      : content_(single_code_point(json_string(node, "content", place), place / "content")),
        start_(json_integer(node, "start", place)),
        stop_(json_integer(node, "stop", place)) {
    if (start_ < 0 || stop_ < 0) json_error(place, "start and stop must be non-negative");
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      std::vector<std::pair<size_t, char32_t>> characters;  // (byte offset, code point)
      for (size_t position = 0; position < token.size();) {
        const size_t start = position;
        characters.emplace_back(start, next_code_point(token, position));
      }
      size_t first = 0, last = characters.size();
      while (first < characters.size() && static_cast<int64_t>(first) < start_ && characters[first].second == content_)
        ++first;
      size_t stripped = 0;
      while (last > first && static_cast<int64_t>(stripped) < stop_ && characters[last - 1].second == content_) {
        --last;
        ++stripped;
      }
      const size_t begin = first < characters.size() ? characters[first].first : token.size();
      const size_t end = last < characters.size() ? characters[last].first : token.size();
      token = token.substr(begin, end - begin);
    }
  }

 private:
  char32_t content_;
  int64_t start_, stop_;
};

class Replace final : public Decoder {
 public:
  Replace(const Json& node, const JsonPlace& place)
      : pattern_(json_required(node, "pattern", place), place / "pattern"),
        content_(json_string(node, "content", place)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    for (std::string& token : tokens) {
      pattern_.find_all(token, matches);
      if (matches.empty()) continue;
      std::string out;
      size_t previous = 0;
      for (const auto& [begin, end] : matches) {
        out.append(token, previous, begin - previous);
        out += content_;
        previous = end;
      }
      out.append(token, previous);
      token = std::move(out);
    }
  }

 private:
  StringPattern pattern_;
  std::string content_;
};

// BERT's: pieces after the first lose `prefix` ("##") or get a space before them; `cleanup` undoes the spaces that
// tokenization put before punctuation and English contractions.
class WordPiece final : public Decoder {
 public:
  WordPiece(const Json& node, const JsonPlace& place)
      : prefix_(json_optional_string(node, "prefix", place).value_or("##")),
        cleanup_(json_bool(node, "cleanup", place, true)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& token = tokens[i];
      if (i != 0) {
        if (!prefix_.empty() && token.starts_with(prefix_)) token.erase(0, prefix_.size());
        else token = " " + token;
      }
      if (cleanup_) token = cleanup(token);
    }
  }

 private:
  static void replace_all(std::string& text, std::string_view from, std::string_view to) {
    for (size_t position = text.find(from); position != std::string::npos;
         position = text.find(from, position + to.size()))
      text.replace(position, from.size(), to);
  }
  static std::string cleanup(std::string text) {
    static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
        {" .", "."},     {" ?", "?"},     {" !", "!"},         {" ,", ","},          {" ' ", "'"},   {" n't", "n't"},
        {" 'm", "'m"},   {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"},      {" 're", "'re"}};
    for (const auto& [from, to] : kRules) replace_all(text, from, to);
    return text;
  }
  std::string prefix_;
  bool cleanup_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const Json& node, const JsonPlace& place) {
  if (node.is_null()) return nullptr;
  const std::string type = json_string(node, "type", place);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Metaspace") return std::make_unique<Metaspace>(node, place);
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") return std::make_unique<Strip>(node, place);
  if (type == "Replace") return std::make_unique<Replace>(node, place);
  if (type == "WordPiece") return std::make_unique<WordPiece>(node, place);
  if (type == "Sequence") {
    const Json& list = json_required(node, "decoders", place);
    if (!list.is_array()) json_error(place / "decoders", "expected an array");
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      auto step = make_decoder(list[i], (place / "decoders")[i]);
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  json_unsupported(place / "type", fmt::format("decoder type \"{}\"", type));
}

}  // namespace fast_llm::tokenizer
