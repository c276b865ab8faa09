// The walk over a rank's steps that gives the memory check's activations (engine/schedule/activation_memory.h), on
// layers described by hand: what the breadth-first and depth-first orders keep at once, pieces of a micro-batch and
// their whole-sequence part, messages between pipeline ranks, evaluation, and a description that does not fit the
// stages.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/engine/schedule/activation_memory.h"

namespace fast_llm::engine {
namespace {

// Two layers of one stage each, each keeping 10 bytes per token and working with none.
ModelActivations two_layers(int64_t output = 0, int64_t kept_per_sequence_token = 0) {
  const LayerActivations layer{.kept = 10, .kept_per_sequence_token = kept_per_sequence_token, .output = output};
  return {.layers = {layer, layer}};
}

TEST(ActivationMemory, BreadthFirstMicroBatchesAreKeptTogetherDepthFirstOnesInTurn) {
  // One process, 3 breadth-first micro-batches of 8 tokens: both stages keep all three when the backward starts.
  const ActivationPeak breadth = activation_peak(two_layers(), {1, 1}, Schedule(2, 1, 3, 1, 1, true), 0, 8, 1);
  EXPECT_EQ(breadth.bytes, 2 * 3 * 10 * 8);
  EXPECT_EQ(breadth.micro_batches_in_flight, 3);
  EXPECT_EQ(breadth.stages, (std::vector<size_t>{0, 1}));
  // 3 depth-first micro-batches: one at a time.
  const ActivationPeak depth = activation_peak(two_layers(), {1, 1}, Schedule(2, 3, 1, 1, 1, true), 0, 8, 1);
  EXPECT_EQ(depth.bytes, 2 * 10 * 8);
  EXPECT_EQ(depth.micro_batches_in_flight, 1);
  // Evaluation keeps nothing.
  EXPECT_EQ(activation_peak(two_layers(), {1, 1}, Schedule(2, 1, 3, 1, 1, false), 0, 8, 1).bytes, 0);
}

TEST(ActivationMemory, PipelineRanksCountTheirStagesAndTheirMessages) {
  // Two pipeline ranks, 3 breadth-first micro-batches, outputs of 1 byte per token. Rank 0 keeps its stage's 3 x 80
  // bytes and the 3 activations it sent (held to the end of the step, 8 bytes each); at its first backward the 3
  // gradients from rank 1 are received (posted once rank 1's backward steps were issued): 240 + 24 + 24.
  const Schedule schedule(2, 1, 3, 1, 2, true);
  const ActivationPeak first = activation_peak(two_layers(1), {1, 1}, schedule, 0, 8, 1);
  EXPECT_EQ(first.stages, (std::vector<size_t>{0}));
  EXPECT_EQ(first.bytes, 240 + 24 + 24);
  // Rank 1: the 3 activations it receives are posted together (16 bytes still waiting at its first forward, 80 + 16)
  // and each taken by its step, where the layer keeps it: its stage's 240 at the last forward, before it sends back.
  const ActivationPeak last = activation_peak(two_layers(1), {1, 1}, schedule, 1, 8, 1);
  EXPECT_EQ(last.stages, (std::vector<size_t>{1}));
  EXPECT_EQ(last.bytes, 240);
}

TEST(ActivationMemory, PiecesKeepTheirTokensAndTheWholeSequencePartOnce) {
  // 2 splits x 2 sequence-data ranks: pieces of 2 of the 8 tokens, each stage keeping 10 per piece token for its 2
  // splits and 5 per token of the whole sequence once: 2 x (2 x 20 + 40).
  const ActivationPeak peak =
      activation_peak(two_layers(0, 5), {1, 1}, Schedule(2, 1, 1, 2, 1, true), 0, 8, /*sequence_data_parallel=*/2);
  EXPECT_EQ(peak.piece_tokens, 2);
  EXPECT_EQ(peak.bytes, 2 * (2 * 20 + 40));
}

TEST(ActivationMemory, ADescriptionThatDoesNotFitTheStagesIsAnError) {
  try {
    activation_peak(two_layers(), {1, 2}, Schedule(2, 1, 1, 1, 1, true), 0, 8, 1);
    ADD_FAILURE() << "3 layers of stages described as 2";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("describes the activations of 2 layers, but the model's stages hold 3"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace fast_llm::engine
