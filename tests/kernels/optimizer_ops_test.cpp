// Tests of the CPU reference adam_step and squared_norm (kernels/cpu/optimizer.cpp): Adam against a scalar AdamW
// written here (bias correction, decoupled weight decay, grad_scale) over one and several steps, a hand-checked first
// step, 16-bit and fp32 against fp64; the compute-dtype weights against a cast of the updated parameters (bit for bit,
// fp64 ones rounded once), left alone by a skipped step; squared_norm against a direct sum, accumulation, fp64
// accumulation, NaN / inf propagation; errors.
#include "fast_llm/kernels/optimizer_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "fast_llm/kernels/copy.h"
#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

struct Hyperparameters {
  double learning_rate = 1e-3;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;
  double grad_scale = 1.0;
};

// One AdamW step on one element, in double.
struct ScalarAdam {
  double parameter, exp_avg = 0, exp_avg_sq = 0;

  void step(double gradient, int64_t step, const Hyperparameters& h) {
    const double g = gradient * h.grad_scale;
    exp_avg = h.beta_1 * exp_avg + (1 - h.beta_1) * g;
    exp_avg_sq = h.beta_2 * exp_avg_sq + (1 - h.beta_2) * g * g;
    const double m_hat = exp_avg / (1 - std::pow(h.beta_1, double(step)));
    const double v_hat = exp_avg_sq / (1 - std::pow(h.beta_2, double(step)));
    parameter = parameter - h.learning_rate * h.weight_decay * parameter -
                h.learning_rate * m_hat / (std::sqrt(v_hat) + h.epsilon);
  }
};

struct State {
  Tensor parameters, exp_avg, exp_avg_sq;
};

void adam(State& state, const Tensor& gradients, int64_t step, const Hyperparameters& h,
          Tensor* compute_weights = nullptr, const Tensor* decision = nullptr) {
  adam_step({.parameters = state.parameters,
             .gradients = gradients,
             .exp_avg = state.exp_avg,
             .exp_avg_sq = state.exp_avg_sq,
             .learning_rate = h.learning_rate,
             .beta_1 = h.beta_1,
             .beta_2 = h.beta_2,
             .epsilon = h.epsilon,
             .weight_decay = h.weight_decay,
             .step = step,
             .grad_scale = h.grad_scale,
             .state = decision,
             .compute_weights = compute_weights});
}

// The bytes of a CPU tensor (contiguous).
std::vector<unsigned char> bytes_of(const Tensor& tensor) {
  const auto* data = static_cast<const unsigned char*>(tensor.data());
  return std::vector<unsigned char>(data, data + tensor.nbytes());
}

Tensor cast_to(const Tensor& source, DType dtype) {
  Tensor destination = Tensor::empty(source.shape(), dtype);
  run_reference<Cast>({.source = source, .destination = destination});
  return destination;
}

// ---------------------------------------------------------------------------------------------------------------------
// adam_step

TEST(AdamReference, FirstStepHandChecked) {
  // At step 1 without weight decay the bias-corrected moments are g and g^2: p -= lr g / (|g| + eps), i.e. lr sign(g)
  // for |g| >> eps, whatever the size of g.
  const Hyperparameters h{.learning_rate = 0.01, .epsilon = 1e-8};
  State state{make_tensor({1, 2, -3, 0}, Shape{4}, DType::float64), filled(Shape{4}, DType::float64, 0),
              filled(Shape{4}, DType::float64, 0)};
  const Tensor gradients = make_tensor({0.5, -100, 1e-3, 0}, Shape{4}, DType::float64);
  adam(state, gradients, 1, h);
  expect_near(state.parameters, {1 - 0.01 * 0.5 / (0.5 + 1e-8), 2 + 0.01 * 100 / (100 + 1e-8),
                                 -3 - 0.01 * 1e-3 / (1e-3 + 1e-8), 0},
              1e-15, 1e-15, "parameters");
  expect_near(state.exp_avg, {0.05, -10, 1e-4, 0}, 1e-15, 1e-14, "exp_avg");
  expect_near(state.exp_avg_sq, {0.00025, 10, 1e-9, 0}, 1e-18, 1e-14, "exp_avg_sq");
}

