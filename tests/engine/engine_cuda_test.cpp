// The engine on a GPU against the same engine on the CPU: initialisation (host fill + copy, then the cast to bf16
// weights) is bit for bit the same, Adam steps agree to fp32 precision and leave bf16 weights that are bit for bit the
// cast of the GPU's master weights (Adam writes them in its own pass), non-finite gradients skip the step (the bf16
// weights untouched too), and host batches reach the device intact (page-locked buffers, upload stream). Steps queued
// without host reads decide clipping and skipping on the device as the CPU does. Each case skips itself without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "engine/engine_test_util.h"
#include "fast_llm/core/half.h"
#include "fast_llm/engine/optimizer/optimizer.h"
#include "fast_llm/engine/training/batch_uploader.h"
#include "fast_llm/engine/training/step_records.h"
#include "fast_llm/engine/training/trainer.h"

namespace fast_llm::engine {
namespace {

using testing::load_config;

#define SKIP_WITHOUT_GPU() \
  if (cuda_devices().empty()) GTEST_SKIP() << "no CUDA device"

std::vector<uint8_t> host_bytes(const Tensor& tensor) {
  Tensor host = tensor.to(Device::cpu());
  std::vector<uint8_t> bytes(host.nbytes());
  std::memcpy(bytes.data(), host.data(), bytes.size());
  return bytes;
}

struct DeviceSetup {
  explicit DeviceSetup(Device device)
      : optimizer_config(load_config<OptimizerConfig>(
            "{learning_rate: {base: 0.01}, weight_decay: 0.1, gradient_norm_clipping: 0.3}", "optimizer")),
        multi_stage(model, multi_stage_config, distributed, device),
        optimizer(optimizer_config, multi_stage) {
    multi_stage.initialize_weights();
  }

  // Gradient element i of every stage's (fp32) gradient buffer: a fixed pattern, or `bad` at element 5 of stage 0.
  void set_gradients(int step, double bad = 0.0) {
    for (auto& stage : multi_stage.stages()) {
      Tensor& grads = stage->grad_buffer();
      Tensor host = Tensor::empty(grads.shape(), DType::float32);
      float* values = host.data_as<float>();
      for (int64_t i = 0; i < host.numel(); ++i)
        values[i] = float(0.001 * double((i * 7 + step * 3) % 23 - 11) * double(stage->index() + 1));
      if (bad != 0.0 && stage->index() == 0) values[5] = float(bad);
      grads.copy_bytes_from(host);
    }
  }

