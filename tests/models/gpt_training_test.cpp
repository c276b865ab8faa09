// `train gpt`'s estimate of activation memory per token (models/gpt/training.h), against the documented count worked
// out by hand for the quickstart shape (examples/quickstart.yaml: hidden 256, 4 blocks of 8 heads / 4 head groups of
// 32, gated MLP of 704, fp32) with a byte vocabulary of 258, and how it moves with the settings it depends on.
#include <gtest/gtest.h>

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

int64_t estimate(const std::vector<std::string>& overrides = {}) {
  return activation_bytes_per_token(testing::load_config<GPTTrainerConfig>(kQuickstartModel, "", overrides));
}

TEST(GptTraining, ActivationBytesPerTokenFollowTheDocumentedCount) {
  // Kept per block: 4 x 256 + 2 x 8 x 32 + 2 x 4 x 32 + 2 x 704 + 704 = 3904 values of 4 bytes, and 8 + 2 statistics
  // of 4 bytes: 15,656 bytes; 4 blocks: 62,624. The last block's output: 1,024. Working: the larger of the head
  // (4 x (3 x 256 + 258) = 4,104) and a block's backward (15,616). The micro-batch: 24, rotary tables: 2 x 32 x 4.
  EXPECT_EQ(estimate(), 62624 + 1024 + 15616 + 24 + 256);
  // bf16 halves the values, not the fp32 statistics: 4 x (3904 x 2 + 40) + 512 + 7808 + 24 + 256.
  EXPECT_EQ(estimate({"model.distributed.compute_dtype=bf16"}), 4 * (3904 * 2 + 40) + 512 + 7808 + 24 + 256);
  // Recomputing the MLP activation keeps 704 values less per block (3200), recomputing all of it also the first
  // projection's 1408 (1792); a block's backward still needs the MLP's gradients, 4 x (4 x 256 + 1408 + 704) = 12,544.
  EXPECT_EQ(estimate({"model.base_model.decoder.block.mlp.recompute_level=activation"}),
            4 * (4 * 3200 + 40) + 1024 + 4 * 3200 + 24 + 256);
  EXPECT_EQ(estimate({"model.base_model.decoder.block.mlp.recompute_level=full"}),
            4 * (4 * 1792 + 40) + 1024 + 12544 + 24 + 256);
  // A large vocabulary makes the head's logits the working peak; splitting the cross-entropy divides them.
  const int64_t large = estimate({"model.base_model.embeddings.vocab_size=65536"});
  EXPECT_EQ(large, 62624 + 1024 + 4 * (3 * 256 + 65536) + 24 + 256);
  EXPECT_EQ(estimate({"model.base_model.embeddings.vocab_size=65536", "model.base_model.head.cross_entropy_splits=4"}),
            62624 + 1024 + 4 * (3 * 256 + 16384) + 24 + 256);
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

}  // namespace
}  // namespace fast_llm::models::gpt
