// Tests of the CPU reference cross_entropy_forward_backward (kernels/cpu/cross_entropy.cpp): hand-computed losses and
// gradients; losses against a formula written here and gradients against central finite differences of it in fp64
// for every combination of z-loss, logits_scale_factor and softcap; masking; in place == out of place; 16-bit and
// fp32 logits against fp64; errors.
#include "fast_llm/kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Options {
  bool z_loss = false;
  double label_weight = 1.0;
  double z_loss_weight = 0.0;
  double logits_scale_factor = 1.0;
  std::optional<double> softcap = std::nullopt;
};

std::string describe(const Options& options) {
  return fmt::format("z_loss={} scale={} softcap={}", options.z_loss, options.logits_scale_factor,
                     options.softcap ? std::to_string(*options.softcap) : std::string("none"));
}

// ---------------------------------------------------------------------------------------------------------------------
// The losses in double, straight from the definitions.

struct Losses {
  double label = 0, z = 0;
};

Losses naive_losses(const std::vector<double>& logits, const std::vector<int64_t>& labels, int64_t vocab,
                    const Options& options) {
  Losses losses;
  for (size_t token = 0; token < labels.size(); ++token) {
    if (labels[token] < 0) continue;
    std::vector<double> z(static_cast<size_t>(vocab));
    for (int64_t column = 0; column < vocab; ++column) {
      z[size_t(column)] = logits[token * size_t(vocab) + size_t(column)] * options.logits_scale_factor;
      if (options.softcap) z[size_t(column)] = *options.softcap * std::tanh(z[size_t(column)] / *options.softcap);
    }
    double sum = 0;
    for (double value : z) sum += std::exp(value);
    const double logsumexp = std::log(sum);
    losses.label += logsumexp - z[size_t(labels[token])];
    losses.z += logsumexp * logsumexp;
  }
  return losses;
}

// ---------------------------------------------------------------------------------------------------------------------
// Calls of the op (on the CPU: its contract, then the reference variant).

struct Result {
  double label_loss = 0, z_loss = 0;
};

// Runs the kernel with loss sums starting at `initial`; writes the gradient into `grad_logits` unless it is null.
Result run(const Tensor& logits, const std::vector<int64_t>& labels, Tensor* grad_logits, const Options& options,
           DType sum_dtype = DType::float64, double initial = 0.0) {
  Tensor label_loss_sum = filled(Shape{1}, sum_dtype, initial);
  Tensor z_loss_sum = filled(Shape{1}, sum_dtype, initial);
  const Tensor labels_values = labels_tensor(labels);
  cross_entropy_forward_backward({.logits = logits,
                                  .labels = labels_values,
                                  .label_loss_sum = label_loss_sum,
                                  .z_loss_sum = options.z_loss ? &z_loss_sum : nullptr,
                                  .grad_logits = grad_logits,
                                  .label_weight = options.label_weight,
                                  .z_loss_weight = options.z_loss_weight,
                                  .logits_scale_factor = options.logits_scale_factor,
                                  .softcap = options.softcap});
  return {label_loss_sum.item_as_double(std::vector<int64_t>{0}), z_loss_sum.item_as_double(std::vector<int64_t>{0})};
}

// ---------------------------------------------------------------------------------------------------------------------
// Hand-computed

