// The mixture-of-experts layers on a CUDA device against the same step on the CPU: a 2-block GPT model whose MLPs are
// `moe` (8 experts top-2 with the z-loss; 16 routed experts top-6 plus a shared one; Sinkhorn routing) or
// `hybrid_moe`, one forward and backward. fp32 on the GPU must match fp32 on the CPU closely (the language-model loss,
// the load-balancing and z losses, every parameter gradient). bf16 on the GPU is compared with bf16 on the CPU, where a
// logit that moves by a rounding can send a token to another expert: there the losses (2e-2), the relative error of
// all the gradients together (0.15) and a loose bound per parameter (0.3; a wrong row or expert gives errors near 1)
// are checked (bf16 against fp32, both on the CPU, differ by 2-11% per parameter on these models, 7-10% in all). The
// routed ops run the CUDA variants of kernels/cuda/moe.cu; the expert gemms are views of the permuted buffers.
// Without a GPU every case skips itself.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "fast_llm/core/device.h"
#include "fast_llm/kernels/attention.h"
#include "fast_llm/models/gpt/model.h"
#include "layer_test_util.h"

namespace fast_llm::layers {
namespace {

using namespace testing;

#define REQUIRE_GPU() \
  if (cuda_devices().empty()) GTEST_SKIP() << "no CUDA device visible"

struct StepResult {
  std::map<std::string, double> losses;  // every loss sum of the step, by name
  std::vector<std::vector<double>> gradients;
  std::vector<std::string> names;
};

const std::vector<int64_t> kDocuments{23, 40, 9};
constexpr int64_t kVocab = 97;

StepResult moe_gpt_step(const std::string& mlp, Device device, DType dtype) {
  models::gpt::GPTModel model(load_config<models::gpt::GPTBaseModelConfig>(R"(
hidden_size: 64
embeddings: {vocab_size: 97}
head: {normalization: {type: rms_norm}}
decoder:
  num_blocks: 2
  block:
    mixer: {heads: 4, head_groups: 2, head_size: 16, rotary: {type: default, theta: 10000}}
    mlp: )" + mlp + R"(
    normalization: {type: rms_norm}
)"));
  uint64_t seed = 80;
  for (Layer* layer : model.layers()) bind_on(*layer, seed++, device, dtype);
  BatchData data = make_batch(kDocuments, kVocab, 81);
  MicroBatch batch = batch_on(data.batch, device);
  LossSums losses;
  LayerContext context = make_context(batch, true, &losses, 1.0 / 72.0, 0, dtype);
  context.device = device;
  std::vector<Layer*> layers = model.layers();
  Tensor activation;
  for (Layer* layer : layers) activation = layer->forward(context, activation);
  Tensor grad;
  for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) grad = (*layer)->backward(context, grad);
  synchronize_device(device);
  StepResult result;
  for (const auto& [name, sum] : losses.all()) result.losses[name] = sum.item();
  for (Layer* layer : layers)
    for (Parameter* parameter : layer->parameters()) {
      result.gradients.push_back(values_of(parameter->grad.to(Device::cpu())));
      result.names.push_back(parameter->meta.name);
    }
  return result;
}

double relative_error(const std::vector<double>& actual, const std::vector<double>& expected) {
  double difference = 0, norm = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    difference += (actual[i] - expected[i]) * (actual[i] - expected[i]);
    norm += expected[i] * expected[i];
  }
  return std::sqrt(difference / norm);
}

// Every loss within `loss_tolerance` (relative); each parameter's gradient within `gradient_tolerance`; all gradients
// together within `total_tolerance`.
void expect_close(const StepResult& actual, const StepResult& expected, double loss_tolerance,
                  double gradient_tolerance, double total_tolerance) {
  ASSERT_EQ(actual.losses.size(), expected.losses.size());
  for (const auto& [name, value] : expected.losses) {
    ASSERT_TRUE(actual.losses.contains(name)) << name;
    EXPECT_NEAR(actual.losses.at(name), value, loss_tolerance * std::abs(value)) << name;
  }
  ASSERT_EQ(actual.gradients.size(), expected.gradients.size());
  std::vector<double> all_actual, all_expected;
  for (size_t p = 0; p < expected.gradients.size(); ++p) {
    ASSERT_EQ(actual.gradients[p].size(), expected.gradients[p].size()) << expected.names[p];
    EXPECT_GT(max_abs(expected.gradients[p]), 0.0) << expected.names[p];
    EXPECT_LT(relative_error(actual.gradients[p], expected.gradients[p]), gradient_tolerance) << expected.names[p];
    all_actual.insert(all_actual.end(), actual.gradients[p].begin(), actual.gradients[p].end());
    all_expected.insert(all_expected.end(), expected.gradients[p].begin(), expected.gradients[p].end());
  }
  EXPECT_LT(relative_error(all_actual, all_expected), total_tolerance) << "all gradients";
}

const std::map<std::string, std::string> kMlps = {
    {"mixtral", "{type: moe, experts: 8, experts_per_token: 2, intermediate_size: 48, gated: true, "
                "add_linear_biases: false, z_loss_coefficient: 0.01}"},
    {"fine-grained", "{type: moe, experts: 17, shared_experts: 1, experts_per_token: 6, intermediate_size: 16, "
                     "gated: true, add_linear_biases: false, z_loss_coefficient: 0.001}"},
    {"sinkhorn", "{type: moe, experts: 8, experts_per_token: 2, routing: sinkhorn, intermediate_size: 32, gated: true, "
                 "add_linear_biases: false}"},
    {"hybrid", "{type: hybrid_moe, dense: {intermediate_size: 32, gated: true, add_linear_biases: false}, "
               "routed: {experts: 8, experts_per_token: 2, intermediate_size: 24, gated: true, "
               "add_linear_biases: false}}"},
};

bool attention_on_cuda() {
  for (const auto& variant : kernels::OpRegistry<kernels::AttentionForward>::instance().variants())
    if (variant.info.device == DeviceType::cuda) return true;
  return false;
}

TEST(MoeCudaLayers, GptModelFloat32MatchesCpu) {
  REQUIRE_GPU();
  if (!attention_on_cuda()) GTEST_SKIP() << "no CUDA attention kernel registered";
  for (const auto& [name, mlp] : kMlps) {
    SCOPED_TRACE(name);
    const StepResult reference = moe_gpt_step(mlp, Device::cpu(), DType::float32);
    EXPECT_TRUE(reference.losses.contains("load_balancing_loss") || name == "sinkhorn");
    expect_close(moe_gpt_step(mlp, Device::cuda(0), DType::float32), reference, 1e-5, 1e-4, 1e-4);
  }
}

TEST(MoeCudaLayers, GptModelBfloat16MatchesCpuBfloat16) {
  REQUIRE_GPU();
  if (!attention_on_cuda()) GTEST_SKIP() << "no CUDA attention kernel registered";
  for (const auto& [name, mlp] : kMlps) {
    SCOPED_TRACE(name);
    const StepResult reference = moe_gpt_step(mlp, Device::cpu(), DType::bfloat16);
    expect_close(moe_gpt_step(mlp, Device::cuda(0), DType::bfloat16), reference, 2e-2, 0.3, 0.15);
  }
}

}  // namespace
}  // namespace fast_llm::layers
