#include "fast_llm/data/legacy_memmap.h"

#include "fast_llm/core/error.h"

namespace fast_llm::data {

namespace {

constexpr std::string_view kComponent = "legacy_memmap";

// Sequential reads from the index file, each bounds-checked.
class IndexCursor {
 public:
  explicit IndexCursor(const MappedFile& file) : file_(file) {}
  template <class T>
  T read(std::string_view what) {
    require(sizeof(T), what);
    T value = load_unaligned<T>(file_.data() + offset_);
    offset_ += sizeof(T);
    return value;
  }
  void require(uint64_t bytes, std::string_view what) const {
    if (bytes > file_.size() - offset_)
      file_.fail(fmt::format("file ends at byte {} while reading {} ({} more bytes needed)", file_.size(), what, bytes));
  }
  size_t offset() const { return offset_; }
  void skip(size_t bytes) { offset_ += bytes; }

 private:
  const MappedFile& file_;
  size_t offset_ = 0;
};

}  // namespace

std::filesystem::path legacy_memmap_path(const std::filesystem::path& prefix, std::string_view suffix) {
  std::filesystem::path path = prefix;
  path.replace_extension(suffix);
  return path;
}

LegacyMemmapDataset::LegacyMemmapDataset(std::string name, const std::filesystem::path& prefix)
    : name_(std::move(name)), bin_(legacy_memmap_path(prefix, ".bin"), kComponent) {
  const MappedFile index(legacy_memmap_path(prefix, ".idx"), kComponent);
  static constexpr std::string_view kIndexHeader{"MMIDIDX\0\0", 9};
  if (!index.matches(0, kIndexHeader)) index.fail("not a Megatron index file (it does not start with 'MMIDIDX')");
  IndexCursor cursor(index);
  cursor.skip(kIndexHeader.size());
  uint64_t version = cursor.read<uint64_t>("the version");
  if (version < 1 || version > 3) index.fail(fmt::format("unsupported version {} (1 to 3 are known)", version));
  if (version >= 2) has_spans_ = cursor.read<uint8_t>("the span flag") != 0;
  if (version >= 3) has_preference_spans_ = cursor.read<uint8_t>("the preference span flag") != 0;
  uint8_t dtype_code = cursor.read<uint8_t>("the data type code");
  switch (dtype_code) {
    case 1: data_type_ = TokenDataType::uint8; break;
    case 2: data_type_ = TokenDataType::int8; break;
    case 3: data_type_ = TokenDataType::int16; break;
    case 4: data_type_ = TokenDataType::int32; break;
    case 5: data_type_ = TokenDataType::int64; break;
    case 8: data_type_ = TokenDataType::uint16; break;
    case 6:
    case 7: index.fail(fmt::format("data type code {} is a floating-point type, not token ids", dtype_code));
    default: index.fail(fmt::format("unknown data type code {}", dtype_code));
  }
  const uint64_t num_documents = cursor.read<uint64_t>("the document count");
  cursor.read<uint64_t>("the document index count");  // Megatron's document index is not used
  // Each document takes at least 12 bytes (size and pointer), which bounds a corrupt count before allocating.
  if (num_documents > (index.size() - cursor.offset()) / 12)
    index.fail(fmt::format("document count {} does not fit in the {}-byte file", num_documents, index.size()));

  const size_t item = token_data_type_size(data_type_);
  if (bin_.size() % item != 0)
    index.fail(fmt::format("{} has {} bytes, not a whole number of {}-byte tokens", bin_.path().string(), bin_.size(),
                           item));
  num_tokens_ = int64_t(bin_.size() / item);

  sizes_.resize(num_documents);
  pointers_.resize(num_documents);
  for (auto& size : sizes_) size = cursor.read<int32_t>("the document sizes");
  for (auto& pointer : pointers_) pointer = cursor.read<int64_t>("the document pointers");
  for (uint64_t document = 0; document < num_documents; ++document) {
    int64_t size = sizes_[document], pointer = pointers_[document];
    if (size < 0) index.fail(fmt::format("document {} has negative size {}", document, size));
    if (pointer < 0 || uint64_t(pointer) > bin_.size() || uint64_t(size) * item > bin_.size() - uint64_t(pointer))
      index.fail(fmt::format("document {} ({} tokens at byte {}) runs past the end of {} ({} bytes)", document, size,
                             pointer, bin_.path().string(), bin_.size()));
  }

  // Converts an inclusive (begin, last) pair to [begin, last + 1), checking it lies in its document.
  auto read_span = [&](uint64_t document, std::string_view what) -> Range {
    int32_t begin = cursor.read<int32_t>(what);
    int32_t last = cursor.read<int32_t>(what);
    if (begin < 0 || last < begin - 1 || last >= sizes_[document])
      index.fail(fmt::format("{} [{}, {}] (inclusive) of document {} is out of range (document has {} tokens)", what,
                             begin, last, document, sizes_[document]));
    return {begin, last + 1};
  };
  if (has_spans_) {
    std::vector<int32_t> counts(num_documents);
    for (auto& count : counts) count = cursor.read<int32_t>("the span counts");
    span_offsets_.assign(1, 0);
    for (uint64_t document = 0; document < num_documents; ++document) {
      if (counts[document] < 0)
        index.fail(fmt::format("document {} has a negative span count {}", document, counts[document]));
      span_offsets_.push_back(span_offsets_.back() + counts[document]);
    }
    cursor.require(uint64_t(span_offsets_.back()) * 8, "the loss-masking spans");
    spans_.reserve(size_t(span_offsets_.back()));
    for (uint64_t document = 0; document < num_documents; ++document)
      for (int32_t span = 0; span < counts[document]; ++span) spans_.push_back(read_span(document, "loss-masking span"));
  }
  if (has_preference_spans_) {
    // One chosen and one rejected span per document, after the loss-masking spans (as Fast-LLM's writer lays them).
    cursor.require(num_documents * 16, "the preference spans");
    for (uint64_t document = 0; document < num_documents; ++document)
      chosen_spans_.push_back(read_span(document, "chosen span"));
    for (uint64_t document = 0; document < num_documents; ++document)
      rejected_spans_.push_back(read_span(document, "rejected span"));
  }
}

int64_t LegacyMemmapDataset::document_size(int64_t index) const {
  FLM_ASSERT(index >= 0 && index < num_documents(), "document {} of {}", index, num_documents());
  return sizes_[size_t(index)];
}

std::vector<int64_t> LegacyMemmapDataset::document_sizes() const { return {sizes_.begin(), sizes_.end()}; }

Document LegacyMemmapDataset::get_document(int64_t index, int64_t begin, int64_t end) const {
  int64_t size = document_size(index);
  if (end < 0) end = size;
  FLM_ASSERT(0 <= begin && begin <= end && end <= size, "window [{}, {}) of a {}-token document", begin, end, size);
  Document document;
  size_t item = token_data_type_size(data_type_);
  read_tokens(bin_.data() + size_t(pointers_[size_t(index)]) + size_t(begin) * item, data_type_, end - begin,
              document.tokens);
  if (has_spans_) {
    std::vector<Range> spans(spans_.begin() + span_offsets_[size_t(index)],
                             spans_.begin() + span_offsets_[size_t(index) + 1]);
    document.loss_masking_spans = crop_ranges(spans, begin, end);
  }
  if (has_preference_spans_) {
    document.chosen_spans = crop_ranges({chosen_spans_[size_t(index)]}, begin, end);
    document.rejected_spans = crop_ranges({rejected_spans_[size_t(index)]}, begin, end);
  }
  return document;
}


}  // namespace fast_llm::data
