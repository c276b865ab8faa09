// The batch uploader on the CPU: the micro-batch wraps the batch's vectors, and carries the rows that carry a loss
// (layers/language_model/loss_rows.h) with their labels, each row's index among them and the preference pairs in their
// numbering. (The GPU packing is checked by engine_cuda_test.)
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "fast_llm/engine/training/batch_uploader.h"

namespace fast_llm::engine {
namespace {

std::vector<int64_t> values(const Tensor& tensor) {
  return std::vector<int64_t>(tensor.data_as<int64_t>(), tensor.data_as<int64_t>() + tensor.numel());
}

// Documents of 2 and 4 tokens (4 labels) with one preference pair.
std::shared_ptr<data::Batch> two_documents(data::PreferenceRows pair) {
  auto batch = std::make_shared<data::Batch>();
  batch->micro_batch_size = 6;
  batch->tokens = {5, 6, 7, 8, 9, 10};
  batch->labels = {6, 7, -100, 9, 10, -100};
  batch->label_counts = {4};
  batch->positions = {0, 1, 0, 1, 2, 3};
  batch->cu_seqlens = {0, 2, 6};
  batch->max_seqlen = 4;
  batch->lengths = {2, 4};
  batch->preference_pairs = {pair};
  return batch;
}

TEST(BatchUploader, CpuMicroBatchCarriesItsLossRows) {
  auto batch = two_documents({.chosen_begin = 0, .chosen_end = 3, .rejected_begin = 3, .rejected_end = 6});
  BatchUploader uploader(Device::cpu(), Stream{}, 1);
  const layers::MicroBatch micro_batch = uploader.upload(batch);
  EXPECT_EQ(values(micro_batch.labels), batch->labels);
  EXPECT_EQ(values(micro_batch.loss_rows), (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_EQ(values(micro_batch.loss_labels), (std::vector<int64_t>{6, 7, 9, 10}));
  EXPECT_EQ(values(micro_batch.loss_row_positions), (std::vector<int64_t>{0, 1, 4, 2, 3, 4}));
  ASSERT_EQ(micro_batch.loss_preference_pairs.size(), 1u);
  EXPECT_EQ(micro_batch.loss_preference_pairs[0].chosen_begin, 0);
  EXPECT_EQ(micro_batch.loss_preference_pairs[0].chosen_end, 2);
  EXPECT_EQ(micro_batch.loss_preference_pairs[0].rejected_begin, 2);
  EXPECT_EQ(micro_batch.loss_preference_pairs[0].rejected_end, 4);
  // The pairs in the micro-batch's own numbering are unchanged.
  ASSERT_EQ(micro_batch.preference_pairs.size(), 1u);
  EXPECT_EQ(micro_batch.preference_pairs[0].rejected_end, 6);
}

// The uploader finds the loss rows by the rule it was given: inside the preference spans, row 3 (before the rejected
// span) is left out.
TEST(BatchUploader, FindsLossRowsByItsRule) {
  auto batch = two_documents({.chosen_begin = 0, .chosen_end = 3, .rejected_begin = 4, .rejected_end = 6});
  BatchUploader uploader(Device::cpu(), Stream{}, 1, layers::LossRowRule::preference_spans);
  const layers::MicroBatch micro_batch = uploader.upload(batch);
  EXPECT_EQ(values(micro_batch.loss_rows), (std::vector<int64_t>{0, 1, 4}));
  EXPECT_EQ(values(micro_batch.loss_row_positions), (std::vector<int64_t>{0, 1, 3, 3, 2, 3}));
  ASSERT_EQ(micro_batch.loss_preference_pairs.size(), 1u);
  EXPECT_EQ(micro_batch.loss_preference_pairs[0].rejected_begin, 2);
  EXPECT_EQ(micro_batch.loss_preference_pairs[0].rejected_end, 3);
}

}  // namespace
}  // namespace fast_llm::engine
