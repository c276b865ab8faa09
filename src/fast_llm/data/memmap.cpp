#include "fast_llm/data/memmap.h"

#include <algorithm>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "fast_llm/core/error.h"

namespace fast_llm::data {

namespace {

constexpr std::string_view kComponent = "memmap";
constexpr std::string_view kLmHeader = "lm begin", kLmFooter = "lm end";
constexpr std::string_view kTokenHeader = "token begin", kTokenFooter = "token end";
constexpr std::string_view kRangeHeader = "range begin", kRangeFooter = "range end";
constexpr std::string_view kTokenDataHeader = "token data begin", kTokenDataFooter = "token data end";
constexpr size_t kConfigOffsetPosition = kMemmapFileHeader.size();          // 25
constexpr size_t kDataStart = kConfigOffsetPosition + sizeof(uint64_t);     // 33

uint64_t load_big_endian(const std::byte* pointer, size_t bytes) {
  uint64_t value = 0;
  for (size_t index = 0; index < bytes; ++index) value = (value << 8) | uint64_t(std::to_integer<uint8_t>(pointer[index]));
  return value;
}

// Reads the JSON reader config with errors that name the file.
class JsonFields {
 public:
  explicit JsonFields(const MappedFile& file) : file_(file) {}

  [[noreturn]] void fail(std::string_view message) const { file_.fail(message); }
  const nlohmann::json& object(const nlohmann::json& parent, std::string_view key, std::string_view where) const {
    auto found = parent.find(key);
    if (found == parent.end()) fail(fmt::format("reader config: {} has no '{}'", where, key));
    if (!found->is_object()) fail(fmt::format("reader config: {}.{} is not an object", where, key));
    return *found;
  }
  uint64_t integer(const nlohmann::json& parent, std::string_view key, std::string_view where) const {
    auto found = parent.find(key);
    if (found == parent.end()) fail(fmt::format("reader config: {} has no '{}'", where, key));
    if (found->is_number_unsigned()) return found->get<uint64_t>();
    if (found->is_number_integer()) {
      int64_t value = found->get<int64_t>();
      if (value >= 0) return uint64_t(value);
    }
    fail(fmt::format("reader config: {}.{} is not a non-negative integer ({})", where, key, found->dump()));
  }
  std::string string(const nlohmann::json& parent, std::string_view key, std::string_view where) const {
    auto found = parent.find(key);
    if (found == parent.end()) fail(fmt::format("reader config: {} has no '{}'", where, key));
    if (!found->is_string()) fail(fmt::format("reader config: {}.{} is not a string", where, key));
    return found->get<std::string>();
  }
  void only_keys(const nlohmann::json& object, std::initializer_list<std::string_view> keys,
                 std::string_view where) const {
    for (const auto& [key, value] : object.items())
      if (std::find(keys.begin(), keys.end(), key) == keys.end())
        fail(fmt::format("reader config: unknown entry '{}' in {}", key, where));
  }

