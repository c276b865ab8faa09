#include "fast_llm/preparation/document_preparer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <nlohmann/json.hpp>

#include "fast_llm/core/error.h"
#include "fast_llm/tokenizer/utf8.h"

namespace fast_llm::preparation {

namespace {
constexpr std::string_view kComponent = "prepare";

// The offset of the first byte of `text` that is not part of a valid UTF-8 sequence (overlong forms and surrogates
// included), or npos.
size_t first_invalid_utf8(std::string_view text) {
  for (size_t index = 0; index < text.size();) {
    const unsigned char byte = static_cast<unsigned char>(text[index]);
    if (byte < 0x80) {
      ++index;
      continue;
    }
    const size_t length = (byte & 0xE0) == 0xC0 ? 2 : (byte & 0xF0) == 0xE0 ? 3 : (byte & 0xF8) == 0xF0 ? 4 : 0;
    if (length == 0 || index + length > text.size()) return index;
    uint32_t code = byte & (0x7F >> length);
    for (size_t next = 1; next < length; ++next) {
      const unsigned char continuation = static_cast<unsigned char>(text[index + next]);
      if ((continuation & 0xC0) != 0x80) return index;
      code = (code << 6) | (continuation & 0x3F);
    }
    static constexpr uint32_t kMinimum[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kMinimum[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return index;
    index += length;
  }
  return std::string_view::npos;
}

int64_t span_bound(const nlohmann::json& value, const std::string& location, const std::string& field) {
  if (!value.is_number_integer())
    throw Error(kComponent, fmt::format("{}: field `{}`: span bounds must be integers, got {}", location, field,
                                        value.dump()));
  return value.get<int64_t>();
}

// The [begin, last] pairs of a span field, given as [[b, l], ...] or flat [b, l, b, l, ...].
std::vector<std::pair<int64_t, int64_t>> read_spans(const nlohmann::json& value, const std::string& location,
                                                    const std::string& field) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  if (value.is_null()) return spans;
  if (!value.is_array())
    throw Error(kComponent, fmt::format("{}: field `{}`: expected a list of [begin, last] character spans, got {}",
                                        location, field, value.dump()));
  if (!value.empty() && value.front().is_array()) {
    for (const auto& pair : value) {
      if (!pair.is_array() || pair.size() != 2)
        throw Error(kComponent, fmt::format("{}: field `{}`: expected [begin, last] pairs, got {}", location, field,
                                            pair.dump()));
      spans.emplace_back(span_bound(pair[0], location, field), span_bound(pair[1], location, field));
    }
  } else {
    if (value.size() % 2 != 0)
      throw Error(kComponent, fmt::format("{}: field `{}`: a flat span list needs an even number of bounds, got {}",
                                          location, field, value.size()));
    for (size_t index = 0; index < value.size(); index += 2)
      spans.emplace_back(span_bound(value[index], location, field), span_bound(value[index + 1], location, field));
  }
  return spans;
}

const std::string& string_field(const nlohmann::json& record, const std::string& field, const std::string& location) {
  const auto found = record.find(field);
  if (found == record.end())
    throw Error(kComponent, fmt::format("{}: the record has no field `{}` (dataset.source_schema)", location, field));
  if (!found->is_string())
    throw Error(kComponent, fmt::format("{}: field `{}` must be a string, got {}", location, field,
                                        std::string(found->type_name())));
  return found->get_ref<const std::string&>();
}

}  // namespace

DocumentPreparer::DocumentPreparer(const tokenizer::Tokenizer& tokenizer, DocumentOptions options)
    : tokenizer_(tokenizer), options_(std::move(options)), bos_id_(tokenizer.bos_id()), eos_id_(tokenizer.eos_id()) {
  if (options_.bos_token) {
    bos_id_ = tokenizer.token_to_id(*options_.bos_token);
    FLM_CHECK(bos_id_.has_value(), kComponent, "tokenizer.bos_token: `{}` is not a token of the tokenizer",
              *options_.bos_token);
  }
  FLM_CHECK(!options_.add_bos || bos_id_, kComponent,
            "`add_bos` is set but the tokenizer does not define a BOS token; set `add_bos: false` or specify "
            "`tokenizer.bos_token`");
  FLM_CHECK(!options_.add_eos || eos_id_, kComponent,
            "`add_eos` is set but the tokenizer does not define an EOS token; set `add_eos: false`");
  if (options_.chosen_field) {
    FLM_CHECK(bos_id_ && eos_id_, kComponent,
              "preference data (chosen_span / rejected_span) packs the BOS and EOS tokens between its parts: the "
              "tokenizer needs both (set `tokenizer.bos_token` if it has no BOS)");
    bos_text_ = tokenizer.id_to_token(*bos_id_).value_or("");
    eos_text_ = tokenizer.id_to_token(*eos_id_).value_or("");
  }
  if (options_.max_vocab_size)
    FLM_CHECK(*options_.max_vocab_size > 0, kComponent, "tokenizer.max_vocab_size must be positive");
}

std::vector<int64_t> DocumentPreparer::tokenize_with_splits(std::string_view text, const std::vector<size_t>& splits,
                                                            std::vector<int64_t>& token_splits) const {
  std::vector<size_t> order(splits.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return splits[a] < splits[b]; });
  std::vector<size_t> bounds{0};
  for (size_t index : order) bounds.push_back(splits[index]);
  bounds.push_back(text.size());

