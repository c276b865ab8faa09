// The `data:` section of the trainer config (Fast-LLM's GPTDataConfig) and the dataset configs it holds.
//
//   data:
//     datasets:
//       training: {type: file, path: /data/fast_llm_config.yaml}     # `training` is the train set
//       validation: {type: memmap, path: /data/shard_0_0.fast_llm_dataset}
//     micro_batch_size: 4096            # tokens per micro-batch sample (Fast-LLM merged batch and sequence dims)
//     truncate_documents: false
//
// Dataset types (`type:`, required): random, memmap, file, blended, concatenated, slice, fim. Indexed types (memmap,
// file, concatenated, slice) hold documents; the others only produce samples. The configs build their datasets
// (`build_and_sample`); the runtime classes live in dataset.h, sampling.h and fim.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fast_llm/config/config.h"

namespace fast_llm::data {

class IndexedDataset;
class SampledDataset;
struct SamplingParameters;

// How documents are ordered across epochs (Fast-LLM's ShufflingType).
enum class ShufflingType {
  epoch,             // a fresh permutation for each epoch (default)
  full,              // one permutation over all epochs together
  skip_first_epoch,  // first epoch in file order, later epochs as `epoch`; for pre-shuffled datasets
  disabled,          // file order, epoch after epoch
};

// Fast-LLM's multiprocessing context for its data-loader workers; accepted for config compatibility. The loader here
// runs threads, so the value has no effect.
enum class MultiprocessingContext { spawn, fork };

}  // namespace fast_llm::data

namespace fast_llm::config {
template <>
struct EnumNames<data::ShufflingType> {
  static constexpr std::array<std::pair<data::ShufflingType, std::string_view>, 4> values{
      {{data::ShufflingType::epoch, "epoch"},
       {data::ShufflingType::full, "full"},
       {data::ShufflingType::skip_first_epoch, "skip_first_epoch"},
       {data::ShufflingType::disabled, "disabled"}}};
};
template <>
struct EnumNames<data::MultiprocessingContext> {
  static constexpr std::array<std::pair<data::MultiprocessingContext, std::string_view>, 2> values{
      {{data::MultiprocessingContext::spawn, "spawn"}, {data::MultiprocessingContext::fork, "fork"}}};
};
}  // namespace fast_llm::config

namespace fast_llm::data {

// Base of every dataset config (Fast-LLM's SampledDatasetConfig); `type` is required.
struct DatasetConfig : config::Config {
  static constexpr std::string_view kDefaultType = "";
  void visit(config::Visitor& v) override {}
  // Builds the dataset and samples `num_samples` samples of `parameters.sample_size()` tokens from it.
  virtual std::shared_ptr<SampledDataset> build_and_sample(const SamplingParameters& parameters, int64_t num_samples,
                                                           uint64_t seed) const = 0;
};

// A dataset of documents that can be sampled with shuffling and packing (memmap, file, concatenated, slice).
struct IndexedDatasetConfig : DatasetConfig {
  virtual std::shared_ptr<IndexedDataset> build() const = 0;
  std::shared_ptr<SampledDataset> build_and_sample(const SamplingParameters& parameters, int64_t num_samples,
                                                   uint64_t seed) const override;
};

// `random`: synthetic uniform tokens in [0, vocab_size), one document per sample. The vocabulary size comes from the
// model (SamplingParameters::vocab_size).
struct RandomDatasetConfig : DatasetConfig {
  std::string name = "dummy";
  void visit(config::Visitor& v) override;
  std::shared_ptr<SampledDataset> build_and_sample(const SamplingParameters& parameters, int64_t num_samples,
                                                   uint64_t seed) const override;
};

// `memmap`: a `.fast_llm_dataset` file, or the legacy Megatron pair `path.bin` / `path.idx` when `path` itself is not
// a file (the path then names the pair without its suffix, as in Fast-LLM).
struct MemmapDatasetConfig : IndexedDatasetConfig {
  std::filesystem::path path;
  void visit(config::Visitor& v) override;
  std::shared_ptr<IndexedDataset> build() const override;
};

// Datasets nest (blended, concatenated, slice and fim hold datasets; `file` holds the dataset of its file) at most this
// deep, counting from `data.datasets.<name>` through every file: deeper is a configuration error, not a stack overflow.
inline constexpr int kMaxDatasetNesting = 64;

// Where a dataset config sits: the dataset config files it was read from, outermost first (empty for one written in
// the trainer's config), and its depth among nested datasets (1 for `data.datasets.<name>`).
struct DatasetNesting {
  std::vector<std::filesystem::path> files;
  int depth = 1;
};

// `file`: a YAML dataset config written by `prepare` (`fast_llm_config*.yaml`). Paths inside it are relative to its
// folder; absolute paths and `..` are refused so a dataset config cannot reach outside its folder. The file is read
// when the dataset is built; a file that includes itself, directly or through others, is an error naming the chain.
struct DatasetFromFileConfig : IndexedDatasetConfig {
  std::filesystem::path path;
  // Not a field: set when this config is read from a file or validated inside the `data:` section.
  DatasetNesting nesting;
  void visit(config::Visitor& v) override;
  std::shared_ptr<IndexedDataset> build() const override;
  std::shared_ptr<SampledDataset> build_and_sample(const SamplingParameters& parameters, int64_t num_samples,
                                                   uint64_t seed) const override;

