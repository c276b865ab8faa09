// Reads every document of a dataset a fuzz target opened, checking what a reader that accepted a file promises: the
// sizes agree with each other and with the documents, and every span lies inside its document. A broken promise
// aborts (the fuzzer reports it); a fast_llm::Error while reading is a clean refusal of a corrupt part of the file.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "fast_llm/data/dataset.h"

namespace fast_llm::fuzz {

// Inputs are small, but a corrupt count can still claim millions of empty documents.
inline constexpr int64_t kMaxDocumentsRead = 1024;

[[noreturn]] inline void broken_promise(const data::IndexedDataset& dataset, std::string_view what) {
  fmt::print(stderr, "fuzz: dataset {}: {}\n", dataset.name(), what);
  std::abort();
}

inline void check_spans(const data::IndexedDataset& dataset, const std::vector<data::Range>& spans, int64_t size) {
  for (const data::Range& span : spans)
    if (span.begin < 0 || span.begin > span.end || span.end > size)
      broken_promise(dataset, fmt::format("span [{}, {}) outside a {}-token document", span.begin, span.end, size));
}

inline void check_document(const data::IndexedDataset& dataset, const data::Document& document, int64_t size) {
  if (document.size() != size)
    broken_promise(dataset, fmt::format("a document read with {} tokens, {} expected", document.size(), size));
  check_spans(dataset, document.loss_masking_spans, size);
  check_spans(dataset, document.chosen_spans, size);
  check_spans(dataset, document.rejected_spans, size);
  // Token data: one value per token, or none.
  for (const std::vector<float>* values : {&document.advantages, &document.old_log_probabilities})
    if (!values->empty() && int64_t(values->size()) != size)
      broken_promise(dataset, fmt::format("{} token data values for a document of {} tokens", values->size(), size));
}

// What the dataset's token count is.
enum class TokenCount {
  documents,  // the sum of the document sizes
  file,       // the file's size in tokens (legacy `.bin`, as Fast-LLM counts it; its documents may overlap)
};

inline void read_every_document(const data::IndexedDataset& dataset, TokenCount token_count = TokenCount::documents) {
  const std::vector<int64_t> sizes = dataset.document_sizes();
  if (int64_t(sizes.size()) != dataset.num_documents())
    broken_promise(dataset, fmt::format("{} sizes for {} documents", sizes.size(), dataset.num_documents()));
  if (std::any_of(sizes.begin(), sizes.end(), [](int64_t size) { return size < 0; }))
    broken_promise(dataset, "a negative document size");
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  if (token_count == TokenCount::documents && total != dataset.num_tokens())
    broken_promise(dataset, fmt::format("documents of {} tokens in all, for {} tokens", total, dataset.num_tokens()));
  for (int64_t index = 0; index < std::min(dataset.num_documents(), kMaxDocumentsRead); ++index) {
    const int64_t size = sizes[size_t(index)];
    if (dataset.document_size(index) != size) broken_promise(dataset, fmt::format("document {}: two sizes", index));
    check_document(dataset, dataset.get_document(index), size);
    if (size >= 2) check_document(dataset, dataset.get_document(index, 1, size - 1), size - 2);
  }
}

}  // namespace fast_llm::fuzz
