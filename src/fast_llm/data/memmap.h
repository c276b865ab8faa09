// Fast-LLM's current dataset file format, `.fast_llm_dataset` (reader and writer); the legacy Megatron `.bin` / `.idx`
// pair is legacy_memmap.h.
//
// Layout (reference/fast-llm.md §5.1). Arrays are little-endian; the two header integers are big-endian, because
// Fast-LLM writes them with Python's `int.to_bytes`, whose default order is big:
//
//   0              "fast_llm_prepared_dataset"                     (25 bytes)
//   25             uint64 BE config_offset
//   33             "lm begin"
//                    "token begin" | tokens (num_tokens x data_type) | int64 size cumsum (num_documents + 1) | "token end"
//                    ["range begin" | int32 (begin, end) x num_ranges | int32 count cumsum (num_documents + 1) | "range end"]
//                      for loss_masking_spans, then chosen_spans and rejected_spans when present
//                    ["token data begin" | float32 x num_tokens | int64 size cumsum (num_documents + 1)
//                     | "token data end"]
//                      for advantages, then old_log_probabilities when present (one value per token: shape [])
//                  "lm end"
//   config_offset  uint32 BE config_size | config_size bytes of UTF-8 JSON (the reader config)
//
// The JSON gives every section's absolute [begin, end) byte range, headers and footers included:
//   {"type": "language_model", "begin": 33, "end": ..., "tokens": {"type": "token", "begin", "end", "num_documents",
//    "num_tokens", "data_type": "uint16"}, "loss_masking_spans": {"type": "none"} | {"type": "range", "begin", "end",
//    "num_documents", "num_ranges"}, "chosen_spans", "rejected_spans", "image_patches", "advantages",
//    "old_log_probabilities"}
// Span ends are exclusive and relative to the document start.
//
// Opening a file checks every offset, size, header, footer and cumulative sum against the file, so a truncated or
// corrupt file is an Error naming the file and the problem, never a crash or a silent misread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fast_llm/core/file_writer.h"
#include "fast_llm/data/dataset.h"
#include "fast_llm/data/mapped_file.h"
#include "fast_llm/data/token_data_type.h"

namespace fast_llm::data {

inline constexpr std::string_view kMemmapFileHeader = "fast_llm_prepared_dataset";

class MemmapDataset final : public IndexedDataset {
 public:
  MemmapDataset(std::string name, const std::filesystem::path& path);

  const std::string& name() const override { return name_; }
  int64_t num_documents() const override { return num_documents_; }
  int64_t num_tokens() const override { return num_tokens_; }
  int64_t document_size(int64_t index) const override;
  std::vector<int64_t> document_sizes() const override;
  Document get_document(int64_t index, int64_t begin = 0, int64_t end = -1) const override;

  TokenDataType token_data_type() const { return data_type_; }
  bool has_loss_masking_spans() const { return loss_masking_spans_.present; }
  bool has_preference_spans() const { return chosen_spans_.present; }
  bool has_token_data() const { return advantages_.present; }

 private:
  struct RangeSection {
    bool present = false;
    size_t ranges_offset = 0;  // byte offset of the (begin, end) pairs in the file
    size_t counts_offset = 0;  // byte offset of the int32 count cumsum
    int64_t num_ranges = 0;
  };
  // A `token_data` section of one value per token (float32 or float64 in the file, float32 in memory).
  struct TokenDataSection {
    bool present = false;
    size_t values_offset = 0;  // byte offset of the first value
    size_t item_size = 4;      // 4: float32, 8: float64
  };
  int64_t size_cumsum(int64_t index) const;
  std::vector<float> read_token_data(const TokenDataSection& section, int64_t index, int64_t begin, int64_t end) const;
  std::vector<Range> read_ranges(const RangeSection& section, int64_t index, int64_t begin, int64_t end) const;

  std::string name_;
  MappedFile file_;
  TokenDataType data_type_ = TokenDataType::uint16;
  int64_t num_documents_ = 0;
  int64_t num_tokens_ = 0;
  size_t tokens_offset_ = 0;   // byte offset of the first token
  size_t cumsum_offset_ = 0;   // byte offset of the int64 size cumsum
  RangeSection loss_masking_spans_, chosen_spans_, rejected_spans_;
  TokenDataSection advantages_, old_log_probabilities_;
};

// Writes a `.fast_llm_dataset` file, streaming the tokens and holding the per-document sizes and spans in memory until
// `finish`. The file is written under a temporary name, flushed to disk and renamed into place by `finish`, so an
// interrupted or failed writer (a full disk: an Error naming the file) leaves no file, never one that looks complete.
class MemmapWriter {
 public:
  struct Options {
    TokenDataType data_type = TokenDataType::uint16;
    bool loss_masking_spans = false;  // write the loss_masking_spans section (each document's spans)
    bool preference_spans = false;    // write chosen_spans and rejected_spans
    bool token_data = false;          // write advantages and old_log_probabilities (float32, one per token)
  };
  MemmapWriter(const std::filesystem::path& path, Options options);

  // Appends a document; every token must fit the data type and every span lie within the document.
  void add_document(const Document& document);
  // Writes the remaining sections and the reader config, and moves the file into place.
  void finish();

  int64_t num_documents() const { return int64_t(size_cumsum_.size()) - 1; }
  int64_t num_tokens() const { return size_cumsum_.back(); }

 private:
  struct RangeBuffer {
    std::vector<int32_t> pairs;                 // begin, end, begin, end, ...
    std::vector<int32_t> count_cumsum{0};
  };
  // Writes one `range` section at the current offset and returns its reader config.
  nlohmann::ordered_json write_range_section(const RangeBuffer& buffer);
  // Writes one `token_data` section (float32, shape []) at the current offset and returns its reader config.
  nlohmann::ordered_json write_token_data_section(const std::vector<float>& values);

  Options options_;
  FileWriter file_;
  uint64_t tokens_begin_ = 0;
  std::vector<int64_t> size_cumsum_{0};
  RangeBuffer loss_masking_spans_, chosen_spans_, rejected_spans_;
  std::vector<float> advantages_, old_log_probabilities_;  // (num_tokens), held until finish()
  bool finished_ = false;
};

}  // namespace fast_llm::data