  std::vector<int64_t> tokens;
  token_splits.assign(splits.size(), 0);
  const size_t pieces = bounds.size() - 1;
  for (size_t piece = 0; piece < pieces; ++piece) {
    if (piece == 0 && options_.add_bos) tokens.push_back(*bos_id_);
    const size_t begin = bounds[piece], end = bounds[piece + 1];
    if (end > begin)
      for (int32_t id : tokenizer_.encode(text.substr(begin, end - begin), false)) tokens.push_back(id);
    if (piece + 1 == pieces && options_.add_eos) tokens.push_back(*eos_id_);
    if (piece + 1 < pieces) token_splits[order[piece]] = int64_t(tokens.size());
  }
  if (options_.max_vocab_size)
    for (int64_t& token : tokens) token %= *options_.max_vocab_size;
  return tokens;
}

data::Document DocumentPreparer::from_text(std::string_view text, const std::string& location) const {
  // Hugging Face's loaders refuse text that is not UTF-8; the tokenizer would replace the bytes silently.
  if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos) {
    const int64_t line = 1 + std::count(text.begin(), text.begin() + std::ptrdiff_t(bad), '\n');
    throw Error(kComponent, fmt::format("{}:{}: not valid UTF-8 (byte {} of the file)", location, line, bad));
  }
  FLM_CHECK(!options_.advantages_field, kComponent,
            "{}: a text file has no fields; dataset.source_schema.advantages needs JSON Lines records", location);
  data::Document document;
  std::vector<int64_t> unused;
  document.tokens = tokenize_with_splits(text, {}, unused);
  return document;
}

data::Document DocumentPreparer::from_json(std::string_view line, const std::string& location) const {
  nlohmann::json record;
  try {
    record = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& error) {
    // nlohmann's messages say where in the line (and that a byte is not UTF-8).
    throw Error(kComponent, fmt::format("{}: not a JSON line (JSON Lines: one object per line): {}", location,
                                        error.what()));
  }
  if (!record.is_object())
    throw Error(kComponent, fmt::format("{}: expected a JSON object per line, got {}", location,
                                        std::string(record.type_name())));
  std::string text = string_field(record, options_.text_field, location);

  // Byte offsets to cut the text at, two per span, and what each span pair is.
  enum class Kind { loss_masking, chosen, rejected };
  std::vector<size_t> splits;
  std::vector<Kind> kinds;
  if (options_.loss_masking_spans_field) {
    const std::string& field = *options_.loss_masking_spans_field;
    const auto found = record.find(field);
    if (found == record.end())
      throw Error(kComponent, fmt::format("{}: the record has no field `{}` (dataset.source_schema.loss_masking_spans)",
                                          location, field));
    auto spans = read_spans(*found, location, field);
    std::stable_sort(spans.begin(), spans.end());
    const std::vector<size_t> offsets = tokenizer::character_offsets(text);
    const int64_t characters = int64_t(offsets.size()) - 1;
    int64_t previous_end = 0;
    for (const auto& [begin, last] : spans) {
      const int64_t end = last + 1;  // Fast-LLM's [begin, last] is inclusive
      if (begin < 0 || end < begin || end > characters)
        throw Error(kComponent, fmt::format("{}: field `{}`: span [{}, {}] is outside the text ({} characters)",
                                            location, field, begin, last, characters));
      if (begin < previous_end)
        throw Error(kComponent, fmt::format("{}: field `{}`: span [{}, {}] overlaps the previous span", location,
                                            field, begin, last));
      previous_end = end;
      splits.push_back(offsets[size_t(begin)]);
      splits.push_back(offsets[size_t(end)]);
      kinds.push_back(Kind::loss_masking);
    }
  }
  if (options_.chosen_field) {
    const std::string& chosen = string_field(record, *options_.chosen_field, location);
    const std::string& rejected = string_field(record, *options_.rejected_field, location);
    std::string full_chosen = text + chosen + eos_text_;
    const size_t chosen_begin = text.size(), chosen_end = full_chosen.size();
    const size_t rejected_begin = full_chosen.size() + bos_text_.size() + text.size();
    full_chosen += bos_text_ + text + rejected;
    text = std::move(full_chosen);
    splits.insert(splits.end(), {chosen_begin, chosen_end, rejected_begin, text.size()});
    kinds.insert(kinds.end(), {Kind::chosen, Kind::rejected});
  }

  data::Document document;
  std::vector<int64_t> token_splits;
  document.tokens = tokenize_with_splits(text, splits, token_splits);
  FLM_CHECK(document.tokens.size() <= size_t(std::numeric_limits<int32_t>::max()), kComponent,
            "{}: {} tokens in one document: spans are stored as int32", location, document.tokens.size());
  for (size_t index = 0; index < kinds.size(); ++index) {
    data::Range range{int32_t(token_splits[2 * index]), int32_t(token_splits[2 * index + 1])};
    switch (kinds[index]) {
      case Kind::loss_masking:
        document.loss_masking_spans.push_back(range);
        break;
      case Kind::chosen:
        document.chosen_spans.push_back(range);
        break;
      case Kind::rejected:
        // The rejected span ends with the document's EOS token (Fast-LLM adds it to the span).
        if (options_.add_eos) range.end += 1;
        document.rejected_spans.push_back(range);
        break;
    }
  }
  if (options_.advantages_field) {
    const std::string& field = *options_.advantages_field;
    const auto found = record.find(field);
    if (found == record.end())
      throw Error(kComponent,
                  fmt::format("{}: the record has no field `{}` (dataset.source_schema.advantages)", location, field));
    if (!found->is_number())
      throw Error(kComponent, fmt::format("{}: field `{}` is {}, expected a number (the document's advantage)",
                                          location, field, found->dump()));
    const double advantage = found->get<double>();
    if (!std::isfinite(advantage))
      throw Error(kComponent, fmt::format("{}: field `{}` is not a finite number", location, field));
    document.advantages.assign(document.tokens.size(), float(advantage));
    document.old_log_probabilities.assign(document.tokens.size(), 0.0f);
  }
  return document;
}

}  // namespace fast_llm::preparation
