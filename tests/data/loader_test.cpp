// The background loader: same batches as packing samples directly, data-parallel sample assignment, resuming, errors
// delivered to the consumer in order, and shutdown with batches left unread.
#include <gtest/gtest.h>

#include <atomic>

#include "data_test_util.h"
#include "fast_llm/data/data_loader.h"
#include "fast_llm/data/sampling.h"

namespace fast_llm::data {
namespace {

using testing::TemporaryFolder;

std::shared_ptr<SampledDataset> sampled_dataset(const TemporaryFolder& folder, int64_t num_samples) {
  std::vector<Document> documents = testing::tagged_documents({5, 17, 3, 9, 30, 2, 11, 8, 6, 21});
  documents[3].loss_masking_spans = {{3, 7}};  // a 9-token document: kept, unlike those over 13 tokens
  testing::write_dataset(folder / "loader.fast_llm_dataset", documents,
                         {.data_type = TokenDataType::int32, .loss_masking_spans = true});
  auto dataset = std::make_shared<MemmapDataset>("loader", folder / "loader.fast_llm_dataset");
  SamplingParameters parameters;
  parameters.micro_batch_size = 12;
  parameters.truncate_documents = false;
  return std::make_shared<SampledIndexedDataset>(dataset, parameters, num_samples, 5);
}

void expect_same(const Batch& actual, const Batch& expected) {
  EXPECT_EQ(actual.sample_index, expected.sample_index);
  EXPECT_EQ(actual.tokens, expected.tokens);
  EXPECT_EQ(actual.labels, expected.labels);
  EXPECT_EQ(actual.cu_seqlens, expected.cu_seqlens);
  EXPECT_EQ(actual.positions, expected.positions);
  EXPECT_EQ(actual.num_labels(), expected.num_labels());
}

TEST(DataLoader, DeliversTheDirectBatchesInOrder) {
  TemporaryFolder folder;
  auto dataset = sampled_dataset(folder, 40);
  const BatchOptions options{.micro_batch_size = 12};
  DataLoader loader(dataset, options, {.num_workers = 3, .prefetch = 2});
  EXPECT_EQ(loader.size(), 40);
  int64_t count = 0;
  while (std::optional<Batch> batch = loader.next()) {
    expect_same(*batch, make_batch(dataset->get_sample(count), options, count));
    ++count;
  }
  EXPECT_EQ(count, 40);
  EXPECT_FALSE(loader.next().has_value());
}

TEST(DataLoader, DataParallelRanksShareTheSamplesAndResume) {
  TemporaryFolder folder;
  auto dataset = sampled_dataset(folder, 23);
  const BatchOptions options{.micro_batch_size = 12};
  // Rank 1 of 3 from sample 4: samples 5, 8, ..., 20 (the last step needs samples 20, 21, 22 for the three ranks).
  DataLoader loader(dataset, options, {.begin_sample = 4, .data_rank = 1, .data_parallel = 3, .num_workers = 2});
  std::vector<int64_t> samples;
  while (std::optional<Batch> batch = loader.next()) {
    expect_same(*batch, make_batch(dataset->get_sample(batch->sample_index), options, batch->sample_index));
    samples.push_back(batch->sample_index);
  }
  EXPECT_EQ(samples, (std::vector<int64_t>{5, 8, 11, 14, 17, 20}));
  EXPECT_THROW(DataLoader(dataset, options, {.data_rank = 3, .data_parallel = 3}), Error);
}

// Fails on one sample; counts how many samples were read.
class FailingDataset final : public SampledDataset {
 public:
  explicit FailingDataset(int64_t failing) : failing_(failing) {}
  const std::string& name() const override { return name_; }
  int64_t num_samples() const override { return 1000; }
  std::vector<Document> get_sample(int64_t index) const override {
    ++reads;
    if (index == failing_) throw Error("memmap", fmt::format("sample {} is corrupt", index));
    Document document;
    document.tokens.assign(5, index);
    return {document};
  }
  mutable std::atomic<int64_t> reads{0};

 private:
  std::string name_ = "failing";
  int64_t failing_;
};

TEST(DataLoader, WorkerErrorsReachTheConsumerInOrder) {
  auto dataset = std::make_shared<FailingDataset>(3);
  DataLoader loader(dataset, {.micro_batch_size = 4}, {.num_workers = 4, .prefetch = 3});
  for (int64_t index = 0; index < 3; ++index) {
    std::optional<Batch> batch = loader.next();
    ASSERT_TRUE(batch.has_value());
    EXPECT_EQ(batch->tokens[0], index);
  }
  std::string message = testing::error_message([&] { loader.next(); });
  EXPECT_NE(message.find("[memmap] sample 3 is corrupt"), std::string::npos) << message;
  // The stream ends at the failure: asking again repeats the error rather than skipping the sample.
  EXPECT_NE(testing::error_message([&] { loader.next(); }).find("sample 3 is corrupt"), std::string::npos);
}

TEST(DataLoader, PrefetchIsBoundedAndShutdownIsClean) {
  auto dataset = std::make_shared<FailingDataset>(-1);
  {
    DataLoader loader(dataset, {.micro_batch_size = 4}, {.num_workers = 2, .prefetch = 5});
    ASSERT_TRUE(loader.next().has_value());
    // Give the workers time to run ahead as far as they may.
    for (int attempt = 0; attempt < 200 && dataset->reads.load() < 6; ++attempt)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // One delivered, at most 5 ahead of the consumer.
    EXPECT_LE(dataset->reads.load(), 6);
    EXPECT_GE(dataset->reads.load(), 2);
  }  // destroyed with 995 samples unread: must return
  SUCCEED();
}

}  // namespace
}  // namespace fast_llm::data
