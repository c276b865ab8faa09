// Literal or regex patterns of tokenizer.json (see string_pattern.h).
#include "fast_llm/tokenizer/string_pattern.h"

namespace fast_llm::tokenizer {

StringPattern::StringPattern(const Json& node, const JsonPlace& place) {
  if (!node.is_object() || node.size() != 1)
    json_error(place, fmt::format("expected {{\"String\": ...}} or {{\"Regex\": ...}}, got {}", node.dump()));
  if (json_present(node, "String")) {
    literal_ = json_string(node, "String", place);
  } else if (json_present(node, "Regex")) {
    regex_ = std::make_unique<UnicodeRegex>(json_string(node, "Regex", place), (place / "Regex").str());
  } else {
    json_error(place, fmt::format("expected {{\"String\": ...}} or {{\"Regex\": ...}}, got {}", node.dump()));
  }
}

void StringPattern::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  if (regex_) {
    regex_->find_all(text, matches);
    return;
  }
  matches.clear();
  if (literal_.empty()) return;
  for (size_t position = text.find(literal_); position != std::string_view::npos;
       position = text.find(literal_, position + literal_.size()))
    matches.emplace_back(position, position + literal_.size());
}

}  // namespace fast_llm::tokenizer