  DistributedConfig distributed = testing::cpu_distributed(/*seed=*/21, "bfloat16", "float32");
  MultiStageConfig multi_stage_config = testing::multi_stage_config("{layers_per_stage: 2}");
  OptimizerConfig optimizer_config;
  testing::TestModel model{300, 32, 3};
  MultiStage multi_stage;
  Optimizer optimizer;
};

TEST(EngineCuda, InitialisationMatchesTheCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  DeviceSetup gpu(Device::cuda(0)), cpu(Device::cpu());
  ASSERT_EQ(gpu.multi_stage.stages().size(), cpu.multi_stage.stages().size());
  for (size_t s = 0; s < gpu.multi_stage.stages().size(); ++s) {
    EXPECT_EQ(host_bytes(gpu.multi_stage.stages()[s]->weight_shard()),
              host_bytes(cpu.multi_stage.stages()[s]->weight_shard()));
    EXPECT_EQ(host_bytes(gpu.multi_stage.stages()[s]->weight_buffer()),
              host_bytes(cpu.multi_stage.stages()[s]->weight_buffer()));
  }
}

TEST(EngineCuda, AdamStepsAgreeWithTheCpu) {
  SKIP_WITHOUT_GPU();
  DeviceSetup gpu(Device::cuda(0)), cpu(Device::cpu());
  for (int step = 1; step <= 3; ++step) {
    gpu.set_gradients(step);
    cpu.set_gradients(step);
    gpu.optimizer.step();
    cpu.optimizer.step();
    OptimizerStepResult gpu_result = gpu.optimizer.last_step_result(), cpu_result = cpu.optimizer.last_step_result();
    ASSERT_TRUE(gpu_result.successful);
    EXPECT_NEAR(gpu_result.grad_norm, cpu_result.grad_norm, 1e-5 * cpu_result.grad_norm);
    EXPECT_LT(gpu_result.clip_coefficient, 1.0);
    for (size_t s = 0; s < cpu.multi_stage.stages().size(); ++s) {
      Tensor gpu_master = gpu.multi_stage.stages()[s]->weight_shard().to(Device::cpu());
      Tensor cpu_master = cpu.multi_stage.stages()[s]->weight_shard();
      const float* a = gpu_master.data_as<float>();
      const float* b = cpu_master.data_as<float>();
      for (int64_t i = 0; i < cpu_master.numel(); ++i)
        ASSERT_NEAR(a[i], b[i], 1e-6 + 1e-5 * std::fabs(b[i])) << "stage " << s << " element " << i;
      Tensor gpu_weights = gpu.multi_stage.stages()[s]->weight_buffer().to(Device::cpu());
      const bfloat16* weights = gpu_weights.data_as<bfloat16>();
      for (int64_t i = 0; i < gpu_master.numel(); ++i)
        ASSERT_EQ(weights[i].bits, to_bfloat16(a[i]).bits) << "stage " << s << " bf16 weight " << i;
    }
  }
}

TEST(EngineCuda, NonFiniteGradientSkipsTheStep) {
  SKIP_WITHOUT_GPU();
  DeviceSetup gpu(Device::cuda(0));
  const auto before = host_bytes(gpu.multi_stage.stages()[0]->weight_shard());
  const auto weights_before = host_bytes(gpu.multi_stage.stages()[0]->weight_buffer());
  gpu.set_gradients(1, std::numeric_limits<double>::infinity());
  gpu.optimizer.step();
  EXPECT_FALSE(gpu.optimizer.last_step_result().successful);
  EXPECT_EQ(gpu.optimizer.optimizer_step(), 0);
  EXPECT_EQ(host_bytes(gpu.multi_stage.stages()[0]->weight_shard()), before);
  EXPECT_EQ(host_bytes(gpu.multi_stage.stages()[0]->weight_buffer()), weights_before);
  gpu.set_gradients(1);
  gpu.optimizer.step();
  EXPECT_TRUE(gpu.optimizer.last_step_result().successful);
  EXPECT_NE(host_bytes(gpu.multi_stage.stages()[0]->weight_shard()), before);
  EXPECT_NE(host_bytes(gpu.multi_stage.stages()[0]->weight_buffer()), weights_before);
}

// Steps queued back to back without a host read in between, one of them non-finite: the device alone skips it, and the
// step records read afterwards agree with the same steps on the CPU.
TEST(EngineCuda, QueuedStepsDecideOnTheDeviceAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  DeviceSetup gpu(Device::cuda(0)), cpu(Device::cpu());
  StepRecords gpu_records(Device::cuda(0), 8), cpu_records(Device::cpu(), 8);
  for (int step = 1; step <= 4; ++step) {
    const double bad = step == 2 ? std::numeric_limits<double>::quiet_NaN() : 0.0;
    gpu.set_gradients(step, bad);
    cpu.set_gradients(step, bad);
    gpu.optimizer.step();
    cpu.optimizer.step();
    layers::LossSums gpu_losses, cpu_losses;
    gpu_records.record(gpu.optimizer.step_state(), gpu_losses, 1, false, Stream{});
    cpu_records.record(cpu.optimizer.step_state(), cpu_losses, 1, false, Stream{});
  }
  const auto gpu_steps = gpu_records.read(Stream{}), cpu_steps = cpu_records.read(Stream{});
  ASSERT_EQ(gpu_steps.size(), 4u);
  ASSERT_EQ(cpu_steps.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(gpu_steps[i].update.successful, i != 1) << i;
    EXPECT_EQ(cpu_steps[i].update.successful, i != 1) << i;
    EXPECT_EQ(gpu_steps[i].update.learning_rate, cpu_steps[i].update.learning_rate) << i;
    if (i != 1) {
      EXPECT_NEAR(gpu_steps[i].update.grad_norm, cpu_steps[i].update.grad_norm, 1e-5 * cpu_steps[i].update.grad_norm);
    }
  }
  EXPECT_EQ(gpu.optimizer.optimizer_step(), 3);
  for (size_t s = 0; s < cpu.multi_stage.stages().size(); ++s) {
    Tensor gpu_master = gpu.multi_stage.stages()[s]->weight_shard().to(Device::cpu());
    const float* a = gpu_master.data_as<float>();
    const float* b = cpu.multi_stage.stages()[s]->weight_shard().data_as<float>();
    for (int64_t i = 0; i < gpu_master.numel(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-6 + 1e-5 * std::fabs(b[i])) << "stage " << s << " element " << i;
  }
}

TEST(EngineCuda, MicroBatchesReachTheDevice) {
  SKIP_WITHOUT_GPU();
  auto batch = std::make_shared<data::Batch>();
  batch->micro_batch_size = 6;
  batch->tokens = {5, 6, 7, 8, 9, 10};
  batch->labels = {6, 7, -100, 9, 10, 11};
  batch->label_counts = {5};
  batch->positions = {0, 1, 0, 1, 2, 3};
  batch->cu_seqlens = {0, 2, 6};
  batch->max_seqlen = 4;
  batch->lengths = {2, 4};
  // One slot: the second upload reuses the first one's page-locked buffer once its copy is done.
  BatchUploader uploader(Device::cuda(0), compute_stream(Device::cuda(0)), 1);
  layers::MicroBatch micro_batch = uploader.upload(batch);
  layers::MicroBatch second = uploader.upload(batch);
  EXPECT_TRUE(micro_batch.tokens.device().is_cuda());
  EXPECT_EQ(micro_batch.max_seqlen, 4);
  EXPECT_EQ(micro_batch.sequence_lengths, (std::vector<int64_t>{2, 4}));
  auto as_vector = [](const Tensor& tensor) {
    Tensor host = tensor.to(Device::cpu());
    std::vector<int64_t> values;
    for (int64_t i = 0; i < host.numel(); ++i)
      values.push_back(host.dtype() == DType::int64 ? host.data_as<int64_t>()[i] : host.data_as<int32_t>()[i]);
    return values;
  };
  EXPECT_EQ(as_vector(micro_batch.tokens), batch->tokens);
  EXPECT_EQ(as_vector(micro_batch.labels), batch->labels);
  EXPECT_EQ(as_vector(micro_batch.positions), batch->positions);
  EXPECT_EQ(as_vector(micro_batch.cu_seqlens), (std::vector<int64_t>{0, 2, 6}));
  EXPECT_EQ(micro_batch.cu_seqlens.dtype(), DType::int32);
  EXPECT_EQ(as_vector(second.labels), batch->labels);
  EXPECT_EQ(as_vector(second.cu_seqlens), (std::vector<int64_t>{0, 2, 6}));
  // The rows that carry a loss, packed with the rest (layers/language_model/loss_rows.h).
  EXPECT_EQ(as_vector(micro_batch.loss_rows), (std::vector<int64_t>{0, 1, 3, 4, 5}));
  EXPECT_EQ(as_vector(micro_batch.loss_labels), (std::vector<int64_t>{6, 7, 9, 10, 11}));
  EXPECT_EQ(as_vector(micro_batch.loss_row_positions), (std::vector<int64_t>{0, 1, 5, 2, 3, 4}));
  EXPECT_EQ(as_vector(second.loss_rows), (std::vector<int64_t>{0, 1, 3, 4, 5}));
  EXPECT_FALSE(micro_batch.attention_rows.has_value());

  // A dpo batch whose pair shares its first row (BOS, 1): the computed rows and attention's maps, packed with the
  // rest, then a batch without shared rows in the same slot.
  auto pair = std::make_shared<data::Batch>(*batch);
  pair->tokens = {1, 5, 7, 1, 5, 8};
  pair->labels = {5, 7, -100, 5, 8, -100};
  pair->positions = {0, 1, 2, 0, 1, 2};
  pair->cu_seqlens = {0, 3, 6};
  pair->lengths = {3, 3};
  pair->max_seqlen = 3;
  pair->preference_pairs = {{.chosen_begin = 1, .chosen_end = 2, .rejected_begin = 4, .rejected_end = 5}};
  BatchUploader sharing(Device::cuda(0), compute_stream(Device::cuda(0)), 1, layers::LossRowRule::preference_spans,
                        /*share_prompt_rows=*/true);
  const layers::MicroBatch shared = sharing.upload(pair);
  const layers::MicroBatch unshared = sharing.upload(batch);
  EXPECT_EQ(as_vector(shared.tokens), (std::vector<int64_t>{1, 5, 7, 5, 8}));
  EXPECT_EQ(as_vector(shared.loss_rows), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(as_vector(shared.cu_seqlens), (std::vector<int64_t>{0, 3, 6}));
  ASSERT_TRUE(shared.attention_rows.has_value());
  EXPECT_EQ(as_vector(shared.attention_rows->sources), (std::vector<int64_t>{0, 1, 2, 0, 3, 4}));
  EXPECT_EQ(as_vector(shared.attention_rows->positions), (std::vector<int64_t>{0, 1, 2, 5, 3, 4}));
  EXPECT_EQ(as_vector(shared.attention_rows->kept), (std::vector<int64_t>{0, 1, 2, 4, 5}));
  EXPECT_EQ(as_vector(shared.attention_rows->repeating), (std::vector<int64_t>{3, 6, 6, 6, 6}));
  EXPECT_FALSE(unshared.attention_rows.has_value());
  EXPECT_EQ(as_vector(unshared.tokens), batch->tokens);
}

}  // namespace
}  // namespace fast_llm::engine
