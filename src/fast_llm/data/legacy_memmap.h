// The legacy Megatron-LM indexed dataset, `prefix.bin` + `prefix.idx`, as Fast-LLM reads it (deprecated there in favour
// of `.fast_llm_dataset`, memmap.h; read-only here). All integers little-endian.
//
//   prefix.idx:
//     "MMIDIDX\0\0"                                    (9 bytes)
//     uint64 version                                   1 to 3
//     uint8 has_spans                                  version >= 2
//     uint8 has_preference_spans                       version >= 3
//     uint8 dtype code                                 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16
//                                                      (6 float32 and 7 float64 are not token ids: refused)
//     uint64 num_documents, uint64 document-index count
//     int32 sizes[num_documents]                       tokens per document
//     int64 pointers[num_documents]                    byte offset of each document in the .bin
//     [int32 span counts[num_documents], then int32 (begin, last) pairs, document by document]       has_spans
//     [int32 (begin, last) chosen[num_documents], int32 (begin, last) rejected[num_documents]]  has_preference_spans
//     int64 document index                             Megatron's; unused
//   prefix.bin: the tokens, each document at its pointer.
//
// Span ends are INCLUSIVE in the file (`last`) and converted to exclusive ends on reading; spans are relative to the
// document start. Opening checks every count, size, pointer and span against the files, so a truncated or corrupt pair
// is an Error naming the file and the problem.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/data/dataset.h"
#include "fast_llm/data/mapped_file.h"
#include "fast_llm/data/token_data_type.h"

namespace fast_llm::data {

class LegacyMemmapDataset final : public IndexedDataset {
 public:
  LegacyMemmapDataset(std::string name, const std::filesystem::path& prefix);

  const std::string& name() const override { return name_; }
  int64_t num_documents() const override { return int64_t(sizes_.size()); }
  int64_t num_tokens() const override { return num_tokens_; }
  int64_t document_size(int64_t index) const override;
  std::vector<int64_t> document_sizes() const override;
  Document get_document(int64_t index, int64_t begin = 0, int64_t end = -1) const override;

  TokenDataType token_data_type() const { return data_type_; }
  bool has_loss_masking_spans() const { return has_spans_; }
  bool has_preference_spans() const { return has_preference_spans_; }

 private:
  std::string name_;
  MappedFile bin_;
  TokenDataType data_type_ = TokenDataType::uint16;
  int64_t num_tokens_ = 0;
  bool has_spans_ = false;
  bool has_preference_spans_ = false;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> pointers_;                 // byte offsets into the .bin
  std::vector<int64_t> span_offsets_;             // (documents + 1) cumulative span counts
  std::vector<Range> spans_;                      // exclusive ends
  std::vector<Range> chosen_spans_, rejected_spans_;  // one per document
};

// The `.bin` / `.idx` suffix replacement Fast-LLM applies to a legacy prefix (`with_suffix`: replaces an extension).
std::filesystem::path legacy_memmap_path(const std::filesystem::path& prefix, std::string_view suffix);

}  // namespace fast_llm::data
