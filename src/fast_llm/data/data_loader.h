// Background data loading: worker threads read samples and pack them into batches ahead of the training loop, into a
// bounded queue, and hand them out strictly in order.
//
// A data-parallel rank reads samples begin_sample + data_rank, + data_parallel, + 2 data_parallel, ... (Fast-LLM's
// SampledDatasetIterator with one sample per micro-batch), as long as every rank still has one, so ranks stay in
// step. An error in a worker (a corrupt document, a failed read) is delivered by `next()` at the position of the
// batch that failed, rethrown on the consumer's thread; it is never swallowed. Destruction stops and joins the
// workers, whether or not the batches were consumed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>
#include <vector>

#include "fast_llm/data/batch.h"
#include "fast_llm/data/dataset.h"

namespace fast_llm::data {

struct DataLoaderOptions {
  int64_t begin_sample = 0;   // samples already consumed by all ranks together (resumes exactly there)
  int64_t data_rank = 0;
  int64_t data_parallel = 1;
  int num_workers = 1;        // threads packing batches
  int prefetch = 4;           // batches built ahead of the consumer, at most
  double warn_time_ms = 1000;  // warn when one sample takes longer than this to build
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const SampledDataset> dataset, BatchOptions batch_options, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch in order, or nothing when this rank's samples are exhausted. Rethrows a worker's error.
  std::optional<Batch> next();
  // Batches this loader delivers in all.
  int64_t size() const { return total_; }
  // Sample index of the j-th batch of this rank.
  int64_t sample_index(int64_t position) const {
    return options_.begin_sample + position * options_.data_parallel + options_.data_rank;
  }

 private:
  void work();

  std::shared_ptr<const SampledDataset> dataset_;
  BatchOptions batch_options_;
  DataLoaderOptions options_;
  int64_t total_ = 0;

  std::mutex mutex_;
  std::condition_variable ready_;  // a batch was finished
  std::condition_variable space_;  // the consumer took one, or stop
  int64_t next_claim_ = 0;         // next batch position a worker will build
  int64_t next_delivery_ = 0;      // next batch position `next()` returns
  std::map<int64_t, std::variant<Batch, std::exception_ptr>> finished_;
  std::exception_ptr failure_;     // the first delivered error: the stream ends there
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace fast_llm::data