 private:
  // The dataset config of `path`, after checking this file is not already in `nesting.files`.
  config::Dynamic<DatasetConfig> load() const;
};

// `concatenated`: indexed datasets joined end to end, as one.
struct ConcatenatedDatasetConfig : IndexedDatasetConfig {
  std::string name = "concatenated";
  std::vector<config::Dynamic<DatasetConfig>> datasets;
  void visit(config::Visitor& v) override;
  void check() const override;
  std::shared_ptr<IndexedDataset> build() const override;
};

// `slice`: the documents [round(begin * n), round(end * n)) of an indexed dataset, e.g. (0, 0.9) / (0.9, 1) for a
// train / validation split.
struct DatasetSliceConfig : IndexedDatasetConfig {
  config::Dynamic<DatasetConfig> dataset;
  double begin = 0.0;
  double end = 1.0;
  void visit(config::Visitor& v) override;
  void check() const override;
  std::shared_ptr<IndexedDataset> build() const override;
};

// `blended`: samples drawn from several datasets in proportion to `weights` (normalised to sum to 1 at validation).
struct BlendedDatasetConfig : DatasetConfig {
  std::string name = "blended";
  std::vector<config::Dynamic<DatasetConfig>> datasets;
  std::vector<double> weights;
  void visit(config::Visitor& v) override;
  void derive() override;
  void check() const override;
  std::shared_ptr<SampledDataset> build_and_sample(const SamplingParameters& parameters, int64_t num_samples,
                                                   uint64_t seed) const override;
};

// Tokenizer settings (Fast-LLM's TokenizerConfig), used by `fim`.
struct TokenizerConfig : config::Config {
  std::optional<std::filesystem::path> path;
  std::optional<std::string> bos_token;
  std::optional<int64_t> max_vocab_size;
  bool trust_remote_code = false;
  void visit(config::Visitor& v) override;
};

// `fim`: fill-in-the-middle over another dataset (fim.h), with Fast-LLM's fields and defaults. The token names are
// looked up in the tokenizer, which is loaded when the dataset is built.
struct FimDatasetConfig : DatasetConfig {
  config::Dynamic<DatasetConfig> dataset;
  TokenizerConfig tokenizer;
  double rate = 0.0;
  std::optional<int64_t> max_middle_len;
  std::optional<std::string> split_sample;
  double fragment_rate = 0.0;
  std::optional<std::string> ignore_prefix;
  double spm_rate = 0.5;
  bool truncate_or_pad = false;
  std::string prefix_token = "<fim_prefix>";
  std::string middle_token = "<fim_middle>";
  std::string pad_token = "<fim_pad>";
  std::string suffix_token = "<fim_suffix>";
  void visit(config::Visitor& v) override;
  void check() const override;
  std::shared_ptr<SampledDataset> build_and_sample(const SamplingParameters& parameters, int64_t num_samples,
                                                   uint64_t seed) const override;
};

// The largest `micro_batch_size`: attention segment offsets and span bounds within a sample are 32-bit.
inline constexpr int64_t kMaxMicroBatchSize = int64_t(1) << 30;

// The `data:` section.
struct GPTDataConfig : config::Config {
  std::map<std::string, config::Dynamic<DatasetConfig>> datasets;
  int64_t micro_batch_size = 2048;
  std::optional<int64_t> maximum_document_length;
  bool truncate_documents = true;
  ShufflingType shuffle = ShufflingType::epoch;
  bool gpu = true;
  double data_sample_warn_time_ms = 1000.0;
  MultiprocessingContext multiprocessing_context = MultiprocessingContext::spawn;
  int64_t seed = 784569;
  void visit(config::Visitor& v) override;

 protected:
  void derive() override;
};

// Reads a `file` dataset config (`fast_llm_config*.yaml`): either `{config: <dataset>, metadata: {...}}` as current
// `prepare` writes it, or a bare dataset config as older versions did. Every `path` key is made relative to the file's
// folder. The result is validated; errors name the file. `reader` is the nesting of the `file` dataset reading it: the
// datasets inside get theirs from it, and nesting deeper than kMaxDatasetNesting is an error.
config::Dynamic<DatasetConfig> load_dataset_config_file(const std::filesystem::path& path,
                                                        const DatasetNesting& reader = {});

}  // namespace fast_llm::data
