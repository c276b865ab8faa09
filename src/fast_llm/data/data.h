// The data side of a training run: builds and samples the datasets of the `data:` section and opens loaders on them.
//
//   GPTData data(config.data, {.experiment_directory = config.run.experiment_dir, .vocab_size = vocab_size});
//   data.sample_dataset("training", train_iters * samples_per_step);
//   auto loader = data.make_loader("training", {.begin_sample = consumed_samples, .data_rank = rank,
//                                                .data_parallel = data_parallel});
//   while (std::optional<Batch> batch = loader->next()) ...
//
// Sampling indices are cached in `<experiment_directory>/dataset_cache/` (none without an experiment directory).
// Every dataset is sampled with `data.seed` (Fast-LLM's rule; blended sub-datasets offset it by 697 per position).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "fast_llm/data/config.h"
#include "fast_llm/data/data_loader.h"
#include "fast_llm/data/sampling.h"

namespace fast_llm::data {

// What the trainer knows besides the `data:` section.
struct DataSetup {
  std::optional<std::filesystem::path> experiment_directory;
  int64_t vocab_size = 0;        // model vocabulary (the `random` dataset draws from it)
  int64_t predicted_tokens = 1;  // prediction heads: each sample carries this many extra label tokens
  bool use_loss_masking_spans = true;
};

class GPTData {
 public:
  // `config` must be validated; it is copied.
  GPTData(const GPTDataConfig& config, DataSetup setup);

  const GPTDataConfig& config() const { return config_; }
  const SamplingParameters& sampling_parameters() const { return parameters_; }
  BatchOptions batch_options() const;

  // Builds `data.datasets.<name>` and samples `num_samples` samples from it (once per name).
  std::shared_ptr<SampledDataset> sample_dataset(const std::string& name, int64_t num_samples);
  // The dataset sampled under `name`.
  std::shared_ptr<SampledDataset> sampled_dataset(const std::string& name) const;
  // A background loader over the dataset sampled under `name`; `warn_time_ms` comes from the config.
  std::unique_ptr<DataLoader> make_loader(const std::string& name, DataLoaderOptions options) const;

 private:
  GPTDataConfig config_;
  DataSetup setup_;
  SamplingParameters parameters_;
  std::map<std::string, std::shared_ptr<SampledDataset>> sampled_;
};

}  // namespace fast_llm::data
