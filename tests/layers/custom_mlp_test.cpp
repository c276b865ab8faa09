// A new MLP type is its own files plus one registration line: this file declares a test-only MLP (`test_diagonal`: a
// learned scale per channel, y = x * w), registers its config with FLM_REGISTER_CONFIG and its layer with
// FLM_REGISTER_SUBLAYER, and nothing in src/ names it. Selected by `type:` in a decoder block's YAML, it is built by the
// block, declares its parameter under the block's name, and runs forward and backward inside the block (against the
// formula, and against finite differences).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/block/decoder_block.h"
#include "fast_llm/layers/common/parameter_settings.h"
#include "layer_test_util.h"

namespace fast_llm::layers {
namespace {

using namespace testing;

struct DiagonalMlpConfig : MlpBaseConfig {
  double initial_scale = 1.0;
  void visit(config::Visitor& v) override {
    MlpBaseConfig::visit(v);
    v(initial_scale, "initial_scale", "Initial value of every channel's scale.", config::Hint::architecture);
  }
};
FLM_REGISTER_CONFIG(MlpBaseConfig, DiagonalMlpConfig, "test_diagonal");

// y[t, c] = x[t, c] * w[c], on contiguous fp64 CPU tensors (plain loops: a test layer, not a kernel).
class DiagonalMlp : public MlpBase {
 public:
  DiagonalMlp(const DiagonalMlpConfig& config, const SublayerArguments& arguments)
      : MlpBase(arguments.name),
        hidden_size_(arguments.hidden_size),
        weight_(declare("weight", Shape{arguments.hidden_size}, Initialization::fill(config.initial_scale),
                        /*weight_decay=*/false, combine_lr_scales(arguments.lr_scale, config.lr_scale))) {}

  Tensor forward(LayerContext& context, const Tensor& input) override {
    return saved_.keep(context, [&](Tensor* saved) {
      if (saved != nullptr) *saved = input;
      Tensor output = Tensor::empty(input.shape(), DType::float64);
      const double* x = contiguous_data(input);
      const double* w = weight_.weight.data_as<double>();
      double* y = output.data_as<double>();
      for (int64_t i = 0; i < input.numel(); ++i) y[i] = x[i] * w[i % hidden_size_];
      return output;
    });
  }

  Tensor backward(LayerContext& context, const Tensor& grad_output) override {
    const Tensor input = saved_.take(context.batch.index, name());
    Tensor grad_input = Tensor::empty(input.shape(), DType::float64);
    const double* x = contiguous_data(input);
    const double* g = contiguous_data(grad_output);
    const double* w = weight_.weight.data_as<double>();
    double* grad_x = grad_input.data_as<double>();
    double* grad_w = weight_.grad.data_as<double>();
    for (int64_t i = 0; i < input.numel(); ++i) {
      grad_x[i] = g[i] * w[i % hidden_size_];
      grad_w[i % hidden_size_] += g[i] * x[i];
    }
    return grad_input;
  }

  int64_t matmul_weight_count() const override { return 0; }

 private:
  static const double* contiguous_data(const Tensor& tensor) {
    FLM_ASSERT(tensor.is_contiguous(), "the test MLP reads contiguous tensors");
    return tensor.data_as<double>();
  }

