// When a training step runs from a CUDA graph: which runs qualify, what makes two steps' keys equal, and the policy
// (capture at the second step in a row with a key, replay after, least recently used graph evicted, eager-only steps,
// more tokens dropping every graph). Host logic only.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "fast_llm/engine/training/step_graph_policy.h"

namespace fast_llm::engine {
namespace {

// A host batch of `micro_batch_size` tokens whose documents have the given lengths (the rest is padding).
std::shared_ptr<const data::Batch> batch_of(const std::vector<int64_t>& document_lengths,
                                            int64_t micro_batch_size = 16) {
  std::vector<data::Document> documents;
  for (int64_t length : document_lengths) {
    data::Document document;
    document.tokens.assign(size_t(length), 3);
    documents.push_back(document);
  }
  return std::make_shared<const data::Batch>(data::make_batch(
      documents, data::BatchOptions{.micro_batch_size = micro_batch_size, .predicted_tokens = 1,
                                    .use_loss_masking_spans = false}));
}

using Batches = std::vector<std::shared_ptr<const data::Batch>>;

StepGraphKey key_of(const Batches& batches, int64_t num_labels = 20, double loss_scale = 1.0,
                    std::vector<const void*> addresses = {}) {
  return step_graph_key(batches, num_labels, loss_scale, std::move(addresses));
}

TEST(StepGraphPolicy, OnlyOneProcessOnCudaWithoutDropoutOrDynamicScalingQualifies) {
  const GraphedRunFacts qualifies{.cuda = true, .world_size = 1, .dropout = false, .dynamic_loss_scaling = false};
  EXPECT_EQ(cuda_graphs_refusal(qualifies), std::nullopt);
  // Each fact alone refuses, and the reason says which.
  const auto expect_refused = [&](void (*change)(GraphedRunFacts&), const std::string& reason) {
    GraphedRunFacts facts = qualifies;
    change(facts);
    const std::optional<std::string> refusal = cuda_graphs_refusal(facts);
    ASSERT_TRUE(refusal.has_value()) << reason;
    EXPECT_NE(refusal->find(reason), std::string::npos) << *refusal;
  };
  expect_refused([](GraphedRunFacts& facts) { facts.cuda = false; }, "CUDA");
  expect_refused([](GraphedRunFacts& facts) { facts.world_size = 2; }, "2 processes");
  expect_refused([](GraphedRunFacts& facts) { facts.dropout = true; }, "dropout");
  expect_refused([](GraphedRunFacts& facts) { facts.dynamic_loss_scaling = true; }, "loss scaling");
  expect_refused([](GraphedRunFacts& facts) { facts.prepared_inputs = true; }, "reference models");
  expect_refused([](GraphedRunFacts& facts) { facts.sequence_pieces = true; }, "micro_batch_splits");
}

TEST(StepGraphPolicy, KeysFollowTheHostValuesKernelsDependOn) {
  const Batches fixed = {batch_of({17}), batch_of({17})};
  // Same shapes, other tokens: the same key (tokens are data, copied into the graph's buffers).
  EXPECT_EQ(key_of(fixed), key_of({batch_of({17}), batch_of({17})}));
  const StepGraphKey key = key_of(fixed);
  ASSERT_EQ(key.micro_batches.size(), 2u);
  EXPECT_EQ(key.micro_batches[0].tokens, 16);
  EXPECT_EQ(key.micro_batches[0].cu_seqlens, (std::vector<int32_t>{0, 16}));
  // Other document boundaries, in either micro-batch.
  EXPECT_NE(key_of({batch_of({5, 12}), batch_of({17})}), key);
  EXPECT_NE(key_of({batch_of({17}), batch_of({9, 8})}), key);
  // Same boundaries count, other lengths (cu_seqlens values and max_seqlen differ).
  EXPECT_NE(key_of({batch_of({5, 12}), batch_of({17})}), key_of({batch_of({8, 9}), batch_of({17})}));
  // Other micro-batch size, label count, loss scale, state addresses.
  EXPECT_NE(key_of({batch_of({33}, 32), batch_of({33}, 32)}), key);
  EXPECT_NE(key_of(fixed, 21), key);
  EXPECT_NE(key_of(fixed, 20, 2.0), key);
  int state = 0, other_state = 0;
  EXPECT_NE(key_of(fixed, 20, 1.0, {&state}), key_of(fixed, 20, 1.0, {&other_state}));
  EXPECT_EQ(key_of(fixed, 20, 1.0, {&state}), key_of(fixed, 20, 1.0, {&state}));
  // Fewer micro-batches.
  EXPECT_NE(key_of({batch_of({17})}), key);
}

TEST(StepGraphPolicy, CapturesAtTheSecondStepInARowThenReplays) {
  StepGraphPolicy policy(4);
  const StepGraphKey a = key_of({batch_of({17})}), b = key_of({batch_of({4, 13})});
  EXPECT_EQ(policy.decide(a, /*eager_only=*/true).action, StepGraphAction::eager);  // the first step
  const StepGraphDecision capture = policy.decide(a, false);
  EXPECT_EQ(capture.action, StepGraphAction::capture);
  EXPECT_TRUE(capture.dropped.empty());
  const StepGraphDecision replay = policy.decide(a, false);
  EXPECT_EQ(replay.action, StepGraphAction::replay);
  EXPECT_EQ(replay.graph, capture.graph);
  // A new key runs eagerly, even right after a graph; the known key still replays after it.
  EXPECT_EQ(policy.decide(b, false).action, StepGraphAction::eager);
  EXPECT_EQ(policy.decide(a, false).action, StepGraphAction::replay);
  // b was not seen twice in a row: still eager.
  EXPECT_EQ(policy.decide(b, false).action, StepGraphAction::eager);
  const StepGraphDecision second = policy.decide(b, false);
  EXPECT_EQ(second.action, StepGraphAction::capture);
  EXPECT_NE(second.graph, capture.graph);
  EXPECT_EQ(policy.graphs(), 2u);
  // An eager-only step (profiled) with a known key runs eagerly and keeps the graph.
  EXPECT_EQ(policy.decide(a, true).action, StepGraphAction::eager);
  EXPECT_EQ(policy.decide(a, false).action, StepGraphAction::replay);
}

TEST(StepGraphPolicy, BatchesThatChangeEveryStepNeverCapture) {
  StepGraphPolicy policy(4);
  for (int64_t step = 0; step < 12; ++step) {
    const StepGraphDecision decision = policy.decide(key_of({batch_of({1 + step % 5, 15 - step % 5})}), step == 0);
    EXPECT_EQ(decision.action, StepGraphAction::eager) << step;
  }
  EXPECT_EQ(policy.graphs(), 0u);
}

TEST(StepGraphPolicy, TheLeastRecentlyUsedGraphIsEvicted) {
  StepGraphPolicy policy(2);
  const StepGraphKey a = key_of({batch_of({17})}), b = key_of({batch_of({4, 13})}), c = key_of({batch_of({9, 8})});
  policy.decide(a, true);
  const uint64_t graph_a = policy.decide(a, false).graph;
  policy.decide(b, false);
  const uint64_t graph_b = policy.decide(b, false).graph;
  EXPECT_EQ(policy.decide(a, false).action, StepGraphAction::replay);  // a is now the most recently used
  policy.decide(c, false);
  const StepGraphDecision capture_c = policy.decide(c, false);
  EXPECT_EQ(capture_c.action, StepGraphAction::capture);
  EXPECT_EQ(capture_c.dropped, (std::vector<uint64_t>{graph_b}));
  EXPECT_EQ(policy.graphs(), 2u);
  const StepGraphDecision replay_a = policy.decide(a, false);
  EXPECT_EQ(replay_a.action, StepGraphAction::replay);
  EXPECT_EQ(replay_a.graph, graph_a);
  // b was evicted: it runs eagerly, then is captured again under a new id.
  EXPECT_EQ(policy.decide(b, false).action, StepGraphAction::eager);
  const StepGraphDecision recapture_b = policy.decide(b, false);
  EXPECT_EQ(recapture_b.action, StepGraphAction::capture);
  EXPECT_NE(recapture_b.graph, graph_b);
}

TEST(StepGraphPolicy, MoreTokensThanEverDropEveryGraph) {
  StepGraphPolicy policy(4);
  const StepGraphKey small = key_of({batch_of({17})}), large = key_of({batch_of({33}, 32)});
  policy.decide(small, true);
  const uint64_t graph = policy.decide(small, false).graph;
  const StepGraphDecision grown = policy.decide(large, false);
  EXPECT_EQ(grown.action, StepGraphAction::eager);
  EXPECT_EQ(grown.dropped, (std::vector<uint64_t>{graph}));
  EXPECT_EQ(policy.graphs(), 0u);
  // Back to the smaller shape: no graph to replay; it is captured again after two steps in a row.
  EXPECT_EQ(policy.decide(small, false).action, StepGraphAction::eager);
  EXPECT_EQ(policy.decide(small, false).action, StepGraphAction::capture);
  // The larger shape again is no longer "more than ever": nothing dropped.
  EXPECT_TRUE(policy.decide(large, false).dropped.empty());
}

TEST(StepGraphPolicy, ClearForgetsEveryGraph) {
  StepGraphPolicy policy(4);
  const StepGraphKey a = key_of({batch_of({17})});
  policy.decide(a, true);
  const uint64_t graph = policy.decide(a, false).graph;
  EXPECT_EQ(policy.clear(), (std::vector<uint64_t>{graph}));
  EXPECT_EQ(policy.graphs(), 0u);
  // The key is still the previous one, so the next step with it captures again.
  EXPECT_EQ(policy.decide(a, false).action, StepGraphAction::capture);
}

}  // namespace
}  // namespace fast_llm::engine
