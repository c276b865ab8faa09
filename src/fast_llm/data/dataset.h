// Runtime datasets.
//
// An IndexedDataset holds documents (token sequences with optional spans) addressed by index: memmap files, legacy
// Megatron pairs, and the concatenations and slices of those. A SampledDataset is what training reads: a fixed number
// of samples, each a list of documents (or document pieces) that together fill `sample_size` tokens; sampling
// (sampling.h), blending (blended.h) and the random dataset produce them.
//
// Tokens are handed out as int64 whatever the file stores. Spans are token ranges [begin, end), relative to the start
// of the document (or piece) they belong to.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fast_llm/data/config.h"

namespace fast_llm::data {

// A token range [begin, end), end exclusive.
struct Range {
  int32_t begin = 0;
  int32_t end = 0;
  bool operator==(const Range&) const = default;
};

struct Document {
  std::vector<int64_t> tokens;
  std::vector<Range> loss_masking_spans;  // tokens whose prediction is not trained on
  std::vector<Range> chosen_spans;        // preference data (DPO): pairs with rejected_spans (data/batch.h)
  std::vector<Range> rejected_spans;
  // Token data of policy-gradient rollouts (GRPO / GSPO), one value per token, or both empty: the advantage of each
  // token and its log-probability under the policy that generated it (Fast-LLM's `advantages` and
  // `old_log_probabilities` sections).
  std::vector<float> advantages;
  std::vector<float> old_log_probabilities;
  int64_t size() const { return int64_t(tokens.size()); }
  bool has_token_data() const { return !advantages.empty() || !old_log_probabilities.empty(); }
};

// Keeps the parts of `ranges` inside [begin, end), shifted to start at `begin` (empty results dropped).
std::vector<Range> crop_ranges(const std::vector<Range>& ranges, int64_t begin, int64_t end);

class IndexedDataset {
 public:
  virtual ~IndexedDataset() = default;
  virtual const std::string& name() const = 0;
  virtual int64_t num_documents() const = 0;
  virtual int64_t num_tokens() const = 0;
  virtual int64_t document_size(int64_t index) const = 0;
  // Sizes of all documents, in order.
  virtual std::vector<int64_t> document_sizes() const;
  // Tokens [begin, end) of document `index` (end = -1: to the end), spans cropped to that window.
  virtual Document get_document(int64_t index, int64_t begin = 0, int64_t end = -1) const = 0;
};

class SampledDataset {
 public:
  virtual ~SampledDataset() = default;
  virtual const std::string& name() const = 0;
  virtual int64_t num_samples() const = 0;
  // The documents of sample `index`, in order; their sizes add up to at most the sample size (less when padded).
  virtual std::vector<Document> get_sample(int64_t index) const = 0;
};

// Indexed datasets joined end to end.
class ConcatenatedDataset final : public IndexedDataset {
 public:
  ConcatenatedDataset(std::string name, std::vector<std::shared_ptr<IndexedDataset>> datasets);
  const std::string& name() const override { return name_; }
  int64_t num_documents() const override { return document_offsets_.back(); }
  int64_t num_tokens() const override;
  int64_t document_size(int64_t index) const override;
  std::vector<int64_t> document_sizes() const override;
  Document get_document(int64_t index, int64_t begin = 0, int64_t end = -1) const override;

 private:
  // (dataset, index within it) of a global document index.
  std::pair<size_t, int64_t> locate(int64_t index) const;
  std::string name_;
  std::vector<std::shared_ptr<IndexedDataset>> datasets_;
  std::vector<int64_t> document_offsets_;  // (datasets + 1) cumulative document counts
};

// Documents [begin, end) of another indexed dataset.
class DatasetSlice final : public IndexedDataset {
 public:
  DatasetSlice(std::string name, std::shared_ptr<IndexedDataset> dataset, int64_t begin, int64_t end);
  const std::string& name() const override { return name_; }
  int64_t num_documents() const override { return end_ - begin_; }
  int64_t num_tokens() const override;
  int64_t document_size(int64_t index) const override;
  std::vector<int64_t> document_sizes() const override;
  Document get_document(int64_t index, int64_t begin = 0, int64_t end = -1) const override;

 private:
  std::string name_;
  std::shared_ptr<IndexedDataset> dataset_;
  int64_t begin_, end_;
};

}  // namespace fast_llm::data