TEST(AdamReference, OneStepMatchesScalarFormula) {
  // Non-zero moments, weight decay, grad_scale and a late step (bias corrections away from 1 and 0).
  const Hyperparameters h{
      .learning_rate = 3e-3, .beta_1 = 0.8, .beta_2 = 0.95, .epsilon = 1e-6, .weight_decay = 0.1, .grad_scale = 0.25};
  const int64_t n = 37, step = 7;
  const std::vector<double> parameters = uniform_values(n, 201), gradients = uniform_values(n, 202, -4, 4);
  const std::vector<double> exp_avg = uniform_values(n, 203, -0.1, 0.1), exp_avg_sq = uniform_values(n, 204, 0, 0.05);
  State state{make_tensor(parameters, Shape{n}, DType::float64), make_tensor(exp_avg, Shape{n}, DType::float64),
              make_tensor(exp_avg_sq, Shape{n}, DType::float64)};
  adam(state, make_tensor(gradients, Shape{n}, DType::float64), step, h);
  std::vector<double> expected_parameters, expected_exp_avg, expected_exp_avg_sq;
  for (int64_t index = 0; index < n; ++index) {
    ScalarAdam scalar{parameters[size_t(index)], exp_avg[size_t(index)], exp_avg_sq[size_t(index)]};
    scalar.step(gradients[size_t(index)], step, h);
    expected_parameters.push_back(scalar.parameter);
    expected_exp_avg.push_back(scalar.exp_avg);
    expected_exp_avg_sq.push_back(scalar.exp_avg_sq);
  }
  expect_near(state.parameters, expected_parameters, 1e-15, 1e-14, "parameters");
  expect_near(state.exp_avg, expected_exp_avg, 1e-16, 1e-14, "exp_avg");
  expect_near(state.exp_avg_sq, expected_exp_avg_sq, 1e-18, 1e-14, "exp_avg_sq");
}

