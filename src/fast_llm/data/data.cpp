#include "fast_llm/data/data.h"

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"

namespace fast_llm::data {

GPTData::GPTData(const GPTDataConfig& config, DataSetup setup) : config_(config), setup_(std::move(setup)) {
  FLM_CHECK(config_.validated(), "data", "the data config must be validated before use");
  std::optional<std::filesystem::path> cache_directory;
  if (setup_.experiment_directory) cache_directory = *setup_.experiment_directory / "dataset_cache";
  parameters_ = make_sampling_parameters(config_, cache_directory, setup_.vocab_size, setup_.predicted_tokens);
}

BatchOptions GPTData::batch_options() const {
  return {.micro_batch_size = parameters_.micro_batch_size,
          .predicted_tokens = parameters_.predicted_tokens,
          .use_loss_masking_spans = setup_.use_loss_masking_spans};
}

std::shared_ptr<SampledDataset> GPTData::sample_dataset(const std::string& name, int64_t num_samples) {
  auto config = config_.datasets.find(name);
  FLM_CHECK(config != config_.datasets.end(), "data", "no dataset '{}' in data.datasets", name);
  FLM_CHECK(!sampled_.contains(name), "data", "dataset '{}' is already sampled", name);
  FLM_CHECK(num_samples > 0, "data", "dataset '{}': the number of samples must be positive, got {}", name,
            num_samples);
  log_main("Sampling dataset {}", name);
  auto dataset = config->second->build_and_sample(parameters_, num_samples, uint64_t(config_.seed));
  sampled_.emplace(name, dataset);
  return dataset;
}

std::shared_ptr<SampledDataset> GPTData::sampled_dataset(const std::string& name) const {
  auto found = sampled_.find(name);
  FLM_CHECK(found != sampled_.end(), "data", "dataset '{}' has not been sampled", name);
  return found->second;
}

std::unique_ptr<DataLoader> GPTData::make_loader(const std::string& name, DataLoaderOptions options) const {
  options.warn_time_ms = config_.data_sample_warn_time_ms;
  return std::make_unique<DataLoader>(sampled_dataset(name), batch_options(), options);
}

}  // namespace fast_llm::data
