// `train gpt`'s activation memory (models/gpt/training.h) as the memory check counts it (the peak of a rank's steps of
// the schedule, engine/schedule/activation_memory.h), against the documented count worked out by hand for the
// quickstart shape (examples/quickstart.yaml: hidden 256, 4 blocks of 8 heads / 4 head groups of 32, gated MLP of
// 704, fp32) with a byte vocabulary of 258: how it moves with the settings it depends on, and with the parallel
// layouts (tensor, sequence-tensor, pipeline, sequence-data) against one process.
#include <gtest/gtest.h>

#include "fast_llm/engine/multi_stage/multi_stage.h"
#include "fast_llm/models/gpt/training.h"
#include "models/config_test_util.h"

namespace fast_llm::models::gpt {
namespace {

constexpr const char* kQuickstartModel = R"(
model:
  base_model:
    embeddings: {vocab_size: 258}
    decoder:
      block:
        mixer: {type: attention, heads: 8, head_groups: 4, head_size: 32}
        mlp: {intermediate_size: 704, gated: true}
        normalization: {type: rms_norm}
      num_blocks: 4
    hidden_size: 256
  distributed: {compute_dtype: fp32}
)";

// The peak of pipeline rank `pipeline_rank`'s training steps for micro-batches of `tokens` tokens, as the trainer
// computes it; the default layers_per_stage (1) gives 6 stages: embeddings, 4 blocks, head.
engine::ActivationPeak peak(const std::vector<std::string>& overrides, int64_t tokens = 1, int pipeline_rank = 0,
                            std::string* description = nullptr) {
  const auto config = testing::load_config<GPTTrainerConfig>(kQuickstartModel, "", overrides);
  const engine::ModelActivations activations = model_activations(config);
  std::vector<size_t> sizes;
  for (const auto& stage : engine::split_into_stages(std::vector<layers::Layer*>(activations.layers.size(), nullptr),
                                                     config.model.multi_stage.layers_per_stage))
    sizes.push_back(stage.size());
  const engine::DistributedConfig& distributed = config.model.distributed;
  const engine::Schedule steps(sizes.size(), config.schedule.depth_first_micro_batches,
                               config.schedule.breadth_first_micro_batches, config.schedule.micro_batch_splits,
                               distributed.pipeline_parallel, /*training=*/true);
  const engine::ActivationPeak result =
      engine::activation_peak(activations, sizes, steps, pipeline_rank, tokens, distributed.sequence_data_parallel);
  if (description) *description = engine::describe_activation_peak(result, distributed, tokens);
  return result;
}

// Bytes per token of a one-token micro-batch.
int64_t estimate(const std::vector<std::string>& overrides = {}) { return peak(overrides).bytes; }

TEST(GptTraining, ActivationBytesPerTokenFollowTheDocumentedCount) {
  // Kept per block: 4 x 256 + 2 x 8 x 32 + 2 x 4 x 32 + 2 x 704 + 704 = 3904 values of 4 bytes, and 8 + 2 statistics
  // of 4 bytes: 15,656 bytes; 4 blocks: 62,624. The peak is the larger of the head's step (its input and the gradient
  // of its norm's output, 2 x 1,024, and a statistic: 2,052 kept; working 4 x (2 x 256 + 258) = 3,080) and the last
  // block's backward (the gradient the head sent back, 1,024, and the block's backward, 15,616), on top of the
  // blocks'. The micro-batch: 24, rotary tables: 2 x 32 x 4.
  EXPECT_EQ(estimate(), 62624 + 1024 + 15616 + 24 + 256);
  // bf16 halves the values, not the fp32 statistics: 4 x (3904 x 2 + 40) + 512 + 7808 + 24 + 256.
  EXPECT_EQ(estimate({"model.distributed.compute_dtype=bf16"}), 4 * (3904 * 2 + 40) + 512 + 7808 + 24 + 256);
  // Recomputing the MLP activation keeps 704 values less per block (3200), recomputing all of it also the first
  // projection's 1408 (1792); a block's backward still needs the MLP's gradients, 4 x (4 x 256 + 1408 + 704) = 12,544.
  EXPECT_EQ(estimate({"model.base_model.decoder.block.mlp.recompute_level=activation"}),
            4 * (4 * 3200 + 40) + 1024 + 4 * 3200 + 24 + 256);
  EXPECT_EQ(estimate({"model.base_model.decoder.block.mlp.recompute_level=full"}),
            4 * (4 * 1792 + 40) + 1024 + 12544 + 24 + 256);
  // A large vocabulary makes the head's step the peak; splitting the cross-entropy divides its logits.
  const int64_t large = estimate({"model.base_model.embeddings.vocab_size=65536"});
  EXPECT_EQ(large, 62624 + 2052 + 4 * (2 * 256 + 65536) + 24 + 256);
  EXPECT_EQ(estimate({"model.base_model.embeddings.vocab_size=65536", "model.base_model.head.cross_entropy_splits=4"}),
            62624 + 2052 + 4 * (2 * 256 + 16384) + 24 + 256);
}

// The quickstart shape with a mixture of experts (8 experts, top 2, shared 0) in place of the dense MLP.
TEST(GptTraining, ActivationBytesPerTokenCountTheExperts) {
  const std::vector<std::string> moe = {"model.base_model.decoder.block.mlp.type=moe",
                                        "model.base_model.decoder.block.mlp.experts=8",
                                        "model.base_model.decoder.block.mlp.experts_per_token=2",
                                        "model.base_model.decoder.block.mlp.add_linear_biases=false"};
  // Kept per block: 4 x 256 + 512 + 256 = 1792 values besides the MLP, and per slot (2) the permuted input (256), the
  // first projection (1408) and the activation (704): 1792 + 2 x 2368 = 6528 values of 4 bytes; 10 statistics of 4
  // bytes; routing: 8 logits and 2 scores fp32, 2 experts and 2 rows int32 = 56 bytes. 4 x 26,208 = 104,832. Working:
  // a block's backward, 4 x (4 x 256 + 2 x (2 x 256 + 2 x 1408 + 2 x 704)) = 41,984.
  EXPECT_EQ(estimate(moe), 104832 + 1024 + 41984 + 24 + 256);
  // Recomputing the activation and the permuted input drops 2 x (704 + 256) values per block.
  std::vector<std::string> recompute = moe;
  recompute.push_back("model.base_model.decoder.block.mlp.recompute_level=activation_and_input");
  EXPECT_EQ(estimate(recompute), 104832 - 4 * 4 * 2 * (704 + 256) + 1024 + 41984 + 24 + 256);
}

// Per token with the vocabulary of 65,536 (one process: the head's step, 62,624 + 2,052 + 264,192, and 280 for the
// micro-batch and the rotary tables: 329,148), split over two tensor ranks. Each rank keeps per block its 4 heads'
// query and output (256 values), its 2 head groups' keys and values (128) and half the MLP (704 + 352), 1,440 values,
// beside the 1,024 whole values of the residual stream and normalised inputs, and 8 + 16 bytes of statistics: 9,880
// bytes; the head's logits are half the vocabulary: 4 x (512 + 32,768) = 133,120.
TEST(GptTraining, TensorParallelRanksKeepTheirHeadsAndColumns) {
  const std::vector<std::string> large = {"model.base_model.embeddings.vocab_size=65536"};
  EXPECT_EQ(estimate(large), 62624 + 2052 + 264192 + 280);
  std::vector<std::string> tp2 = large;
  tp2.insert(tp2.end(), {"model.distributed.world_size=2", "model.distributed.local_world_size=2",
                         "model.distributed.rank=1",
                         "model.distributed.tensor_parallel=2"});
  std::string description;
  EXPECT_EQ(peak(tp2, 1, 0, &description).bytes, 4 * 9880 + 2052 + 133120 + 280);  // 174,972: 0.53 of one process
  EXPECT_EQ(description, "activations of stages 0-5, 1 micro-batch of 1 tokens in flight, tensor rank 1 of 2");
  // Sequence-tensor parallelism also halves the residual stream, the normalised inputs and the norm statistics
  // between the blocks: 5,760 + 2,048 + 4 + 16 = 7,828 per block (the head gathers the sequence: unchanged).
  tp2.push_back("model.distributed.sequence_tensor_parallel=true");
  EXPECT_EQ(peak(tp2, 1, 0, &description).bytes, 4 * 7828 + 2052 + 133120 + 280);  // 166,764
  EXPECT_EQ(description, "activations of stages 0-5, 1 micro-batch of 1 tokens in flight, tensor rank 1 of 2 "
                         "(sequence-tensor parallel)");
}

// Two pipeline ranks with 4 breadth-first micro-batches: rank 0 runs stages 0, 2, 4 (embeddings, blocks 1 and 3),
// rank 1 stages 1, 3, 5 (blocks 0 and 2, head). Per token of a micro-batch, besides 4 x 24 for the micro-batches and
// 256 for the rotary tables (352):
//   - rank 0 peaks at the first backward of block 3: its blocks keep 2 x 4 micro-batches (8 x 15,656 = 125,248), the
//     12 activations it sent forward are waited for at the end of the step (12 x 1,024), the head's 4 gradients are
//     received (4 x 1,024), and the block's backward works (15,616): 157,248;
//   - rank 1 peaks at the head's last forward (and first backward): its blocks keep 125,248, the head 4 x 2,052, it
//     sent 8 x 1,024 and the logits take 264,192: 405,840. Only the rank running the head counts them.
// One process with 4 breadth-first micro-batches peaks at block 3's first backward: 16 x 15,656 + the head's 4
// gradients 4,096 + 15,616 = 270,208 with the vocabulary of 258, so pipeline rank 0 keeps 0.58 of it; with the
// vocabulary of 65,536 at the head's step, 16 x 15,656 + 4 x 2,052 + 264,192 = 522,896, rank 1 0.78 of it.
TEST(GptTraining, PipelineRanksKeepTheirStagesForTheMicroBatchesInFlight) {
  const std::vector<std::string> bf4 = {"schedule.breadth_first_micro_batches=4"};
  EXPECT_EQ(estimate(bf4), 16 * 15656 + 4096 + 15616 + 352);
  EXPECT_EQ(estimate({"schedule.breadth_first_micro_batches=4", "model.base_model.embeddings.vocab_size=65536"}),
            16 * 15656 + 4 * 2052 + 264192 + 352);
  for (int rank : {0, 1}) {
    std::vector<std::string> pp2 = bf4;
    pp2.insert(pp2.end(), {"model.base_model.embeddings.vocab_size=65536", "model.distributed.world_size=2",
                           "model.distributed.rank=" + std::to_string(rank), "model.distributed.pipeline_parallel=2"});
    std::string description;
    const engine::ActivationPeak result = peak(pp2, 64, rank, &description);
    EXPECT_EQ(result.micro_batches_in_flight, 4);
    EXPECT_EQ(result.bytes, 64 * (rank == 0 ? 157248 + 352 : 405840 + 352)) << rank;
    EXPECT_EQ(description, rank == 0 ? "activations of stages 0, 2, 4 on pipeline rank 0 of 2, 4 micro-batches of 64 "
                                       "tokens in flight"
                                     : "activations of stages 1, 3, 5 on pipeline rank 1 of 2, 4 micro-batches of 64 "
                                       "tokens in flight");
  }
}

// Two sequence-data ranks: each runs pieces of T / 2 tokens, but attention keeps the keys and values of the whole
// sequence (gathered: 256 values per token of the micro-batch), and a block's backward holds their gradient carry and
// the gradients of the rows a piece attended to (2 x 256). Per block and token of a piece: 14,632 bytes kept (15,656
// without the keys and values) and a backward of 4 x (2,624 + 1,024) = 14,592. The peak is block 3's backward: per
// token of the micro-batch, 4 x (14,632 / 2 + 1,024) kept, the head's gradient 1,024 / 2, the backward 14,592 / 2 and
// the gradient carries 2,048, and 280: 43,496, 0.55 of one process's 79,544.
TEST(GptTraining, SequenceDataRanksKeepTheirPiecesAndTheWholeKeysAndValues) {
  std::string description;
  const engine::ActivationPeak result =
      peak({"model.distributed.world_size=2", "model.distributed.rank=1", "model.distributed.sequence_data_parallel=2"},
           64, 0, &description);
  EXPECT_EQ(result.piece_tokens, 32);
  EXPECT_EQ(result.bytes, 64 * 43496);
  EXPECT_EQ(estimate(), 79544);
  EXPECT_EQ(description, "activations of stages 0-5, 1 micro-batch of 64 tokens in flight (pieces of 32 tokens), "
                         "sequence-data rank 1 of 2");
}

}  // namespace
}  // namespace fast_llm::models::gpt
