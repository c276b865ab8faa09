// The start-up memory estimate per parallel layout (engine/schedule/activation_memory.h) against what each rank really
// allocates, at a size where activations dominate: the quickstart shape (examples/quickstart.yaml: 4 blocks, hidden
// 256, 8 heads in 4 groups of 32, gated MLP of 704, vocabulary 4096, fp32) with 512-token micro-batches, as one
// process (4 breadth-first micro-batches) and as tp2, stp2, pp2 with 4 breadth-first micro-batches, sdp2 with 2 splits
// and dp2 x stp2. The trainer warns on a rank whose peak allocation goes beyond its estimate (the allocator's
// alignment aside), and the harness fails a run with that warning (layout_comparison.h), so each run checks every
// rank's estimate is an upper bound; each rank of a model-parallel layout logs its own estimate, its layout in the
// name. CPU only: on a GPU the kernels' scratch buffers come on top.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "layout_comparison.h"

namespace fast_llm {
namespace {

inline constexpr const char* kQuickstartShape = R"(
training: {train_iters: 2, logs: {interval: 1}}
data:
  datasets: {training: {type: random}}
  micro_batch_size: 512
optimizer: {learning_rate: {base: 1.0e-3}}
model:
  base_model:
    embeddings: {vocab_size: 4096}
    decoder:
      block:
        mixer: {type: attention, rotary: {type: default, theta: 10000}, heads: 8, head_groups: 4, head_size: 32,
                add_linear_biases: false}
        mlp: {intermediate_size: 704, gated: true, add_linear_biases: false}
        normalization: {type: rms_norm}
      num_blocks: 4
    head: {normalization: {type: rms_norm}}
    hidden_size: 256
  distributed: {compute_dtype: fp32, use_cuda: false, timeout: 60}
)";

class MemoryEstimateTest : public testing::LayoutComparisonTest {
 protected:
  const char* config() const override { return kQuickstartShape; }
  void SetUp() override {
    LayoutComparisonTest::SetUp();
    if (!mode_.within_estimate) GTEST_SKIP() << "the estimate bounds what a rank allocates on the CPU only";
  }
  void expect_logged(const std::string& line) const {
    EXPECT_NE(output_.find(line), std::string::npos) << line << "\n" << output_;
  }
};

TEST_F(MemoryEstimateTest, EachRanksEstimateBoundsWhatItAllocates) {
  train("single_bf4", 0, {"schedule.breadth_first_micro_batches=4"});
  expect_logged("activations of stages 0-5, 4 micro-batches of 512 tokens in flight: ");
  train("tp2", 2, {"model.distributed.tensor_parallel=2"});
  expect_logged("[rank 1] Estimated host memory: ");
  expect_logged("activations of stages 0-5, 1 micro-batch of 512 tokens in flight, tensor rank 1 of 2: ");
  train("stp2", 2, {"model.distributed.tensor_parallel=2", "model.distributed.sequence_tensor_parallel=true"});
  expect_logged("tensor rank 0 of 2 (sequence-tensor parallel): ");
  train("pp2_bf4", 2, {"model.distributed.pipeline_parallel=2", "schedule.breadth_first_micro_batches=4"});
  expect_logged("activations of stages 0, 2, 4 on pipeline rank 0 of 2, 4 micro-batches of 512 tokens in flight: ");
  expect_logged("activations of stages 1, 3, 5 on pipeline rank 1 of 2, 4 micro-batches of 512 tokens in flight: ");
  train("sdp2_ms2", 2, {"model.distributed.sequence_data_parallel=2", "schedule.micro_batch_splits=2"});
  expect_logged("1 micro-batch of 512 tokens in flight (pieces of 128 tokens), sequence-data rank 1 of 2: ");
  // Two data-parallel replicas: the first one's ranks log their estimates, the second's do not.
  train("dp2_stp2", 4, {"model.distributed.tensor_parallel=2", "model.distributed.sequence_tensor_parallel=true"});
  expect_logged("[rank 1] Estimated host memory: ");
  EXPECT_EQ(output_.find("[rank 2] Estimated host memory: "), std::string::npos) << output_;
  EXPECT_EQ(output_.find("[rank 3] Estimated host memory: "), std::string::npos) << output_;
}

}  // namespace
}  // namespace fast_llm
