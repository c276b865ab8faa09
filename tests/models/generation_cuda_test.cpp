// Generation on the GPU against the CPU (label `cuda`; skips without a GPU): the same random fp32 model, copied to the
// device, greedy-decodes the same tokens for a ragged batch of prompts with the key/value cache (the CUDA prefill
// attention, attention_decode's CUDA variant, the gathered rotary tables); in bf16 the first tokens mostly agree and
// the completions run to their length. Head size 64, grouped-query attention, as the Llama models it serves.
#include <gtest/gtest.h>

#include "fast_llm/core/device.h"
#include "fast_llm/models/gpt/generator.h"
#include "fast_llm/models/gpt/model.h"
#include "layers/layer_test_util.h"
#include "models/gpt_cuda_test_util.h"

namespace fast_llm::models::gpt {
namespace {

GPTBaseModelConfig cuda_model_config() {
  GPTBaseModelConfig config;
  config.load(YAML::Load(R"(
hidden_size: 256
embeddings: {vocab_size: 97}
head: {normalization: {type: rms_norm}}
decoder:
  num_blocks: 2
  block:
    mixer: {heads: 8, head_groups: 2, head_size: 64, add_linear_biases: false, rotary: {type: default, theta: 10000}}
    mlp: {intermediate_size: 512, gated: true, add_linear_biases: false}
    normalization: {type: rms_norm}
)"),
              "model.base_model");
  config.validate("model.base_model");
  return config;
}

// The same weights on `device` in `dtype` (from fp64 values drawn once).
void bind_on(GPTModel& model, Device device, DType dtype) {
  uint64_t seed = 31;
  for (layers::Layer* layer : model.layers()) {
    layers::testing::bind_parameters(*layer, seed++, DType::float64);
    for (layers::Parameter* parameter : layer->parameters()) {
      Tensor converted = Tensor::empty(parameter->weight.shape(), dtype);
      const double* source = parameter->weight.data_as<double>();
      for (int64_t index = 0; index < converted.numel(); ++index) {
        if (dtype == DType::float32)
          converted.data_as<float>()[index] = float(source[index]);
        else
          converted.data_as<bfloat16>()[index] = to_bfloat16(float(source[index]));
      }
      parameter->weight = device.is_cpu() ? converted : converted.to(device);
      parameter->grad = Tensor();
    }
  }
}

const std::vector<std::vector<int64_t>> kPrompts{{3, 17, 40, 2, 9, 60, 61}, {44}, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                                                                  16, 17, 18, 19, 20, 21, 22, 23, 24}};

TEST(GenerationCuda, GreedyTokensEqualTheCpus) {
  REQUIRE_GPU_TRAINING();
  const Device gpu = Device::cuda(0);
  const GenerationSettings settings{.max_new_tokens = 24, .eos_token_ids = {}, .sampling = {}};
  GPTModel cpu_model(cuda_model_config());
  bind_on(cpu_model, Device::cpu(), DType::float32);
  const auto expected = Generator(cpu_model, Device::cpu(), DType::float32).generate(kPrompts, settings);
  GPTModel gpu_model(cuda_model_config());
  bind_on(gpu_model, gpu, DType::float32);
  Generator generator(gpu_model, gpu, DType::float32);
  EXPECT_EQ(generator.generate(kPrompts, settings), expected);
  // One prompt at a time (batch 1: the decode kernel with a single sequence).
  for (size_t index = 0; index < kPrompts.size(); ++index)
    EXPECT_EQ(generator.generate({kPrompts[index]}, settings, index)[0], expected[index]) << "prompt " << index;

  GPTModel bf16_model(cuda_model_config());
  bind_on(bf16_model, gpu, DType::bfloat16);
  const auto low = Generator(bf16_model, gpu, DType::bfloat16).generate(kPrompts, settings);
  // bf16 rounding may flip a near tie, so most (not all) first tokens must agree.
  size_t agree = 0;
  for (size_t index = 0; index < kPrompts.size(); ++index) {
    ASSERT_EQ(low[index].size(), expected[index].size());
    agree += low[index][0] == expected[index][0];
  }
  EXPECT_GE(agree, kPrompts.size() - 1) << "bf16 first tokens agree with fp32 for " << agree << " prompts";
}

}  // namespace
}  // namespace fast_llm::models::gpt
