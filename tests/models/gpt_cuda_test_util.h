// Shared by the GPU training tests: a tiny GPT run (2 blocks, packed random documents, two micro-batches per step,
// logs every step) and the check that a GPU can train it.
#pragma once

#include <gtest/gtest.h>

#include "fast_llm/core/device.h"
#include "fast_llm/kernels/attention.h"

namespace fast_llm::testing {

inline constexpr const char* kTinyGptRun = R"(
model:
  base_model:
    hidden_size: 64
    embeddings: {vocab_size: 256}
    decoder:
      num_blocks: 2
      block:
        mixer: {heads: 4, head_groups: 2, head_size: 16, add_linear_biases: false, rotary: {type: default}}
        mlp: {intermediate_size: 128, gated: true, add_linear_biases: false}
        normalization: {type: rms_norm}
    head: {normalization: {type: rms_norm}, cross_entropy_splits: 2}
  distributed: {seed: 777}
data: {datasets: {training: {type: random}}, micro_batch_size: 128}
optimizer: {learning_rate: {base: 0.003, warmup_iterations: 2}, gradient_norm_clipping: 0.5}
schedule: {depth_first_micro_batches: 2}
training: {train_iters: 6, logs: {interval: 1}, num_workers: 1}
)";

inline bool cuda_attention_registered() {
  for (const auto& variant : kernels::OpRegistry<kernels::AttentionForward>::instance().variants())
    if (variant.info.device == DeviceType::cuda) return true;
  return false;
}

}  // namespace fast_llm::testing

#define REQUIRE_GPU_TRAINING()                                        \
  if (cuda_devices().empty()) GTEST_SKIP() << "no CUDA device visible"; \
  if (!::fast_llm::testing::cuda_attention_registered()) GTEST_SKIP() << "no CUDA attention kernel registered"
