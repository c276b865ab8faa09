#include "fast_llm/data/dataset.h"

#include <algorithm>

#include "fast_llm/core/error.h"

namespace fast_llm::data {

std::vector<Range> crop_ranges(const std::vector<Range>& ranges, int64_t begin, int64_t end) {
  std::vector<Range> cropped;
  for (const Range& range : ranges) {
    int64_t cropped_begin = std::max<int64_t>(range.begin - begin, 0);
    int64_t cropped_end = std::min<int64_t>(range.end - begin, end - begin);
    if (cropped_end > cropped_begin) cropped.push_back({int32_t(cropped_begin), int32_t(cropped_end)});
  }
  return cropped;
}

std::vector<int64_t> IndexedDataset::document_sizes() const {
  std::vector<int64_t> sizes(static_cast<size_t>(num_documents()));
  for (int64_t index = 0; index < num_documents(); ++index) sizes[size_t(index)] = document_size(index);
  return sizes;
}

// ---------------------------------------------------------------------------------------------------------------
// ConcatenatedDataset

ConcatenatedDataset::ConcatenatedDataset(std::string name, std::vector<std::shared_ptr<IndexedDataset>> datasets)
    : name_(std::move(name)), datasets_(std::move(datasets)) {
  FLM_CHECK(!datasets_.empty(), "data", "{}: a concatenated dataset needs at least one dataset", name_);
  document_offsets_.push_back(0);
  for (const auto& dataset : datasets_) document_offsets_.push_back(document_offsets_.back() + dataset->num_documents());
}

int64_t ConcatenatedDataset::num_tokens() const {
  int64_t total = 0;
  for (const auto& dataset : datasets_) total += dataset->num_tokens();
  return total;
}

std::pair<size_t, int64_t> ConcatenatedDataset::locate(int64_t index) const {
  FLM_ASSERT(index >= 0 && index < num_documents(), "document {} of {}", index, num_documents());
  // The last offset not above `index` is the dataset holding it (empty datasets are skipped by upper_bound).
  auto found = std::upper_bound(document_offsets_.begin() + 1, document_offsets_.end(), index);
  size_t dataset = size_t(found - document_offsets_.begin()) - 1;
  return {dataset, index - document_offsets_[dataset]};
}

int64_t ConcatenatedDataset::document_size(int64_t index) const {
  auto [dataset, local] = locate(index);
  return datasets_[dataset]->document_size(local);
}

std::vector<int64_t> ConcatenatedDataset::document_sizes() const {
  std::vector<int64_t> sizes;
  sizes.reserve(size_t(num_documents()));
  for (const auto& dataset : datasets_) {
    std::vector<int64_t> part = dataset->document_sizes();
    sizes.insert(sizes.end(), part.begin(), part.end());
  }
  return sizes;
}

Document ConcatenatedDataset::get_document(int64_t index, int64_t begin, int64_t end) const {
  auto [dataset, local] = locate(index);
  return datasets_[dataset]->get_document(local, begin, end);
}

// ---------------------------------------------------------------------------------------------------------------
// DatasetSlice

DatasetSlice::DatasetSlice(std::string name, std::shared_ptr<IndexedDataset> dataset, int64_t begin, int64_t end)
    : name_(std::move(name)), dataset_(std::move(dataset)), begin_(begin), end_(end) {
  FLM_CHECK(begin_ >= 0 && end_ > begin_ && end_ <= dataset_->num_documents(), "data",
            "{}: slice [{}, {}) of a dataset with {} documents is empty or out of range", name_, begin_, end_,
            dataset_->num_documents());
}

int64_t DatasetSlice::num_tokens() const {
  int64_t total = 0;
  for (int64_t index = begin_; index < end_; ++index) total += dataset_->document_size(index);
  return total;
}

int64_t DatasetSlice::document_size(int64_t index) const {
  FLM_ASSERT(index >= 0 && index < num_documents(), "document {} of {}", index, num_documents());
  return dataset_->document_size(begin_ + index);
}

std::vector<int64_t> DatasetSlice::document_sizes() const {
  std::vector<int64_t> sizes = dataset_->document_sizes();
  return {sizes.begin() + begin_, sizes.begin() + end_};
}

Document DatasetSlice::get_document(int64_t index, int64_t begin, int64_t end) const {
  FLM_ASSERT(index >= 0 && index < num_documents(), "document {} of {}", index, num_documents());
  return dataset_->get_document(begin_ + index, begin, end);
}

}  // namespace fast_llm::data