TEST(AdamReference, SeveralStepsMatchScalarFormula) {
  // Ten steps from zero moments with a new gradient each step. fp64 and fp32 follow the scalar run from start to end.
  // 16-bit states are rounded on every store, so there the scalar restarts each step from the stored state and one
  // step is compared: to two roundings of the dtype, well below the update (lr = 0.05), so a skipped or wrong step
  // fails.
  const Hyperparameters h{.learning_rate = 5e-2, .weight_decay = 0.05, .grad_scale = 0.5};
  const int64_t n = 64, steps = 10;
  for (DType dtype : {DType::float64, DType::float32, DType::bfloat16, DType::float16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const bool restart_each_step = dtype == DType::bfloat16 || dtype == DType::float16;
    const double unit_roundoff = dtype == DType::bfloat16 ? 0x1p-8 : 0x1p-11;
    const double rtol = dtype == DType::float64 ? 1e-14 : dtype == DType::float32 ? 1e-5 : 2 * unit_roundoff;
    const double atol = dtype == DType::float64 ? 1e-15 : 1e-7;
    const Tensor initial = random_tensor(Shape{n}, dtype, 211);
    State state{converted(initial, dtype), filled(Shape{n}, dtype, 0), filled(Shape{n}, dtype, 0)};
    std::vector<ScalarAdam> scalars;
    for (double value : values_of(initial)) scalars.push_back(ScalarAdam{value});
    for (int64_t step = 1; step <= steps; ++step) {
      SCOPED_TRACE(fmt::format("step {}", step));
      if (restart_each_step) {
        const std::vector<double> p = values_of(state.parameters), m = values_of(state.exp_avg),
                                  v = values_of(state.exp_avg_sq);
        for (int64_t index = 0; index < n; ++index)
          scalars[size_t(index)] = ScalarAdam{p[size_t(index)], m[size_t(index)], v[size_t(index)]};
      }
      const Tensor gradients = random_tensor(Shape{n}, dtype, 300 + uint64_t(step), -2, 2);
      const std::vector<double> gradient_values = values_of(gradients);
      adam(state, gradients, step, h);
      std::vector<double> expected_p, expected_m, expected_v;
      for (int64_t index = 0; index < n; ++index) {
        ScalarAdam& scalar = scalars[size_t(index)];
        scalar.step(gradient_values[size_t(index)], step, h);
        expected_p.push_back(scalar.parameter);
        expected_m.push_back(scalar.exp_avg);
        expected_v.push_back(scalar.exp_avg_sq);
      }
      expect_near(state.parameters, expected_p, atol, rtol, "parameters");
      expect_near(state.exp_avg, expected_m, atol, rtol, "exp_avg");
      expect_near(state.exp_avg_sq, expected_v, atol, rtol, "exp_avg_sq");
    }
    // The parameters moved by far more than the tolerance: the comparisons above could fail.
    double moved = 0;
    const std::vector<double> before = values_of(initial), after = values_of(state.parameters);
    for (size_t index = 0; index < before.size(); ++index)
      moved = std::max(moved, std::abs(after[index] - before[index]));
    EXPECT_GT(moved, 0.2);
  }
}

TEST(AdamReference, NonFiniteGradientPoisonsOnlyItsElement) {
  const Hyperparameters h;
  State state{make_tensor({1, 1, 1}, Shape{3}, DType::float32), filled(Shape{3}, DType::float32, 0),
              filled(Shape{3}, DType::float32, 0)};
  adam(state, make_tensor({0.5, std::numeric_limits<double>::quiet_NaN(), -0.5}, Shape{3}, DType::float32), 1, h);
  const std::vector<double> parameters = values_of(state.parameters);
  EXPECT_TRUE(std::isnan(parameters[1]));
  EXPECT_NEAR(parameters[0], 1 - h.learning_rate, 1e-6);
  EXPECT_NEAR(parameters[2], 1 + h.learning_rate, 1e-6);
}

TEST(AdamReference, ComputeWeightsAreTheCastOfTheUpdatedParameters) {
  // The same step twice, once writing compute-dtype weights (poisoned with NaN first): the update is unchanged, and the
  // weights are bit for bit a cast of the updated parameters.
  const Hyperparameters h{.learning_rate = 3e-2, .weight_decay = 0.1, .grad_scale = 0.5};
  const int64_t n = 257;
  for (DType dtype : {DType::float32, DType::float64, DType::bfloat16})
    for (DType weight_dtype : {DType::bfloat16, DType::float16, DType::float32}) {
      SCOPED_TRACE(fmt::format("{} -> {}", dtype_name(dtype), dtype_name(weight_dtype)));
      auto fresh_state = [&] {
        return State{random_tensor(Shape{n}, dtype, 401), random_tensor(Shape{n}, dtype, 402, -0.1, 0.1),
                     random_tensor(Shape{n}, dtype, 403, 1e-4, 1e-2)};
      };
      State fused = fresh_state(), separate = fresh_state();
      const Tensor gradients = random_tensor(Shape{n}, dtype, 404, -3, 3);
      Tensor compute_weights = filled(Shape{n}, weight_dtype, std::numeric_limits<double>::quiet_NaN());
      adam(fused, gradients, 5, h, &compute_weights);
      adam(separate, gradients, 5, h);
      EXPECT_EQ(bytes_of(fused.parameters), bytes_of(separate.parameters));
      EXPECT_EQ(bytes_of(fused.exp_avg), bytes_of(separate.exp_avg));
      EXPECT_EQ(bytes_of(fused.exp_avg_sq), bytes_of(separate.exp_avg_sq));
      EXPECT_EQ(bytes_of(compute_weights), bytes_of(cast_to(separate.parameters, weight_dtype)));
    }
}

TEST(AdamReference, ComputeWeightsRoundFloat64ParametersOnce) {
  // 1 + 2^-8 + 2^-40 lies just above the bf16 tie between 1 and 1 + 2^-7 (and the fp16 tie of 1 + 2^-11 + 2^-40
  // likewise): correctly rounded it goes up, through fp32 (which drops the 2^-40) it would tie to even, down to 1.
  // A rate of 0 leaves the parameters exactly as they are.
  const Hyperparameters h{.learning_rate = 0.0};
  for (const auto& [weight_dtype, value, expected] :
       std::vector<std::tuple<DType, double, double>>{{DType::bfloat16, 1 + 0x1p-8 + 0x1p-40, 1 + 0x1p-7},
                                                      {DType::float16, 1 + 0x1p-11 + 0x1p-40, 1 + 0x1p-10}}) {
    SCOPED_TRACE(dtype_name(weight_dtype));
    State state{make_tensor({value, -value}, Shape{2}, DType::float64), filled(Shape{2}, DType::float64, 0),
                filled(Shape{2}, DType::float64, 0)};
    Tensor compute_weights = filled(Shape{2}, weight_dtype, 0);
    adam(state, make_tensor({0.5, -0.5}, Shape{2}, DType::float64), 1, h, &compute_weights);
    EXPECT_EQ(values_of(state.parameters), (std::vector<double>{value, -value}));
    EXPECT_EQ(values_of(compute_weights), (std::vector<double>{expected, -expected}));
  }
}

TEST(AdamReference, SkippedStepLeavesComputeWeightsUnchanged) {
  // Compute weights that are not the cast of the parameters: a skipped step must not write them at all.
  Tensor decision = filled(Shape{optimizer_state::size}, DType::float64, 0);  // successful = 0
  const int64_t n = 33;
  State state{random_tensor(Shape{n}, DType::float32, 411), random_tensor(Shape{n}, DType::float32, 412, -0.1, 0.1),
              random_tensor(Shape{n}, DType::float32, 413, 1e-4, 1e-2)};
  const std::vector<unsigned char> parameters = bytes_of(state.parameters);
  Tensor compute_weights = random_tensor(Shape{n}, DType::bfloat16, 414);
  const std::vector<unsigned char> weights = bytes_of(compute_weights);
  adam(state, random_tensor(Shape{n}, DType::float32, 415), 1, Hyperparameters{}, &compute_weights, &decision);
  EXPECT_EQ(bytes_of(state.parameters), parameters);
  EXPECT_EQ(bytes_of(compute_weights), weights);

  // The same with the step going through: the weights move.
  decision.data_as<double>()[optimizer_state::successful] = 1.0;
  decision.data_as<double>()[optimizer_state::learning_rate] = 1e-2;
  decision.data_as<double>()[optimizer_state::grad_scale] = 1.0;
  decision.data_as<double>()[optimizer_state::bias_correction_1] = 0.1;
  decision.data_as<double>()[optimizer_state::bias_correction_2] = 0.001;
  adam(state, random_tensor(Shape{n}, DType::float32, 415), 1, Hyperparameters{}, &compute_weights, &decision);
  EXPECT_EQ(bytes_of(compute_weights), bytes_of(cast_to(state.parameters, DType::bfloat16)));
}

TEST(AdamReference, Errors) {
  State state{filled(Shape{4}, DType::float32, 1), filled(Shape{4}, DType::float32, 0),
              filled(Shape{4}, DType::float32, 0)};
  expect_error([&] { adam(state, filled(Shape{4}, DType::float32, 1), 0, Hyperparameters{}); },
               "[adam_step] step is 0, expected 1 or more");
  expect_error([&] { adam(state, filled(Shape{5}, DType::float32, 1), 1, Hyperparameters{}); },
               "[adam_step] gradients has shape (5), expected (4)");
  const Tensor matrix = filled(Shape{4, 2}, DType::float32, 1);
  State strided{matrix.select(1, 0), filled(Shape{4}, DType::float32, 0), filled(Shape{4}, DType::float32, 0)};
  expect_error([&] { adam(strided, filled(Shape{4}, DType::float32, 1), 1, Hyperparameters{}); },
               "[adam_step] parameters is not contiguous (shape (4), strides (2))");
  const Tensor bf16_gradients = filled(Shape{4}, DType::bfloat16, 1);
  expect_error(
      [&] {
        adam_step({.parameters = state.parameters,
                   .gradients = bf16_gradients,
                   .exp_avg = state.exp_avg,
                   .exp_avg_sq = state.exp_avg_sq});
      },
      "[adam_step] gradients has dtype bfloat16, parameters has float32; they must match");

  Tensor gradients = filled(Shape{4}, DType::float32, 1);
  Tensor wrong_size = filled(Shape{5}, DType::bfloat16, 0);
  expect_error([&] { adam(state, gradients, 1, Hyperparameters{}, &wrong_size); },
               "[adam_step] compute_weights has shape (5), expected (4)");
  Tensor strided_weights = filled(Shape{4, 2}, DType::bfloat16, 0).select(1, 0);
  expect_error([&] { adam(state, gradients, 1, Hyperparameters{}, &strided_weights); },
               "[adam_step] compute_weights is not contiguous (shape (4), strides (2))");
  Tensor integer_weights = Tensor::empty(Shape{4}, DType::int32);
  expect_error(
      [&] {
        adam_step({.parameters = state.parameters,
                   .gradients = gradients,
                   .exp_avg = state.exp_avg,
                   .exp_avg_sq = state.exp_avg_sq,
                   .compute_weights = &integer_weights});
      },
      "[adam_step] compute_weights has dtype int32; supported: float32, float64, bfloat16, float16");
}

// ---------------------------------------------------------------------------------------------------------------------
// squared_norm

double squared_norm_of(const Tensor& input, DType result_dtype = DType::float64, double initial = 0.0) {
  Tensor result = filled(Shape{1}, result_dtype, initial);
  squared_norm({.input = input, .result = result});
  return result.item_as_double(std::vector<int64_t>{0});
}

TEST(SquaredNormReference, HandChecked) {
  EXPECT_EQ(squared_norm_of(make_tensor({3, -4}, Shape{2}, DType::float32)), 25.0);
  EXPECT_EQ(squared_norm_of(make_tensor({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::bfloat16)), 91.0);
  // Added to the result, which may be fp32.
  EXPECT_EQ(squared_norm_of(make_tensor({3, -4}, Shape{2}, DType::float16), DType::float32, 0.5), 25.5);
}

TEST(SquaredNormReference, MatchesDirectSum) {
  // More elements than one block of the kernel, in every dtype; the direct sum is of the values as stored.
  for (DType dtype : {DType::float64, DType::float32, DType::bfloat16, DType::float16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor input = random_tensor(Shape{3, 20001}, dtype, 221, -3, 3);
    double expected = 0;
    for (double value : values_of(input)) expected += value * value;
    EXPECT_NEAR(squared_norm_of(input), expected, 1e-12 * expected);
    EXPECT_NEAR(squared_norm_of(input, DType::float32, 2.0), expected + 2.0, 1e-6 * expected);
  }
}

TEST(SquaredNormReference, AccumulatesInFloat64) {
  // (1e30)^2 overflows fp32 but not fp64; 1 + (1e-5)^2 keeps its 1e-10 only in fp64.
  EXPECT_EQ(squared_norm_of(make_tensor({1e30, 1e30}, Shape{2}, DType::float32)),
            2 * double(1e30f) * double(1e30f));
  const float tiny = 1e-5f;
  EXPECT_EQ(squared_norm_of(make_tensor({1.0, double(tiny)}, Shape{2}, DType::float32)),
            1.0 + double(tiny) * double(tiny));
}

TEST(SquaredNormReference, NonFiniteValuesReachTheResult) {
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16, DType::float64}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<double> values = uniform_values(40000, 231);
    values[12345] = std::numeric_limits<double>::quiet_NaN();
    EXPECT_TRUE(std::isnan(squared_norm_of(make_tensor(values, Shape{40000}, dtype))));
    values[12345] = -std::numeric_limits<double>::infinity();
    EXPECT_TRUE(std::isinf(squared_norm_of(make_tensor(values, Shape{40000}, dtype))));
    EXPECT_TRUE(std::isinf(squared_norm_of(make_tensor(values, Shape{40000}, dtype), DType::float32)));
  }
}

TEST(SquaredNormReference, Errors) {
  const Tensor matrix = filled(Shape{4, 2}, DType::float32, 1);
  expect_error([&] { squared_norm_of(matrix.transpose(0, 1)); },
               "[squared_norm] input is not contiguous (shape (2, 4), strides (1, 2))");
  Tensor wide = filled(Shape{2}, DType::float64, 0);
  expect_error([&] { squared_norm({.input = matrix, .result = wide}); },
               "[squared_norm] result has shape (2), expected (1)");
  Tensor bf16_result = filled(Shape{1}, DType::bfloat16, 0);
  expect_error([&] { squared_norm({.input = matrix, .result = bf16_result}); },
               "[squared_norm] result has dtype bfloat16; supported: float32, float64");
}

// ---------------------------------------------------------------------------------------------------------------------
// optimizer_decision

TEST(OptimizerDecisionReference, Errors) {
  Tensor state = filled(Shape{optimizer_state::size}, DType::float64, 0);
  const Tensor rates = filled(Shape{4}, DType::float64, 1e-3);
  const auto decide = [&](Tensor& decision_state, const Tensor& learning_rates) {
    optimizer_decision({.state = decision_state, .learning_rates = learning_rates});
  };
  decide(state, rates);
  Tensor short_state = filled(Shape{optimizer_state::size - 1}, DType::float64, 0);
  expect_error([&] { decide(short_state, rates); }, "[optimizer_decision] state has shape (8), expected (9)");
  Tensor float32_state = filled(Shape{optimizer_state::size}, DType::float32, 0);
  expect_error([&] { decide(float32_state, rates); },
               "[optimizer_decision] state has dtype float32; supported: float64");
  expect_error([&] { decide(state, filled(Shape{4}, DType::float32, 1e-3)); },
               "[optimizer_decision] learning_rates has dtype float32; supported: float64");
  expect_error([&] { decide(state, filled(Shape{0}, DType::float64, 0)); },
               "[optimizer_decision] learning_rates is empty: expected at least one rate");
  expect_error([&] { decide(state, filled(Shape{2, 2}, DType::float64, 1e-3)); },
               "[optimizer_decision] learning_rates has shape (2, 2), expected (n)");
}

}  // namespace
}  // namespace fast_llm::kernels