TEST(CrossEntropyReference, HandChecked) {
  // Row 0: z = (0, ln 2, ln 5), label 1: softmax (1/8, 2/8, 5/8), lse = ln 8, loss = ln 8 - ln 2 = ln 4,
  //        grad = softmax - onehot = (1/8, -3/4, 5/8).
  // Row 1: z = (0, 0, 0), label 0: loss = ln 3, grad = (-2/3, 1/3, 1/3).
  // Row 2: masked.
  const std::vector<int64_t> labels{1, 0, -100};
  for (DType dtype : {DType::float64, DType::float32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor logits = make_tensor({0, std::log(2.0), std::log(5.0), 0, 0, 0, 9, 9, 9}, Shape{3, 3}, dtype);
    Tensor grad = filled(Shape{3, 3}, dtype, kNaN);
    const double tolerance = dtype_tolerance(dtype);
    // The sums are added to: they start at 1.
    const Result result = run(logits, labels, &grad, Options{}, DType::float64, /*initial=*/1.0);
    EXPECT_NEAR(result.label_loss, 1 + std::log(4.0) + std::log(3.0), tolerance);
    expect_near(grad, {1.0 / 8, -3.0 / 4, 5.0 / 8, -2.0 / 3, 1.0 / 3, 1.0 / 3, 0, 0, 0}, tolerance, 0, "grad");

    // With a z-loss (weight 0.5) and label weight 2: z-loss = ln^2 8 + ln^2 3, and its gradient 2 * 0.5 * lse * softmax
    // adds ln 8 * (1/8, 2/8, 5/8) and ln 3 * (1/3, 1/3, 1/3).
    const Options options{.z_loss = true, .label_weight = 2.0, .z_loss_weight = 0.5};
    const Result with_z = run(logits, labels, &grad, options);
    EXPECT_NEAR(with_z.label_loss, std::log(4.0) + std::log(3.0), tolerance);
    EXPECT_NEAR(with_z.z_loss, std::pow(std::log(8.0), 2) + std::pow(std::log(3.0), 2), tolerance);
    const double l8 = std::log(8.0), l3 = std::log(3.0);
    expect_near(grad,
                {2.0 / 8 + l8 / 8, -3.0 / 2 + l8 * 2 / 8, 10.0 / 8 + l8 * 5 / 8, -4.0 / 3 + l3 / 3, 2.0 / 3 + l3 / 3,
                 2.0 / 3 + l3 / 3, 0, 0, 0},
                tolerance, tolerance, "grad with z-loss");
  }
}

TEST(CrossEntropyReference, ScaleAndSoftcapHandChecked) {
  // logits (2, 0), scale 0.5: z = (1, 0). Softcap 1: z = (tanh 1, 0). label 0.
  const Tensor logits = make_tensor({2, 0}, Shape{1, 2}, DType::float64);
  Tensor grad = filled(Shape{1, 2}, DType::float64, kNaN);
  const double t = std::tanh(1.0);
  const Result result = run(logits, {0}, &grad, Options{.logits_scale_factor = 0.5, .softcap = 1.0});
  // loss = log(e^t + 1) - t;  dloss/dz_0 = sigmoid(t) - 1, dz_0/dx_0 = 0.5 (1 - t^2);  dloss/dz_1 = 1 - sigmoid(t)
  // and dz_1/dx_1 = 0.5 (tanh'(0) = 1).
  const double sigmoid = 1 / (1 + std::exp(-t));
  EXPECT_NEAR(result.label_loss, std::log(std::exp(t) + 1) - t, 1e-15);
  expect_near(grad, {(sigmoid - 1) * 0.5 * (1 - t * t), (1 - sigmoid) * 0.5}, 1e-15, 1e-14, "grad");
}

// ---------------------------------------------------------------------------------------------------------------------
// Against the formula and finite differences

std::vector<Options> all_options() {
  std::vector<Options> options;
  for (bool z_loss : {false, true})
    for (double scale : {1.0, 0.6})
      for (std::optional<double> softcap : {std::optional<double>(), std::optional<double>(2.0)})
        options.push_back(Options{.z_loss = z_loss,
                                  .label_weight = 0.37,
                                  .z_loss_weight = z_loss ? 0.11 : 0.0,
                                  .logits_scale_factor = scale,
                                  .softcap = softcap});
  return options;
}

TEST(CrossEntropyReference, MatchesFormulaAndFiniteDifferences) {
  // 6 tokens (one masked) over 7 logits in [-3, 3], large enough for the softcap to bend them.
  const int64_t tokens = 6, vocab = 7;
  const std::vector<int64_t> labels{3, 0, -100, 6, 2, 3};
  for (const Options& options : all_options()) {
    SCOPED_TRACE(describe(options));
    const Tensor logits = random_tensor(Shape{tokens, vocab}, DType::float64, 101, -3, 3);
    const Losses expected = naive_losses(values_of(logits), labels, vocab, options);
    Tensor grad = filled(Shape{tokens, vocab}, DType::float64, kNaN);
    const Result result = run(logits, labels, &grad, options);
    EXPECT_NEAR(result.label_loss, expected.label, 1e-13);
    if (options.z_loss) {
      EXPECT_NEAR(result.z_loss, expected.z, 1e-12);
    }
    const auto objective = [&] {
      const Losses losses = naive_losses(values_of(logits), labels, vocab, options);
      return options.label_weight * losses.label + (options.z_loss ? options.z_loss_weight * losses.z : 0.0);
    };
    expect_near(grad, finite_difference_gradient(logits, objective), 1e-9, 1e-7, "grad");
  }
}

TEST(CrossEntropyReference, ForwardOnlyGivesTheSameLosses) {
  const std::vector<int64_t> labels{1, 4, -100};
  const Options options = all_options().back();
  const Tensor logits = random_tensor(Shape{3, 5}, DType::float32, 111, -3, 3);
  Tensor grad = Tensor::empty(Shape{3, 5}, DType::float32);
  const Result with_grad = run(logits, labels, &grad, options);
  const Result without_grad = run(logits, labels, nullptr, options);
  EXPECT_EQ(with_grad.label_loss, without_grad.label_loss);
  EXPECT_EQ(with_grad.z_loss, without_grad.z_loss);
  EXPECT_GT(without_grad.label_loss, 0);
  EXPECT_GT(without_grad.z_loss, 0);
}

// ---------------------------------------------------------------------------------------------------------------------
// Masking, in place

TEST(CrossEntropyReference, MaskedTokensContributeNothing) {
  // Tokens 0 and 2 are masked: the losses are those of tokens 1 and 3 alone, and their gradient rows are written 0.
  const int64_t vocab = 5;
  const Options options = all_options().back();
  const Tensor logits = random_tensor(Shape{4, vocab}, DType::float64, 121, -3, 3);
  Tensor grad = filled(Shape{4, vocab}, DType::float64, kNaN);
  const Result result = run(logits, {-100, 2, -1, 0}, &grad, options);

  const std::vector<double> all = values_of(logits);
  std::vector<double> unmasked(all.begin() + vocab, all.begin() + 2 * vocab);
  unmasked.insert(unmasked.end(), all.begin() + 3 * vocab, all.end());
  const Tensor unmasked_logits = make_tensor(unmasked, Shape{2, vocab}, DType::float64);
  Tensor unmasked_grad = Tensor::empty(Shape{2, vocab}, DType::float64);
  const Result unmasked_result = run(unmasked_logits, {2, 0}, &unmasked_grad, options);
  EXPECT_NEAR(result.label_loss, unmasked_result.label_loss, 1e-14);
  EXPECT_NEAR(result.z_loss, unmasked_result.z_loss, 1e-14);

  const std::vector<double> grad_values = values_of(grad), unmasked_grad_values = values_of(unmasked_grad);
  for (int64_t column = 0; column < vocab; ++column) {
    EXPECT_EQ(grad_values[size_t(column)], 0.0);
    EXPECT_EQ(grad_values[size_t(2 * vocab + column)], 0.0);
    EXPECT_EQ(grad_values[size_t(vocab + column)], unmasked_grad_values[size_t(column)]);
    EXPECT_EQ(grad_values[size_t(3 * vocab + column)], unmasked_grad_values[size_t(vocab + column)]);
  }
}

TEST(CrossEntropyReference, InPlaceEqualsOutOfPlace) {
  const std::vector<int64_t> labels{0, 8, -100, 3};
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float64}) {
    for (const Options& options : all_options()) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dtype), describe(options)));
      const Tensor logits = random_tensor(Shape{4, 9}, dtype, 131, -3, 3);
      Tensor out_of_place = Tensor::empty(Shape{4, 9}, dtype);
      const Result expected = run(logits, labels, &out_of_place, options);
      Tensor in_place = converted(logits, dtype);
      const Result result = run(in_place, labels, &in_place, options);
      EXPECT_EQ(result.label_loss, expected.label_loss);
      EXPECT_EQ(result.z_loss, expected.z_loss);
      expect_near(in_place, values_of(out_of_place), 0, 0, "grad");
    }
  }
}

