// The batch uploader on the CPU: the micro-batch wraps the batch's vectors, and carries the rows that carry a loss
// (layers/language_model/loss_rows.h) with their labels, each row's index among them and the preference pairs in their
// numbering, and a preference batch's computed rows with attention's maps when its pairs share their prompt rows. (The
// GPU packing is checked by engine_cuda_test.)
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "fast_llm/engine/training/batch_uploader.h"

namespace fast_llm::engine {
namespace {

std::vector<int64_t> values(const Tensor& tensor) {
  return std::vector<int64_t>(tensor.data_as<int64_t>(), tensor.data_as<int64_t>() + tensor.numel());
}

// A batch of two attention segments of `first` and 6 - `first` rows with one preference pair.
std::shared_ptr<data::Batch> six_rows(std::vector<int64_t> tokens, std::vector<int64_t> labels, int32_t first,
                                      data::PreferenceRows pair) {
  auto batch = std::make_shared<data::Batch>();
  batch->micro_batch_size = 6;
  batch->tokens = std::move(tokens);
  batch->labels = std::move(labels);
  batch->label_counts = {int64_t(std::count_if(batch->labels.begin(), batch->labels.end(),
                                               [](int64_t label) { return label >= 0; }))};
  for (int32_t row = 0; row < 6; ++row) batch->positions.push_back(row < first ? row : row - first);
  batch->cu_seqlens = {0, first, 6};
  batch->max_seqlen = std::max(first, 6 - first);
  batch->lengths = {first, 6 - first};
  batch->preference_pairs = {pair};
  return batch;
}

// Documents of 2 and 4 tokens (4 labels) with one preference pair.
std::shared_ptr<data::Batch> two_documents(data::PreferenceRows pair) {
  return six_rows({5, 6, 7, 8, 9, 10}, {6, 7, -100, 9, 10, -100}, 2, pair);
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

// Sequences 1 5 7 and 1 5 8 (BOS, prompt 5, answers 7 and 8): the pair's chosen row 1, rejected row 4. Row 3 (BOS)
// repeats row 0; row 4 (5, whose label is the rejected answer) is computed in both sequences.
std::shared_ptr<data::Batch> preference_pair() {
  return six_rows({1, 5, 7, 1, 5, 8}, {5, 7, -100, 5, 8, -100}, 3,
                  {.chosen_begin = 1, .chosen_end = 2, .rejected_begin = 4, .rejected_end = 5});
}

TEST(BatchUploader, SharesPromptRowsWhenAskedForDpoBatches) {
  const auto batch = preference_pair();
  BatchUploader sharing(Device::cpu(), Stream{}, 1, layers::LossRowRule::preference_spans, true);
  const layers::MicroBatch micro_batch = sharing.upload(batch);
  EXPECT_EQ(values(micro_batch.tokens), (std::vector<int64_t>{1, 5, 7, 5, 8}));
  EXPECT_EQ(values(micro_batch.labels), (std::vector<int64_t>{5, 7, -100, 8, -100}));
  EXPECT_EQ(values(micro_batch.loss_rows), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(micro_batch.cu_seqlens.numel(), 3);
  EXPECT_EQ(micro_batch.cu_seqlens.data_as<int32_t>()[2], 6);
  ASSERT_TRUE(micro_batch.attention_rows.has_value());
  EXPECT_EQ(micro_batch.attention_rows->count, 6);
  EXPECT_EQ(values(micro_batch.attention_rows->sources), (std::vector<int64_t>{0, 1, 2, 0, 3, 4}));
  EXPECT_EQ(values(micro_batch.attention_rows->positions), (std::vector<int64_t>{0, 1, 2, 5, 3, 4}));
  EXPECT_EQ(values(micro_batch.attention_rows->kept), (std::vector<int64_t>{0, 1, 2, 4, 5}));
  EXPECT_EQ(values(micro_batch.attention_rows->repeating), (std::vector<int64_t>{3, 6, 6, 6, 6}));

  // Not asked, or losses on every labelled row (the prompts' labels count there): the batch as it is.
  for (const auto& [rule, share] : {std::pair{layers::LossRowRule::preference_spans, false},
                                    std::pair{layers::LossRowRule::labelled, true}}) {
    BatchUploader uploader(Device::cpu(), Stream{}, 1, rule, share);
    const layers::MicroBatch whole = uploader.upload(batch);
    EXPECT_EQ(whole.num_tokens(), 6);
    EXPECT_FALSE(whole.attention_rows.has_value());
  }
}

}  // namespace
}  // namespace fast_llm::engine
