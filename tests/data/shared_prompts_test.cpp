// Shared prompt rows of preference pairs (data/shared_prompts.h): which rows of a rejected sequence repeat its chosen
// sequence's, the computed rows and the maps attention keeps. Expected values are worked out by hand in the comments.
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "fast_llm/data/shared_prompts.h"

namespace fast_llm::data {
namespace {

constexpr int64_t X = kIgnoredLabel;

TEST(SharedPrompts, RejectedSequencesLeaveOutTheirPromptRows) {
  // Rows 0..12: 1 5 6 7 2 | 1 5 6 8 9 2 | 3 4. The chosen sequence [0, 5), its pair's chosen rows [2, 4) (labels
  // 7 2); the rejected sequence [5, 11), rows [7, 10) (labels 8 9 2). Rows 5 and 6 (1 5) repeat rows 0 and 1; row 7
  // (6, whose label is the first rejected token) is computed in both sequences.
  const Batch batch = make_batch({testing::preference_document({5, 6}, {7}, {8, 9}), Document{.tokens = {3, 4}}},
                                 {.micro_batch_size = 13});
  EXPECT_EQ(batch.cu_seqlens, (std::vector<int32_t>{0, 5, 11, 13}));
  ASSERT_EQ(batch.preference_pairs.size(), 1u);
  EXPECT_EQ(batch.preference_pairs[0].chosen_begin, 2);
  EXPECT_EQ(batch.preference_pairs[0].rejected_begin, 7);

  const std::optional<SharedPromptBatch> shared = share_prompt_rows(batch);
  ASSERT_TRUE(shared.has_value());
  const Batch& computed = shared->batch;
  EXPECT_EQ(computed.micro_batch_size, 11);
  EXPECT_EQ(computed.tokens, (std::vector<int64_t>{1, 5, 6, 7, 2, 6, 8, 9, 2, 3, 4}));
  EXPECT_EQ(computed.labels, (std::vector<int64_t>{5, 6, 7, 2, X, 8, 9, 2, X, 4, X}));
  EXPECT_EQ(computed.positions, (std::vector<int64_t>{0, 1, 2, 3, 4, 2, 3, 4, 5, 0, 1}));
  // Attention's segments and the step's label count are the original batch's.
  EXPECT_EQ(computed.cu_seqlens, batch.cu_seqlens);
  EXPECT_EQ(computed.max_seqlen, batch.max_seqlen);
  EXPECT_EQ(computed.label_counts, batch.label_counts);
  ASSERT_EQ(computed.preference_pairs.size(), 1u);
  EXPECT_EQ(computed.preference_pairs[0].chosen_begin, 2);
  EXPECT_EQ(computed.preference_pairs[0].chosen_end, 4);
  EXPECT_EQ(computed.preference_pairs[0].rejected_begin, 5);
  EXPECT_EQ(computed.preference_pairs[0].rejected_end, 8);

  EXPECT_EQ(shared->attention_sources, (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(shared->attention_positions, (std::vector<int64_t>{0, 1, 2, 3, 4, 11, 11, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(shared->kept_rows, (std::vector<int64_t>{0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(shared->repeating_rows, (std::vector<int64_t>{5, 6, 13, 13, 13, 13, 13, 13, 13, 13, 13}));
}

TEST(SharedPrompts, OnlyEqualTokensAtEqualPositionsAreShared) {
  // The prompts differ at their first token (5 6 against 4 6): only BOS is shared.
  Document different = testing::preference_document({5, 6}, {7}, {8});
  different.tokens[6] = 4;
  const std::optional<SharedPromptBatch> partly = share_prompt_rows(make_batch({different}, {.micro_batch_size = 9}));
  ASSERT_TRUE(partly.has_value());
  EXPECT_EQ(partly->batch.micro_batch_size, 8);
  EXPECT_EQ(partly->kept_rows, (std::vector<int64_t>{0, 1, 2, 3, 4, 6, 7, 8}));
  // A rejected sequence without its own BOS (the chosen one starts with BOS): nothing is shared.
  Document unshifted = testing::preference_document({5, 6}, {7}, {8});
  unshifted.tokens.erase(unshifted.tokens.begin());
  for (Range* span : {&unshifted.chosen_spans[0], &unshifted.rejected_spans[0]}) {
    --span->begin;
    --span->end;
  }
  EXPECT_FALSE(share_prompt_rows(make_batch({unshifted}, {.micro_batch_size = 8})).has_value());
  // Without preference pairs there is nothing to share.
  EXPECT_FALSE(share_prompt_rows(make_batch({Document{.tokens = {1, 5, 6, 1, 5, 6}}}, {.micro_batch_size = 6}))
                   .has_value());
}

// Several pairs in one sample, then padding, or the last document's final EOS a label only (cut at the inputs' end).
TEST(SharedPrompts, SeveralPairsAndTheSampleEnd) {
  // Each document 1 5 7 2 | 1 5 8 2: its pair's chosen row 1, rejected rows 5 and 6 (of the document); the rejected
  // sequence's BOS repeats the chosen one's (row 4 repeats row 0, row 12 row 8). Padding rows 16..19.
  const std::vector<Document> documents{testing::preference_document({5}, {7}, {8}), testing::preference_document({5}, {7}, {8})};
  const std::optional<SharedPromptBatch> padded = share_prompt_rows(make_batch(documents, {.micro_batch_size = 20}));
  ASSERT_TRUE(padded.has_value());
  EXPECT_EQ(padded->batch.micro_batch_size, 18);
  EXPECT_EQ(padded->batch.cu_seqlens, (std::vector<int32_t>{0, 4, 8, 12, 16, 20}));
  EXPECT_EQ(padded->attention_sources[4], 0);
  EXPECT_EQ(padded->attention_sources[12], 7);
  EXPECT_EQ(padded->repeating_rows[0], 4);
  EXPECT_EQ(padded->repeating_rows[7], 12);
  ASSERT_EQ(padded->batch.preference_pairs.size(), 2u);
  const PreferenceRows& second = padded->batch.preference_pairs[1];
  EXPECT_EQ(std::vector<int64_t>({second.chosen_begin, second.chosen_end, second.rejected_begin, second.rejected_end}),
            (std::vector<int64_t>{8, 10, 11, 13}));
  // 15 inputs: the second document's last token (EOS) is only a label; its pair's rows end at the inputs' end.
  const std::optional<SharedPromptBatch> cut = share_prompt_rows(make_batch(documents, {.micro_batch_size = 15}));
  ASSERT_TRUE(cut.has_value());
  EXPECT_EQ(cut->batch.micro_batch_size, 13);
  EXPECT_EQ(cut->batch.preference_pairs[1].rejected_end, 13);
}

// A document with two pairs is one attention segment (data/batch.h): its rejected answers see everything before them.
TEST(SharedPrompts, DocumentsWithSeveralPairsAreNotShared) {
  Document two_pairs = testing::preference_document({5}, {7}, {8});
  const auto size = int32_t(two_pairs.size());
  two_pairs.tokens.insert(two_pairs.tokens.end(), {1, 5, 7, 2, 1, 5, 8, 2});
  two_pairs.chosen_spans.push_back({size + 2, size + 4});
  two_pairs.rejected_spans.push_back({size + 6, size + 8});
  EXPECT_FALSE(share_prompt_rows(make_batch({two_pairs}, {.micro_batch_size = 2 * size})).has_value());
}

}  // namespace
}  // namespace fast_llm::data