TEST(CrossEntropyReference, StridedLogitsAndGradient) {
  // Logits and gradient as column slices of wider buffers (a vocabulary chunk).
  const std::vector<int64_t> labels{2, -100, 0};
  const Options options = all_options()[5];
  const Tensor wide = random_tensor(Shape{3, 10}, DType::float64, 141, -3, 3);
  const Tensor logits = wide.slice(1, 2, 7);
  ASSERT_FALSE(logits.is_contiguous());
  const Tensor grad_buffer = filled(Shape{3, 10}, DType::float64, 5);
  Tensor grad = grad_buffer.slice(1, 3, 8);
  const Result result = run(logits, labels, &grad, options);
  const Tensor contiguous = converted(logits, DType::float64);
  Tensor contiguous_grad = Tensor::empty(Shape{3, 5}, DType::float64);
  const Result expected = run(contiguous, labels, &contiguous_grad, options);
  EXPECT_EQ(result.label_loss, expected.label_loss);
  expect_near(grad, values_of(contiguous_grad), 0, 0, "grad");
  EXPECT_EQ(grad_buffer.item_as_double(std::vector<int64_t>{1, 2}), 5.0);  // outside the view
  EXPECT_EQ(grad_buffer.item_as_double(std::vector<int64_t>{1, 8}), 5.0);
}

// ---------------------------------------------------------------------------------------------------------------------
// Precision