  int64_t hidden_size_;
  Parameter& weight_;
  SavedPerMicroBatch<Tensor> saved_;  // the input
};
FLM_REGISTER_SUBLAYER(MlpBase, DiagonalMlp, DiagonalMlpConfig, "test_diagonal");

constexpr int64_t kHidden = 8;
constexpr double kEpsilon = 1e-5;

DecoderBlockConfig block_config(double dropout) {
  return load_config<DecoderBlockConfig>(
      "{mixer: {heads: 4, head_groups: 2, head_size: 2, add_linear_biases: false, rotary: {type: default}}, "
      "mlp: {type: test_diagonal, initial_scale: 0.5}, normalization: {type: rms_norm, epsilon: " +
      std::to_string(kEpsilon) + "}, dropout: " + std::to_string(dropout) + "}");
}

TEST(CustomMlp, BuiltByTheBlockFromItsType) {
  DecoderBlockConfig config = block_config(0.0);
  DecoderBlock block("decoder.1", config, kHidden, 2.0);
  ASSERT_NE(dynamic_cast<DiagonalMlp*>(&block.mlp()), nullptr);
  EXPECT_EQ(parameter_names(block),
            (std::vector<std::string>{"decoder.1.norm_1.weight", "decoder.1.mixer.query.weight",
                                      "decoder.1.mixer.key_value.weight", "decoder.1.mixer.dense.weight",
                                      "decoder.1.norm_2.weight", "decoder.1.mlp.weight"}));
  const ParameterMeta& scale = find_parameter(block, "decoder.1.mlp.weight")->meta;
  EXPECT_EQ(scale.shape, Shape{kHidden});
  EXPECT_EQ(scale.initialization.value, 0.5);
  EXPECT_EQ(scale.lr_scale, 2.0);
  // query 8x8, key_value (keys and values) 8x8, dense 8x8: the test MLP has no matmul.
  EXPECT_EQ(block.matmul_weight_count(), 3 * 64);
}

// The block output is h + rms_norm(h) * g * w, where h (the residual stream after the mixer) is the block's output
// with the MLP's scales set to zero.
TEST(CustomMlp, ForwardAddsTheScaledNormalizedResidual) {
  DecoderBlockConfig config = block_config(0.0);
  DecoderBlock block("block", config, kHidden, 1.0);
  bind_parameters(block, 3);
  BatchData data = make_batch({4, 6}, 10, 4);
  Tensor input = random_tensor(Shape{10, kHidden}, 5);
  LayerContext context = make_context(data.batch, /*training=*/false);
  const std::vector<double> output = values_of(block.forward(context, input));

  Parameter* scale = find_parameter(block, "block.mlp.weight");
  const std::vector<double> scales = values_of(scale->weight);
  const std::vector<double> norm_weight = values_of(find_parameter(block, "block.norm_2.weight")->weight);
  scale->weight = zeros(Shape{kHidden});
  const std::vector<double> hidden = values_of(block.forward(context, input));
  const size_t width = kHidden;
  for (size_t row = 0; row < 10; ++row) {
    const double* h = &hidden[row * width];
    double square_sum = 0;
    for (size_t c = 0; c < width; ++c) square_sum += h[c] * h[c];
    const double rms = std::sqrt(square_sum / double(width) + kEpsilon);
    for (size_t c = 0; c < width; ++c)
      EXPECT_NEAR(output[row * width + c], h[c] + h[c] / rms * norm_weight[c] * scales[c], 1e-12);
  }
}

TEST(CustomMlp, BackwardMatchesFiniteDifferences) {
  DecoderBlockConfig config = block_config(0.25);
  DecoderBlock block("decoder.0", config, kHidden, 1.0);
  bind_parameters(block, 21);
  BatchData data = make_batch({5, 7}, 10, 22, /*index=*/2);
  Tensor input = random_tensor(Shape{12, kHidden}, 23);
  std::vector<double> output_weights = random_values(12 * kHidden, 24);

  LayerContext training = make_context(data.batch, true, nullptr, 1.0, /*dropout_seed=*/7);
  block.forward(training, input);
  Tensor grad_input = block.backward(training, tensor_from(output_weights, Shape{12, kHidden}));
  auto objective = [&] { return dot(block.forward(training, input), output_weights); };
  expect_gradient(objective, input, grad_input, "input");
  for (Parameter* parameter : block.parameters())
    expect_gradient(objective, parameter->weight, parameter->grad, parameter->meta.name, 24);
}

}  // namespace
}  // namespace fast_llm::layers
