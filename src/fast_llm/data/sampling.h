// Sampling: turning an indexed dataset into a fixed number of samples of `sample_size` tokens, as Fast-LLM does
// (reference/fast-llm.md §5.3).
//
// Documents are visited in a sampling order: epoch after epoch, each epoch a permutation of the documents
// (`shuffle: epoch`, seed + 571 * epoch), one permutation over all epochs (`full`), file order for the first epoch
// (`skip_first_epoch`) or always (`disabled`). Along that order:
//  - truncate_documents: true: the documents form one token stream; sample i is the window
//    [i * micro_batch_size, i * micro_batch_size + sample_size), so consecutive samples share the
//    `predicted_tokens` boundary tokens (they are labels of one sample and inputs of the next). A document crossing
//    a boundary is cut there. Within a sample, document pieces longer than `maximum_document_length` are split into
//    pieces of at most that length, starting from where the piece enters the sample.
//  - truncate_documents: false: documents are never cut. Each sample takes the following documents while they fit in
//    `sample_size` tokens and is padded after; documents longer than min(maximum_document_length, sample_size) are
//    skipped (counted in one warning).
// Permutations are Fisher-Yates shuffles driven by Philox (core/random.h), so the order is a pure function of
// (seed, epoch) on any machine. Empty documents contribute nothing and are left out of samples.
//
// The index (the sampling order it uses, and where each sample starts) is cached under the cache directory in
// `<name>_ns_<num_samples>_sl_<micro_batch_size>_s_<seed>_index.{bin,yaml}`. The YAML describes the dataset (document
// and token counts, a hash of the document sizes) and the sampling parameters, and holds a checksum of the binary
// file; on reuse every entry is compared, and a mismatched, missing or corrupt cache is rebuilt with a log line.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fast_llm/data/config.h"
#include "fast_llm/data/dataset.h"

namespace fast_llm::data {

// Everything sampling needs: the `data:` settings plus what the trainer knows (model vocabulary, prediction heads,
// experiment directory).
struct SamplingParameters {
  int64_t micro_batch_size = 2048;
  // Extra tokens at the end of each sample, so the last input token has a label for every prediction head.
  int64_t predicted_tokens = 1;
  std::optional<int64_t> maximum_document_length;
  bool truncate_documents = true;
  ShufflingType shuffle = ShufflingType::epoch;
  // Where sampling indices are cached; none: built in memory every time.
  std::optional<std::filesystem::path> cache_directory;
  // Vocabulary of the `random` dataset.
  int64_t vocab_size = 0;

  int64_t sample_size() const { return micro_batch_size + predicted_tokens; }
  // Longest document (truncate false) or piece (truncate true) a sample holds.
  int64_t sampling_maximum_document_length() const {
    return maximum_document_length ? std::min(*maximum_document_length, sample_size()) : sample_size();
  }
};

SamplingParameters make_sampling_parameters(const GPTDataConfig& config,
                                            std::optional<std::filesystem::path> cache_directory, int64_t vocab_size,
                                            int64_t predicted_tokens = 1);

// A random permutation of [0, size), a pure function of (size, seed).
std::vector<int64_t> random_permutation(int64_t size, uint64_t seed);

class SampledIndexedDataset final : public SampledDataset {
 public:
  SampledIndexedDataset(std::shared_ptr<IndexedDataset> dataset, const SamplingParameters& parameters,
                        int64_t num_samples, uint64_t seed);

  const std::string& name() const override { return dataset_->name(); }
  int64_t num_samples() const override { return num_samples_; }
  std::vector<Document> get_sample(int64_t index) const override;

  // Whether the index came from the cache rather than being built.
  bool loaded_from_cache() const { return loaded_from_cache_; }
  // Documents per epoch longer than a sample allows (skipped when not truncating).
  int64_t skipped_documents_per_epoch() const { return skipped_documents_; }
  // Base of the cache file names (without `_index.bin` / `_index.yaml`), or empty without a cache directory.
  std::filesystem::path cache_base() const;

 private:
  void build_index(const std::vector<int64_t>& sizes);
  // Tries to build with `full` shuffling over `epochs` epochs; false if the walk needs more.
  bool build_index_with_epochs(const std::vector<int64_t>& sizes, int64_t epochs);
  bool load_cache(const std::string& descriptor_text);
  void save_cache(const std::string& descriptor_text) const;
  std::string descriptor(const std::vector<int64_t>& sizes) const;

  std::shared_ptr<IndexedDataset> dataset_;
  SamplingParameters parameters_;
  int64_t num_samples_;
  uint64_t seed_;
  int64_t skipped_documents_ = 0;
  bool loaded_from_cache_ = false;
  std::vector<int64_t> order_;             // document index at each sampling position (cropped to the used ones)
  std::vector<int64_t> sample_positions_;  // (num_samples + 1) sampling position where each sample starts; last: end
  std::vector<int64_t> sample_offsets_;    // (num_samples) token offset of that start within its document
};

// Samples drawn from several sampled datasets in proportion to their weights: sample i comes from the dataset with
// the largest deficit weight * (i + 1) - taken so far (first on ties), which keeps every prefix within one sample of
// the target proportions (Megatron-LM's and Fast-LLM's blending order).
class BlendedDataset final : public SampledDataset {
 public:
  BlendedDataset(std::string name, std::vector<std::shared_ptr<SampledDataset>> datasets, std::vector<double> weights,
                 int64_t num_samples);
  const std::string& name() const override { return name_; }
  int64_t num_samples() const override { return num_samples_; }
  std::vector<Document> get_sample(int64_t index) const override;
  // Which dataset sample `index` comes from, and its index there.
  std::pair<int64_t, int64_t> source(int64_t index) const {
    return {dataset_index_[size_t(index)], sample_index_[size_t(index)]};
  }

 private:
  std::string name_;
  std::vector<std::shared_ptr<SampledDataset>> datasets_;
  int64_t num_samples_;
  std::vector<int32_t> dataset_index_;
  std::vector<int64_t> sample_index_;
};

// Uniform random tokens in [0, vocab_size), a pure function of (seed, sample index): each sample of `sample_size`
// tokens is cut into documents of `document_length` tokens (the last one shorter), so a micro-batch of many tokens
// with `maximum_document_length` set packs several independent sequences, as a batch of sequences would.
class RandomSampledDataset final : public SampledDataset {
 public:
  RandomSampledDataset(std::string name, int64_t vocab_size, int64_t sample_size, int64_t num_samples, uint64_t seed,
                       std::optional<int64_t> document_length = std::nullopt);
  const std::string& name() const override { return name_; }
  int64_t num_samples() const override { return num_samples_; }
  std::vector<Document> get_sample(int64_t index) const override;

 private:
  std::string name_;
  int64_t vocab_size_, sample_size_, num_samples_;
  uint64_t seed_;
  int64_t document_length_;
};

}  // namespace fast_llm::data
