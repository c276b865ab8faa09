// Batches: labels masked at document starts, padding and loss-masking spans; label counts; attention segments and
// positions. Expected values are worked out by hand in the comments.
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "fast_llm/data/batch.h"

namespace fast_llm::data {
namespace {

constexpr int64_t X = kIgnoredLabel;

Document document(std::vector<int64_t> tokens, std::vector<Range> spans = {}) {
  Document result;
  result.tokens = std::move(tokens);
  result.loss_masking_spans = std::move(spans);
  return result;
}

TEST(Batch, PaddedSampleWithSpans) {
  // Sample of 11 tokens: 1 2 3 4 | 5 6 7 | pad pad pad pad; span [1, 3) of the first document covers 2 3.
  // Input t's label is token t + 1, ignored if it starts a document (4 -> index 4 holds 5), is in a span (indices 1,
  // 2) or is padding (7 and later).
  Batch batch = make_batch({document({1, 2, 3, 4}, {{1, 3}}), document({5, 6, 7})}, {.micro_batch_size = 10}, 3);
  EXPECT_EQ(batch.sample_index, 3);
  EXPECT_EQ(batch.tokens, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 0, 0, 0}));
  EXPECT_EQ(batch.labels, (std::vector<int64_t>{X, X, 4, X, 6, 7, X, X, X, X}));
  EXPECT_EQ(batch.num_labels(), 3);
  EXPECT_EQ(batch.lengths, (std::vector<int32_t>{4, 3, 3}));
  EXPECT_EQ(batch.cu_seqlens, (std::vector<int32_t>{0, 4, 7, 10}));
  EXPECT_EQ(batch.max_seqlen, 4);
  EXPECT_EQ(batch.positions, (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(batch.num_documents, 2);
  EXPECT_EQ(batch.num_padding, 3);

  // Without loss-masking spans, 2 and 3 become labels.
  Batch unmasked = make_batch({document({1, 2, 3, 4}, {{1, 3}}), document({5, 6, 7})},
                              {.micro_batch_size = 10, .use_loss_masking_spans = false});
  EXPECT_EQ(unmasked.labels, (std::vector<int64_t>{2, 3, 4, X, 6, 7, X, X, X, X}));
  EXPECT_EQ(unmasked.num_labels(), 5);
}

TEST(Batch, FullTruncatedSample) {
  // 5 tokens for 4 inputs: 10 11 12 | 13 14. The last token is only a label, so the second document has one input.
  Batch batch = make_batch({document({10, 11, 12}), document({13, 14})}, {.micro_batch_size = 4});
  EXPECT_EQ(batch.tokens, (std::vector<int64_t>{10, 11, 12, 13}));
  EXPECT_EQ(batch.labels, (std::vector<int64_t>{11, 12, X, 14}));
  EXPECT_EQ(batch.num_labels(), 3);
  EXPECT_EQ(batch.lengths, (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(batch.cu_seqlens, (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(batch.positions, (std::vector<int64_t>{0, 1, 2, 0}));
  EXPECT_EQ(batch.num_documents, 2);
  EXPECT_EQ(batch.num_padding, 0);

  // A document that is only the trailing label token adds no segment, and its first token is no label.
  Batch trailing = make_batch({document({10, 11, 12, 13}), document({14})}, {.micro_batch_size = 4});
  EXPECT_EQ(trailing.labels, (std::vector<int64_t>{11, 12, 13, X}));
  EXPECT_EQ(trailing.lengths, (std::vector<int32_t>{4}));
  EXPECT_EQ(trailing.num_documents, 1);
}

TEST(Batch, SeveralPredictionDistances) {
  // 6 tokens for 4 inputs and 2 heads: 1 2 3 | 4 5 6.
  // Distance 1: labels tokens 1..4 = 2 3 4 5, ignoring index 3 (start of the second document).
  // Distance 2: labels tokens 2..5 = 3 4 5 6, ignoring indices 3 and 4 (first two of the second document).
  Batch batch = make_batch({document({1, 2, 3}), document({4, 5, 6})}, {.micro_batch_size = 4, .predicted_tokens = 2});
  EXPECT_EQ(batch.labels.size(), 8u);
  EXPECT_EQ(std::vector<int64_t>(batch.labels_at(1).begin(), batch.labels_at(1).end()),
            (std::vector<int64_t>{2, 3, X, 5}));
  EXPECT_EQ(std::vector<int64_t>(batch.labels_at(2).begin(), batch.labels_at(2).end()),
            (std::vector<int64_t>{3, X, X, 6}));
  EXPECT_EQ(batch.num_labels(1), 3);
  EXPECT_EQ(batch.num_labels(2), 2);
}

TEST(Batch, EmptyDocumentsAndOverflow) {
  Batch batch = make_batch({document({}), document({7, 8}), document({})}, {.micro_batch_size = 3});
  EXPECT_EQ(batch.lengths, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(batch.labels, (std::vector<int64_t>{8, X, X}));
  EXPECT_EQ(batch.num_documents, 1);
  EXPECT_EQ(batch.num_padding, 1);
  EXPECT_THROW(make_batch({document({1, 2, 3, 4, 5})}, {.micro_batch_size = 3}), Error);
}

TEST(Batch, PreferencePairsAsLabelRowsAndTwoSequences) {
  // A plain document 7 8, then a preference document as Fast-LLM's preparation writes it: prompt 1 2, chosen 3 EOS(9),
  // BOS(5) prompt 1 2, rejected 4 EOS(9):  1 2 3 9 | 5 1 2 4 9, chosen span [2, 4), rejected span [7, 9).
  Document preference;
  preference.tokens = {1, 2, 3, 9, 5, 1, 2, 4, 9};
  preference.chosen_spans = {{2, 4}};
  preference.rejected_spans = {{7, 9}};
  Batch batch = make_batch({document({7, 8}), preference}, {.micro_batch_size = 12});
  // Inputs at 0..10 (padding at 11): the preference document starts at 2 and is cut after its chosen span (at 6), so
  // its second sequence 5 1 2 4 9 starts at 6; the label of row 5 (BOS) is masked as a document start.
  EXPECT_EQ(batch.lengths, (std::vector<int32_t>{2, 4, 5, 1}));
  EXPECT_EQ(batch.positions, (std::vector<int64_t>{0, 1, 0, 1, 2, 3, 0, 1, 2, 3, 4, 0}));
  EXPECT_EQ(batch.labels, (std::vector<int64_t>{8, X, 2, 3, 9, X, 1, 2, 4, 9, X, X}));
  // Chosen tokens 3 9 (positions 4, 5) are the labels of rows 3, 4; rejected tokens 4 9 (positions 9, 10) of rows 8, 9.
  ASSERT_EQ(batch.preference_pairs.size(), 1u);
  EXPECT_EQ(batch.preference_pairs[0].chosen_begin, 3);
  EXPECT_EQ(batch.preference_pairs[0].chosen_end, 5);
  EXPECT_EQ(batch.preference_pairs[0].rejected_begin, 8);
  EXPECT_EQ(batch.preference_pairs[0].rejected_end, 10);

  // Unequal numbers of chosen and rejected spans are an error.
  preference.rejected_spans.clear();
  EXPECT_THROW(make_batch({preference}, {.micro_batch_size = 12}), Error);
}

}  // namespace
}  // namespace fast_llm::data