 private:
  const MappedFile& file_;
};

// Size in bytes of the element types a `token_data` section may hold.
std::optional<size_t> token_data_item_size(std::string_view name) {
  if (name == "float64" || name == "int64" || name == "uint64") return 8;
  if (name == "float32" || name == "int32" || name == "uint32") return 4;
  if (name == "float16" || name == "bfloat16" || name == "int16" || name == "uint16") return 2;
  if (name == "int8" || name == "uint8") return 1;
  return std::nullopt;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// MemmapDataset

MemmapDataset::MemmapDataset(std::string name, const std::filesystem::path& path)
    : name_(std::move(name)), file_(path, kComponent) {
  const std::string label = path.string();
  const auto fail = [this](std::string_view message) { file_.fail(message); };
  const uint64_t file_size = file_.size();

  if (file_size < kDataStart)
    fail(fmt::format("file has {} bytes, too short for the {}-byte file header", file_size, kDataStart));
  if (!file_.matches(0, kMemmapFileHeader))
    fail(fmt::format("not a Fast-LLM dataset file (it does not start with '{}')", kMemmapFileHeader));

  const uint64_t config_offset = load_big_endian(file_.data() + kConfigOffsetPosition, 8);
  if (config_offset < kDataStart || config_offset > file_size || file_size - config_offset < 4)
    fail(fmt::format("reader config offset {} is outside the file ({} bytes)", config_offset, file_size));
  const uint64_t config_size = load_big_endian(file_.data() + config_offset, 4);
  if (config_size > file_size - config_offset - 4)
    fail(fmt::format("reader config of {} bytes at offset {} runs past the end of the file ({} bytes)", config_size,
                     config_offset, file_size));

  nlohmann::json reader_config;
  try {
    reader_config = nlohmann::json::parse(
        std::string_view(reinterpret_cast<const char*>(file_.data() + config_offset + 4), size_t(config_size)));
  } catch (const nlohmann::json::exception& error) {
    fail(fmt::format("reader config is not valid JSON ({})", error.what()));
  }
  JsonFields json(file_);
  if (!reader_config.is_object()) fail("reader config is not a JSON object");
  std::string type = json.string(reader_config, "type", "the reader config");
  if (type != "language_model")
    fail(fmt::format("reader config type is '{}', only 'language_model' datasets are supported", type));
  json.only_keys(reader_config,
                 {"type", "begin", "end", "tokens", "loss_masking_spans", "chosen_spans", "rejected_spans",
                  "image_patches", "advantages", "old_log_probabilities"},
                 "the language_model reader config");

  // The sections sit back to back inside the language-model section: its header, tokens, the optional sections in
  // order, its footer. `cursor` is where the next section must begin.
  const uint64_t lm_begin = json.integer(reader_config, "begin", "language_model");
  const uint64_t lm_end = json.integer(reader_config, "end", "language_model");
  if (lm_end > file_size) fail(fmt::format("language_model section ends at {}, file has {} bytes", lm_end, file_size));
  if (lm_begin < kDataStart || lm_begin > lm_end || lm_end > config_offset)
    fail(fmt::format("language_model section [{}, {}) is not between the file header ({} bytes) and the reader "
                     "config (offset {})",
                     lm_begin, lm_end, kDataStart, config_offset));
  if (!file_.matches(lm_begin, kLmHeader))
    fail(fmt::format("missing '{}' at byte {} (corrupt file)", kLmHeader, lm_begin));
  uint64_t cursor = lm_begin + kLmHeader.size();

  // Checks one section's bounds, size and marker strings; returns the offset of its payload.
  auto check_section = [&](const nlohmann::json& section, std::string_view name, std::string_view header,
                           std::string_view footer, unsigned __int128 payload_size, std::string_view what) -> uint64_t {
    uint64_t begin = json.integer(section, "begin", name);
    uint64_t end = json.integer(section, "end", name);
    if (end > file_size) fail(fmt::format("{} section ends at {}, file has {} bytes", name, end, file_size));
    if (begin != cursor)
      fail(fmt::format("{} section begins at {}, expected {} (right after the previous section)", name, begin, cursor));
    if (end < begin) fail(fmt::format("{} section ends at {} before it begins at {}", name, end, begin));
    unsigned __int128 expected = payload_size + header.size() + footer.size();
    if (expected != end - begin)
      fail(fmt::format("{} section is {} bytes, expected {} for {}", name, end - begin,
                       expected > std::numeric_limits<uint64_t>::max() ? std::string("more than 2^64")
                                                                       : std::to_string(uint64_t(expected)),
                       what));
    if (!file_.matches(begin, header))
      fail(fmt::format("{} section: missing '{}' at byte {} (corrupt file)", name, header, begin));
    if (!file_.matches(end - footer.size(), footer))
      fail(fmt::format("{} section: missing '{}' at byte {} (corrupt file)", name, footer, end - footer.size()));
    cursor = end;
    return begin + header.size();
  };

  // Tokens.
  const nlohmann::json& tokens = json.object(reader_config, "tokens", "language_model");
  // The section's type is implied by its key; when written, it must say so.
  if (tokens.contains("type") && json.string(tokens, "type", "tokens") != "token")
    fail(fmt::format("tokens section has type '{}', expected 'token'", json.string(tokens, "type", "tokens")));
  json.only_keys(tokens, {"type", "begin", "end", "num_documents", "num_tokens", "data_type"}, "tokens");
  std::string data_type_name = json.string(tokens, "data_type", "tokens");
  auto data_type = parse_token_data_type(data_type_name);
  if (!data_type) fail(fmt::format("tokens: unsupported data type '{}'", data_type_name));
  data_type_ = *data_type;
  const uint64_t num_documents = json.integer(tokens, "num_documents", "tokens");
  const uint64_t num_tokens = json.integer(tokens, "num_tokens", "tokens");
  // Each document takes 8 bytes of cumsum and each token at least one byte: larger counts cannot be in this file.
  if (num_tokens > file_size || num_documents > file_size / 8)
    fail(fmt::format("tokens: {} tokens in {} documents cannot fit in a {}-byte file", num_tokens, num_documents,
                     file_size));
  tokens_offset_ = check_section(
      tokens, "token", kTokenHeader, kTokenFooter,
      (unsigned __int128)num_tokens * token_data_type_size(data_type_) + (unsigned __int128)(num_documents + 1) * 8,
      fmt::format("{} {} tokens and {} documents", num_tokens, data_type_name, num_documents));
  num_documents_ = int64_t(num_documents);
  num_tokens_ = int64_t(num_tokens);
  cumsum_offset_ = tokens_offset_ + size_t(num_tokens) * token_data_type_size(data_type_);

  // Cumulative document sizes: start at 0, never decrease, end at num_tokens.
  int64_t previous = size_cumsum(0);
  if (previous != 0) fail(fmt::format("tokens: document size cumsum starts at {}, expected 0", previous));
  for (int64_t index = 1; index <= num_documents_; ++index) {
    int64_t value = size_cumsum(index);
    if (value < previous)
      fail(fmt::format("tokens: document size cumsum decreases at document {} ({} after {})", index - 1, value,
                       previous));
    previous = value;
  }
  if (previous != num_tokens_)
    fail(fmt::format("tokens: document size cumsum ends at {}, expected num_tokens = {}", previous, num_tokens_));

  // Span sections (loss masking, then chosen and rejected).
  auto read_range_section = [&](std::string_view key, RangeSection& out) {
    auto found = reader_config.find(key);
    if (found == reader_config.end()) return;
    if (!found->is_object()) fail(fmt::format("reader config: {} is not an object", key));
    std::string section_type = json.string(*found, "type", key);
    if (section_type == "none") return;
    if (section_type != "range") fail(fmt::format("{} section has type '{}', expected 'range' or 'none'", key, section_type));
    json.only_keys(*found, {"type", "begin", "end", "num_documents", "num_ranges"}, key);
    uint64_t range_documents = json.integer(*found, "num_documents", key);
    uint64_t num_ranges = json.integer(*found, "num_ranges", key);
    if (range_documents != num_documents)
      fail(fmt::format("{} section has {} documents, the tokens have {}", key, range_documents, num_documents));
    if (num_ranges >= uint64_t(std::numeric_limits<int32_t>::max()))
      fail(fmt::format("{} section: implausible range count {}", key, num_ranges));
    out.present = true;
    out.num_ranges = int64_t(num_ranges);
    out.ranges_offset = check_section(*found, key, kRangeHeader, kRangeFooter,
                                      (unsigned __int128)num_ranges * 8 + (unsigned __int128)(num_documents + 1) * 4,
                                      fmt::format("{} ranges and {} documents", num_ranges, num_documents));
    out.counts_offset = out.ranges_offset + size_t(num_ranges) * 8;
    int32_t previous_count = load_unaligned<int32_t>(file_.data() + out.counts_offset);
    if (previous_count != 0) fail(fmt::format("{}: range count cumsum starts at {}, expected 0", key, previous_count));
    for (int64_t document = 0; document < num_documents_; ++document) {
      int32_t count = load_unaligned<int32_t>(file_.data() + out.counts_offset + size_t(document + 1) * 4);
      if (count < previous_count)
        fail(fmt::format("{}: range count cumsum decreases at document {} ({} after {})", key, document, count,
                         previous_count));
      if (uint64_t(count) > num_ranges)
        fail(fmt::format("{}: range count cumsum reaches {}, more than num_ranges = {}", key, count, num_ranges));
      int64_t size = document_size(document);
      for (int32_t range = previous_count; range < count; ++range) {
        int32_t begin = load_unaligned<int32_t>(file_.data() + out.ranges_offset + size_t(range) * 8);
        int32_t end = load_unaligned<int32_t>(file_.data() + out.ranges_offset + size_t(range) * 8 + 4);
        if (begin < 0 || end < begin || end > size)
          fail(fmt::format("{}: span [{}, {}) of document {} is out of range (document has {} tokens)", key, begin,
                           end, document, size));
      }
      previous_count = count;
    }
    if (uint64_t(previous_count) != num_ranges)
      fail(fmt::format("{}: range count cumsum ends at {}, expected num_ranges = {}", key, previous_count, num_ranges));
  };
  read_range_section("loss_masking_spans", loss_masking_spans_);
  read_range_section("chosen_spans", chosen_spans_);
  read_range_section("rejected_spans", rejected_spans_);
  if (chosen_spans_.present != rejected_spans_.present)
    fail("chosen_spans and rejected_spans must be both present or both absent");

  // Sections this trainer does not use are still checked, so the language-model section adds up.
  if (auto found = reader_config.find("image_patches"); found != reader_config.end()) {
    std::string section_type = found->is_object() ? json.string(*found, "type", "image_patches") : "?";
    if (section_type != "none")
      throw NotSupportedError(kComponent, fmt::format("{}: image patches (multimodal datasets) are not supported",
                                                      label));
  }
  // Token data (policy-gradient rollouts): one float per token; Fast-LLM writes float32 with shape [].
  auto read_token_data_section = [&](std::string_view key, TokenDataSection& out) {
    auto found = reader_config.find(key);
    if (found == reader_config.end()) return;
    if (!found->is_object()) fail(fmt::format("reader config: {} is not an object", key));
    std::string section_type = json.string(*found, "type", key);
    if (section_type == "none") return;
    if (section_type != "token_data")
      fail(fmt::format("{} section has type '{}', expected 'token_data' or 'none'", key, section_type));
    json.only_keys(*found, {"type", "begin", "end", "num_documents", "num_tokens", "shape", "data_type"}, key);
    std::string item_type = json.string(*found, "data_type", key);
    auto item_size = token_data_item_size(item_type);
    if (!item_size) fail(fmt::format("{}: unsupported data type '{}'", key, item_type));
    unsigned __int128 per_token = *item_size;
    auto shape = found->find("shape");
    if (shape == found->end() || !shape->is_array()) fail(fmt::format("{}: 'shape' is not a list", key));
    for (const auto& dimension : *shape) {
      if (!dimension.is_number_unsigned() && !(dimension.is_number_integer() && dimension.get<int64_t>() >= 0))
        fail(fmt::format("{}: 'shape' holds a non-integer", key));
      per_token *= dimension.get<uint64_t>();
      if (per_token > file_size) fail(fmt::format("{}: implausible shape {}", key, shape->dump()));
    }
    uint64_t data_documents = json.integer(*found, "num_documents", key);
    uint64_t data_tokens = json.integer(*found, "num_tokens", key);
    if (data_documents != num_documents || data_tokens != num_tokens)
      fail(fmt::format("{} section has {} tokens in {} documents, the tokens section has {} in {}", key, data_tokens,
                       data_documents, num_tokens, num_documents));
    out.values_offset = check_section(*found, key, kTokenDataHeader, kTokenDataFooter,
                                      per_token * data_tokens + (unsigned __int128)(num_documents + 1) * 8,
                                      fmt::format("{} tokens of shape {} in {}", data_tokens, shape->dump(),
                                                  item_type));
    if (!shape->empty())
      throw NotSupportedError(kComponent, fmt::format("{}: {} of shape {} per token: only one value per token (shape "
                                                      "[]) is supported",
                                                      label, key, shape->dump()));
    if (item_type != "float32" && item_type != "float64")
      throw NotSupportedError(kComponent, fmt::format("{}: {} in {}: only float32 and float64 are supported", label,
                                                      key, item_type));
    out.present = true;
    out.item_size = *item_size;
    // Its document boundaries must be the tokens' (the values are addressed through the tokens' cumsum).
    const size_t cumsum = out.values_offset + size_t(data_tokens) * out.item_size;
    for (int64_t index = 0; index <= num_documents_; ++index)
      if (load_unaligned<int64_t>(file_.data() + cumsum + size_t(index) * 8) != size_cumsum(index))
        fail(fmt::format("{}: document size cumsum differs from the tokens' at document {}", key, index));
  };
  read_token_data_section("advantages", advantages_);
  read_token_data_section("old_log_probabilities", old_log_probabilities_);
  if (advantages_.present != old_log_probabilities_.present)
    fail("advantages and old_log_probabilities must be both present or both absent");

  if (cursor + kLmFooter.size() != lm_end)
    fail(fmt::format("language_model section ends at {}, but its sections end at {} (+{} footer bytes)", lm_end,
                     cursor, kLmFooter.size()));
  if (!file_.matches(cursor, kLmFooter))
    fail(fmt::format("missing '{}' at byte {} (corrupt file)", kLmFooter, cursor));
}

int64_t MemmapDataset::size_cumsum(int64_t index) const {
  return load_unaligned<int64_t>(file_.data() + cumsum_offset_ + size_t(index) * 8);
}

int64_t MemmapDataset::document_size(int64_t index) const {
  FLM_ASSERT(index >= 0 && index < num_documents_, "document {} of {}", index, num_documents_);
  return size_cumsum(index + 1) - size_cumsum(index);
}

std::vector<int64_t> MemmapDataset::document_sizes() const {
  std::vector<int64_t> sizes(static_cast<size_t>(num_documents_));
  int64_t previous = size_cumsum(0);
  for (int64_t index = 0; index < num_documents_; ++index) {
    int64_t next = size_cumsum(index + 1);
    sizes[size_t(index)] = next - previous;
    previous = next;
  }
  return sizes;
}

std::vector<Range> MemmapDataset::read_ranges(const RangeSection& section, int64_t index, int64_t begin,
                                              int64_t end) const {
  if (!section.present) return {};
  int32_t first = load_unaligned<int32_t>(file_.data() + section.counts_offset + size_t(index) * 4);
  int32_t last = load_unaligned<int32_t>(file_.data() + section.counts_offset + size_t(index + 1) * 4);
  std::vector<Range> ranges;
  ranges.reserve(size_t(last - first));
  for (int32_t range = first; range < last; ++range)
    ranges.push_back({load_unaligned<int32_t>(file_.data() + section.ranges_offset + size_t(range) * 8),
                      load_unaligned<int32_t>(file_.data() + section.ranges_offset + size_t(range) * 8 + 4)});
  return crop_ranges(ranges, begin, end);
}

std::vector<float> MemmapDataset::read_token_data(const TokenDataSection& section, int64_t index, int64_t begin,
                                                 int64_t end) const {
  if (!section.present) return {};
  std::vector<float> values(size_t(end - begin));
  const std::byte* first =
      file_.data() + section.values_offset + size_t(size_cumsum(index) + begin) * section.item_size;
  for (size_t position = 0; position < values.size(); ++position)
    values[position] = section.item_size == 8 ? float(load_unaligned<double>(first + position * 8))
                                              : load_unaligned<float>(first + position * 4);
  return values;
}

Document MemmapDataset::get_document(int64_t index, int64_t begin, int64_t end) const {
  int64_t size = document_size(index);
  if (end < 0) end = size;
  FLM_ASSERT(0 <= begin && begin <= end && end <= size, "window [{}, {}) of a {}-token document", begin, end, size);
  Document document;
  size_t item = token_data_type_size(data_type_);
  read_tokens(file_.data() + tokens_offset_ + size_t(size_cumsum(index) + begin) * item, data_type_, end - begin,
              document.tokens);
  document.loss_masking_spans = read_ranges(loss_masking_spans_, index, begin, end);
  document.chosen_spans = read_ranges(chosen_spans_, index, begin, end);
  document.rejected_spans = read_ranges(rejected_spans_, index, begin, end);
  document.advantages = read_token_data(advantages_, index, begin, end);
  document.old_log_probabilities = read_token_data(old_log_probabilities_, index, begin, end);
  return document;
}

// ---------------------------------------------------------------------------------------------------------------
// MemmapWriter

namespace {
template <class T>
void append_scalar(std::string& buffer, T value) {
  buffer.append(reinterpret_cast<const char*>(&value), sizeof(T));
}
void check_spans(const std::vector<Range>& spans, int64_t size, std::string_view what, const std::filesystem::path& path) {
  for (const Range& span : spans)
    FLM_CHECK(span.begin >= 0 && span.begin <= span.end && span.end <= size, kComponent,
              "{}: {} [{}, {}) is outside its {}-token document", path.string(), what, span.begin, span.end, size);
}
}  // namespace

MemmapWriter::MemmapWriter(const std::filesystem::path& path, Options options)
    : options_(options), file_(path, {.component = kComponent, .sync = true}) {
  file_.write(kMemmapFileHeader);
  const uint64_t placeholder = 0;  // config_offset, patched by finish()
  file_.write(&placeholder, sizeof(placeholder));
  file_.write(kLmHeader);
  tokens_begin_ = file_.size();
  file_.write(kTokenHeader);
}

void MemmapWriter::add_document(const Document& document) {
  FLM_CHECK(!finished_, kComponent, "{}: add_document after finish", file_.path().string());
  std::string buffer;
  buffer.reserve(document.tokens.size() * token_data_type_size(options_.data_type));
  for (int64_t token : document.tokens) {
    FLM_CHECK(token_fits(token, options_.data_type), kComponent, "{}: token {} of document {} does not fit {}",
              file_.path().string(), token, num_documents(), token_data_type_name(options_.data_type));
    switch (options_.data_type) {
      case TokenDataType::uint8: append_scalar(buffer, uint8_t(token)); break;
      case TokenDataType::int8: append_scalar(buffer, int8_t(token)); break;
      case TokenDataType::uint16: append_scalar(buffer, uint16_t(token)); break;
      case TokenDataType::int16: append_scalar(buffer, int16_t(token)); break;
      case TokenDataType::uint32: append_scalar(buffer, uint32_t(token)); break;
      case TokenDataType::int32: append_scalar(buffer, int32_t(token)); break;
      case TokenDataType::int64: append_scalar(buffer, int64_t(token)); break;
      case TokenDataType::uint64: append_scalar(buffer, uint64_t(token)); break;
    }
  }
  const int64_t size = document.size();
  auto append_ranges = [&](RangeBuffer& target, const std::vector<Range>& spans, std::string_view what) {
    check_spans(spans, size, what, file_.path());
    for (const Range& span : spans) {
      target.pairs.push_back(span.begin);
      target.pairs.push_back(span.end);
    }
    FLM_CHECK(target.pairs.size() / 2 < size_t(std::numeric_limits<int32_t>::max()), kComponent,
              "{}: too many {}", file_.path().string(), what);
    target.count_cumsum.push_back(int32_t(target.pairs.size() / 2));
  };
  if (options_.loss_masking_spans) append_ranges(loss_masking_spans_, document.loss_masking_spans, "loss-masking span");
  if (options_.preference_spans) {
    append_ranges(chosen_spans_, document.chosen_spans, "chosen span");
    append_ranges(rejected_spans_, document.rejected_spans, "rejected span");
  }
  if (options_.token_data) {
    FLM_CHECK(int64_t(document.advantages.size()) == size && int64_t(document.old_log_probabilities.size()) == size,
              kComponent, "{}: document {} has {} tokens but {} advantages and {} old log-probabilities",
              file_.path().string(), num_documents(), size, document.advantages.size(),
              document.old_log_probabilities.size());
    advantages_.insert(advantages_.end(), document.advantages.begin(), document.advantages.end());
    old_log_probabilities_.insert(old_log_probabilities_.end(), document.old_log_probabilities.begin(),
                                  document.old_log_probabilities.end());
  } else {
    FLM_CHECK(!document.has_token_data(), kComponent,
              "{}: document {} has token data (advantages) but the writer was not asked to write it",
              file_.path().string(), num_documents());
  }
  file_.write(buffer);
  size_cumsum_.push_back(size_cumsum_.back() + size);
}

nlohmann::ordered_json MemmapWriter::write_range_section(const RangeBuffer& buffer) {
  uint64_t begin = file_.size();
  file_.write(kRangeHeader);
  file_.write(buffer.pairs.data(), buffer.pairs.size() * sizeof(int32_t));
  file_.write(buffer.count_cumsum.data(), buffer.count_cumsum.size() * sizeof(int32_t));
  file_.write(kRangeFooter);
  return {{"type", "range"},
          {"begin", begin},
          {"end", file_.size()},
          {"num_documents", num_documents()},
          {"num_ranges", buffer.pairs.size() / 2}};
}

nlohmann::ordered_json MemmapWriter::write_token_data_section(const std::vector<float>& values) {
  uint64_t begin = file_.size();
  file_.write(kTokenDataHeader);
  file_.write(values.data(), values.size() * sizeof(float));
  file_.write(size_cumsum_.data(), size_cumsum_.size() * sizeof(int64_t));
  file_.write(kTokenDataFooter);
  return {{"type", "token_data"},
          {"begin", begin},
          {"end", file_.size()},
          {"num_documents", num_documents()},
          {"num_tokens", num_tokens()},
          {"shape", nlohmann::ordered_json::array()},
          {"data_type", "float32"}};
}

void MemmapWriter::finish() {
  FLM_CHECK(!finished_, kComponent, "{}: finish called twice", file_.path().string());
  file_.write(size_cumsum_.data(), size_cumsum_.size() * sizeof(int64_t));
  file_.write(kTokenFooter);
  // Keys in Fast-LLM's order, which is also the order of the sections in the file.
  nlohmann::ordered_json reader_config = {{"type", "language_model"}, {"begin", kDataStart}, {"end", 0}};
  reader_config["tokens"] = {{"type", "token"},
                             {"begin", tokens_begin_},
                             {"end", file_.size()},
                             {"num_documents", num_documents()},
                             {"num_tokens", num_tokens()},
                             {"data_type", token_data_type_name(options_.data_type)}};
  const nlohmann::ordered_json none = {{"type", "none"}};
  reader_config["loss_masking_spans"] = options_.loss_masking_spans ? write_range_section(loss_masking_spans_) : none;
  reader_config["chosen_spans"] = options_.preference_spans ? write_range_section(chosen_spans_) : none;
  reader_config["rejected_spans"] = options_.preference_spans ? write_range_section(rejected_spans_) : none;
  reader_config["image_patches"] = none;
  reader_config["advantages"] = options_.token_data ? write_token_data_section(advantages_) : none;
  reader_config["old_log_probabilities"] =
      options_.token_data ? write_token_data_section(old_log_probabilities_) : none;
  file_.write(kLmFooter);
  reader_config["end"] = file_.size();
  const std::string json_text = reader_config.dump();

  const uint64_t config_offset = file_.size();
  FLM_CHECK(json_text.size() <= std::numeric_limits<uint32_t>::max(), kComponent, "{}: reader config too large",
            file_.path().string());
  const uint32_t config_size = uint32_t(json_text.size());
  unsigned char size_bytes[4];
  for (int index = 0; index < 4; ++index) size_bytes[index] = uint8_t(config_size >> (8 * (3 - index)));
  file_.write(size_bytes, 4);
  file_.write(json_text);
  unsigned char offset_bytes[8];
  for (int index = 0; index < 8; ++index) offset_bytes[index] = uint8_t(config_offset >> (8 * (7 - index)));
  file_.write_at(kConfigOffsetPosition, offset_bytes, 8);
  file_.commit();
  finished_ = true;
}

}  // namespace fast_llm::data
