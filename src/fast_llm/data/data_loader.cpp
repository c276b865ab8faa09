#include "fast_llm/data/data_loader.h"

#include <chrono>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"

namespace fast_llm::data {

DataLoader::DataLoader(std::shared_ptr<const SampledDataset> dataset, BatchOptions batch_options,
                       DataLoaderOptions options)
    : dataset_(std::move(dataset)), batch_options_(batch_options), options_(options) {
  FLM_CHECK(options_.data_parallel > 0 && options_.data_rank >= 0 && options_.data_rank < options_.data_parallel,
            "loader", "data rank {} of {} is invalid", options_.data_rank, options_.data_parallel);
  FLM_CHECK(options_.begin_sample >= 0, "loader", "begin sample {} is negative", options_.begin_sample);
  FLM_CHECK(options_.num_workers > 0 && options_.prefetch > 0, "loader",
            "need at least one worker and a prefetch of at least one (got {} and {})", options_.num_workers,
            options_.prefetch);
  const int64_t remaining = dataset_->num_samples() - options_.begin_sample;
  total_ = remaining > 0 ? remaining / options_.data_parallel : 0;
  for (int worker = 0; worker < options_.num_workers; ++worker) workers_.emplace_back([this] { work(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  space_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void DataLoader::work() {
  while (true) {
    int64_t position;
    {
      std::unique_lock lock(mutex_);
      // Stay within `prefetch` batches of the consumer, so memory is bounded whatever the worker count.
      space_.wait(lock, [&] {
        return stop_ || next_claim_ >= total_ || next_claim_ < next_delivery_ + options_.prefetch;
      });
      if (stop_ || next_claim_ >= total_) return;
      position = next_claim_++;
    }
    std::variant<Batch, std::exception_ptr> result;
    try {
      const int64_t sample = sample_index(position);
      auto start = std::chrono::steady_clock::now();
      std::vector<Document> documents = dataset_->get_sample(sample);
      double elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (elapsed_ms > options_.warn_time_ms)
        log_warning("Sample {} of dataset {} took {:.0f} ms to read (threshold {:.0f} ms)", sample, dataset_->name(),
                    elapsed_ms, options_.warn_time_ms);
      result = make_batch(documents, batch_options_, sample);
    } catch (...) {
      result = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      finished_.emplace(position, std::move(result));
    }
    ready_.notify_all();
  }
}

std::optional<Batch> DataLoader::next() {
  std::unique_lock lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
  if (next_delivery_ >= total_) return std::nullopt;
  ready_.wait(lock, [&] { return finished_.contains(next_delivery_); });
  auto node = finished_.extract(next_delivery_);
  ++next_delivery_;
  lock.unlock();
  space_.notify_all();
  if (auto* error = std::get_if<std::exception_ptr>(&node.mapped())) {
    {
      std::lock_guard relock(mutex_);
      failure_ = *error;
    }
    std::rethrow_exception(*error);
  }
  return std::move(std::get<Batch>(node.mapped()));
}

}  // namespace fast_llm::data