TEST(CrossEntropyReference, LowPrecisionMatchesFloat64) {
  // 16-bit and fp32 logits against the formula in fp64 on the same (rounded) values: losses to fp32 accuracy (the
  // math is fp32), gradients to the rounding of the dtype they are stored in.
  const int64_t tokens = 5, vocab = 11;
  const std::vector<int64_t> labels{3, 10, -100, 0, 7};
  for (DType dtype : kLowPrecisionDTypes) {
    for (const Options& options : all_options()) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dtype), describe(options)));
      const Tensor logits = random_tensor(Shape{tokens, vocab}, dtype, 151, -4, 4);
      Tensor grad = Tensor::empty(Shape{tokens, vocab}, dtype);
      const Result result = run(logits, labels, &grad, options, DType::float32);
      const Tensor exact = converted(logits, DType::float64);
      const Losses expected = naive_losses(values_of(exact), labels, vocab, options);
      EXPECT_NEAR(result.label_loss, expected.label, 1e-5 * std::abs(expected.label));
      if (options.z_loss) {
        EXPECT_NEAR(result.z_loss, expected.z, 1e-5 * std::abs(expected.z));
      }
      const auto objective = [&] {
        const Losses losses = naive_losses(values_of(exact), labels, vocab, options);
        return options.label_weight * losses.label + options.z_loss_weight * losses.z;
      };
      const double tolerance = dtype_tolerance(dtype);
      expect_near(grad, finite_difference_gradient(exact, objective), tolerance * 0.5, tolerance, "grad");
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Errors

TEST(CrossEntropyReference, Errors) {
  const Tensor logits = random_tensor(Shape{2, 5}, DType::float32, 161);
  Tensor loss_sum = filled(Shape{1}, DType::float32, 0);
  const auto call = [&](const Tensor& logits_tensor, const Tensor& labels, Tensor* z_loss_sum, double z_loss_weight,
                        std::optional<double> softcap) {
    cross_entropy_forward_backward({.logits = logits_tensor,
                                    .labels = labels,
                                    .label_loss_sum = loss_sum,
                                    .z_loss_sum = z_loss_sum,
                                    .grad_logits = nullptr,
                                    .z_loss_weight = z_loss_weight,
                                    .softcap = softcap});
  };
  const Tensor good_labels = labels_tensor({1, -100});
  expect_error([&] { call(logits, labels_tensor({1, 5}), nullptr, 0, {}); },
               "[cross_entropy_forward_backward] label 5 of token 1 is outside the vocabulary of 5 logits");
  expect_error([&] { call(logits, good_labels, nullptr, 0.1, {}); }, "z_loss_weight is 0.1 but no z_loss_sum is given");
  expect_error([&] { call(logits, good_labels, nullptr, 0, 0.0); }, "softcap is 0, expected a positive number");
  expect_error([&] { call(logits.flatten(), good_labels, nullptr, 0, {}); },
               "logits has shape (10), expected (tokens, vocab)");
  expect_error([&] { call(logits, labels_tensor({1, 2, 3}), nullptr, 0, {}); },
               "labels has shape (3), expected (2)");
  Tensor wide_sum = filled(Shape{2}, DType::float32, 0);
  expect_error([&] { call(logits, good_labels, &wide_sum, 0.1, {}); }, "z_loss_sum has shape (2), expected (1)");
  // Nothing was added by the failed calls.
  EXPECT_EQ(loss_sum.item_as_double(std::vector<int64_t>{0}), 0.0);
}

TEST(CrossEntropyReference, DtypeErrors) {
  const Tensor logits = random_tensor(Shape{2, 5}, DType::float32, 171);
  Tensor loss_sum = filled(Shape{1}, DType::float32, 0);
  Tensor bf16_sum = filled(Shape{1}, DType::bfloat16, 0);
  Tensor bf16_grad = Tensor::empty(Shape{2, 5}, DType::bfloat16);
  const Tensor labels64 = labels_tensor({1, 2});
  const Tensor labels32 = make_tensor({1, 2}, Shape{2}, DType::int32);
  const auto call = [&](const Tensor& labels, Tensor& sum, Tensor* grad) {
    cross_entropy_forward_backward(
        {.logits = logits, .labels = labels, .label_loss_sum = sum, .z_loss_sum = nullptr, .grad_logits = grad});
  };
  call(labels64, loss_sum, nullptr);
  expect_error([&] { call(labels32, loss_sum, nullptr); },
               "[cross_entropy_forward_backward] labels has dtype int32; supported: int64");
  expect_error([&] { call(labels64, bf16_sum, nullptr); },
               "[cross_entropy_forward_backward] label_loss_sum has dtype bfloat16; supported: float32, float64");
  expect_error([&] { call(labels64, loss_sum, &bf16_grad); },
               "[cross_entropy_forward_backward] grad_logits has dtype bfloat16, logits has float32; they must match");
}

}  // namespace
}  // namespace fast_llm::kernels
