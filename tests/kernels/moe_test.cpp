// Tests of the CPU references of the mixture-of-experts ops (kernels/cpu/moe.cpp): hand-computed routing (ties, shared
// experts, the losses), Sinkhorn choosing differently from plain top-k, the dispatch map with an expert that gets no
// token, permute / unpermute / scale_rows by hand and the adjoint identity <permute(x), y> = <x, unpermute(y)>, fp64
// finite differences of moe_route_backward (scores, load-balancing loss, z-loss; top_k_softmax and sinkhorn) and of
// moe_scale_rows_backward, and the contract errors.
#include "fast_llm/kernels/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

constexpr DType kFloatingDTypes[] = {DType::float64, DType::float32, DType::bfloat16, DType::float16};

struct Routing {
  Tensor experts, scores, counts, aux, z;
};

// moe_route_forward through the reference with counts and both loss sums (aux only for top_k_softmax).
Routing route(const Tensor& logits, int top_k, int shared, MoeRouting routing, bool training, double loss_weight = 1) {
  const int64_t tokens = logits.size(0), slots = shared + top_k;
  Routing result{.experts = filled(Shape{tokens, slots}, DType::int32, -1),
                 .scores = filled(Shape{tokens, slots}, logits.dtype(), NAN),
                 .counts = filled(Shape{logits.size(1)}, DType::float32, NAN),
                 .aux = filled(Shape{1}, DType::float64, 0),
                 .z = filled(Shape{1}, DType::float64, 0)};
  run_reference<MoeRouteForward>({.logits = logits,
                                  .experts = result.experts,
                                  .scores = result.scores,
                                  .top_k = top_k,
                                  .shared_experts = shared,
                                  .routing = routing,
                                  .training = training,
                                  .expert_counts = &result.counts,
                                  .load_balancing_loss_sum =
                                      routing == MoeRouting::top_k_softmax ? &result.aux : nullptr,
                                  .z_loss_sum = &result.z,
                                  .loss_weight = loss_weight});
  return result;
}

std::vector<double> softmax(std::vector<double> values) {
  const double maximum = *std::max_element(values.begin(), values.end());
  double sum = 0;
  for (double& value : values) sum += (value = std::exp(value - maximum));
  for (double& value : values) value /= sum;
  return values;
}

double logsumexp(const std::vector<double>& values) {
  double sum = 0;
  for (double value : values) sum += std::exp(value);
  return std::log(sum);
}

TEST(MoeReference, RouteTopKSoftmaxHandChecked) {
  // 3 tokens, 4 routed experts, top 2, one shared expert (number 4). Token 1 ties experts 0..2 (the lower number
  // wins the second place), token 2 ties 0, 1 and 3 (0 and 1 win).
  const std::vector<std::vector<double>> rows = {{1, 3, 2, 0}, {0.5, 0.5, 0.5, 1}, {2, 2, -1, 2}};
  for (DType dtype : {DType::float64, DType::float32}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor logits = make_tensor({1, 3, 2, 0, 0.5, 0.5, 0.5, 1, 2, 2, -1, 2}, Shape{3, 4}, dtype);
    Routing result = route(logits, /*top_k=*/2, /*shared=*/1, MoeRouting::top_k_softmax, true, /*loss_weight=*/0.5);
    expect_near(result.experts, {4, 1, 2, 4, 3, 0, 4, 0, 1}, 0, 0, "experts");
    const double high = std::exp(1.0) / (1 + std::exp(1.0)), half_high = std::exp(0.5) / (1 + std::exp(0.5));
    const double tolerance = dtype_tolerance(dtype);
    expect_near(result.scores, {1, high, 1 - high, 1, half_high, 1 - half_high, 1, 0.5, 0.5}, tolerance, tolerance,
                "scores");
    expect_near(result.counts, {2, 2, 1, 1}, 0, 0, "counts");
    // aux = sum_e mean_t softmax_te * counts_e / T; z = mean_t lse_t^2; both times loss_weight 0.5.
    const std::vector<double> mask_means = {2 / 3.0, 2 / 3.0, 1 / 3.0, 1 / 3.0};
    double aux = 0, z = 0;
    for (const auto& row : rows) {
      const std::vector<double> probabilities = softmax(row);
      for (size_t e = 0; e < 4; ++e) aux += probabilities[e] / 3 * mask_means[e];
      z += logsumexp(row) * logsumexp(row) / 3;
    }
    expect_near(result.aux, {0.5 * aux}, tolerance, tolerance, "load-balancing loss");
    expect_near(result.z, {0.5 * z}, tolerance, tolerance, "z-loss");
  }
}

TEST(MoeReference, RouteAddsToLossSumsAndHandlesNoTokens) {
  Tensor logits = make_tensor({1, 0, 0, 1}, Shape{2, 2}, DType::float64);
  Routing result = route(logits, 1, 0, MoeRouting::top_k_softmax, true);
  const double aux = values_of(result.aux)[0];
  // Each expert gets one token and mean softmax 1/2: aux = 2 * 1/2 * 1/2.
  EXPECT_NEAR(aux, 0.5, 1e-15);
  // A second call adds into the same sums.
  Tensor experts = filled(Shape{2, 1}, DType::int32, 0), scores = filled(Shape{2, 1}, DType::float64, 0);
  run_reference<MoeRouteForward>({.logits = logits,
                                  .experts = experts,
                                  .scores = scores,
                                  .expert_counts = &result.counts,
                                  .load_balancing_loss_sum = &result.aux,
                                  .z_loss_sum = &result.z});
  EXPECT_NEAR(values_of(result.aux)[0], 2 * aux, 1e-15);
  // No tokens: nothing to route, zero counts, the sums unchanged.
  Tensor no_logits = Tensor::empty(Shape{0, 3}, DType::float32);
  Routing empty = route(no_logits, 2, 1, MoeRouting::top_k_softmax, true);
  expect_near(empty.counts, {0, 0, 0}, 0, 0, "no tokens: counts");
  expect_near(empty.aux, {0}, 0, 0, "no tokens: aux");
  expect_near(empty.z, {0}, 0, 0, "no tokens: z");
}

TEST(MoeReference, SinkhornChoosesDifferentlyFromTopK) {
  // Every token prefers expert 0; Sinkhorn balances the columns and sends the two weakest preferences to expert 1
  // (Sinkhorn's values: rows (0.200, 0.050), (0.149, 0.101), (0.088, 0.162), (0.062, 0.188)).
  const std::vector<double> values = {3, 0, 2, 0, 1, 0, 0.5, 0};
  for (DType dtype : {DType::float64, DType::float32}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor logits = make_tensor(values, Shape{4, 2}, dtype);
    const double tolerance = dtype_tolerance(dtype);
    auto sigmoid = [](double x) { return 1 / (1 + std::exp(-x)); };
    Routing training = route(logits, 1, 0, MoeRouting::sinkhorn, /*training=*/true);
    expect_near(training.experts, {0, 0, 1, 1}, 0, 0, "sinkhorn experts");
    // top_k 1: scores are the sigmoid of the chosen logit.
    expect_near(training.scores, {sigmoid(3), sigmoid(2), sigmoid(0), sigmoid(0)}, tolerance, tolerance,
                "sinkhorn scores");
    expect_near(training.z, {(std::pow(std::log(std::exp(3) + 1), 2) + std::pow(std::log(std::exp(2) + 1), 2) +
                              std::pow(std::log(std::exp(1) + 1), 2) + std::pow(std::log(std::exp(0.5) + 1), 2)) /
                             4},
                tolerance, tolerance, "z-loss");
    Routing evaluation = route(logits, 1, 0, MoeRouting::sinkhorn, /*training=*/false);
    expect_near(evaluation.experts, {0, 0, 0, 0}, 0, 0, "top-k experts");
    expect_near(evaluation.scores, {sigmoid(3), sigmoid(2), sigmoid(1), sigmoid(0.5)}, tolerance, tolerance,
                "top-k scores");
  }
  // top_k 2 of 3 experts: the scores are the softmax over all routed logits, taken at the chosen experts.
  Tensor logits = make_tensor({1, 2, 3}, Shape{1, 3}, DType::float64);
  Routing result = route(logits, 2, 0, MoeRouting::sinkhorn, /*training=*/false);
  const std::vector<double> probabilities = softmax({1, 2, 3});
  expect_near(result.experts, {2, 1}, 0, 0, "experts");
  expect_near(result.scores, {probabilities[2], probabilities[1]}, 1e-15, 1e-15, "scores");
}

// sum_tj w_tj scores_tj + a aux + b z, at `logits` (fp64), for the finite differences of moe_route_backward.
double routing_objective(const Tensor& logits, const std::vector<double>& weights, int top_k, int shared,
                         MoeRouting routing, double a, double b) {
  Routing result = route(logits, top_k, shared, routing, true);
  return dot(values_of(result.scores), weights) +
         (routing == MoeRouting::top_k_softmax ? a * values_of(result.aux)[0] : 0) + b * values_of(result.z)[0];
}

TEST(MoeReference, RouteBackwardMatchesFiniteDifferences) {
  struct Case {
    MoeRouting routing;
    int top_k, shared;
    double a, b;
  };
  const int64_t tokens = 7, routed = 5;
  for (const Case& c : {Case{MoeRouting::top_k_softmax, 2, 1, 0.7, 0.3}, Case{MoeRouting::top_k_softmax, 1, 0, 0, 0},
                        Case{MoeRouting::top_k_softmax, 3, 2, 1.5, 0}, Case{MoeRouting::sinkhorn, 1, 0, 0, 0.4},
                        Case{MoeRouting::sinkhorn, 2, 1, 0, 0.2}}) {
    SCOPED_TRACE(fmt::format("routing {}, top_k {}, shared {}, aux {}, z {}", int(c.routing), c.top_k, c.shared, c.a,
                             c.b));
    const int64_t slots = c.shared + c.top_k;
    Tensor logits = random_tensor(Shape{tokens, routed}, DType::float64, 11, -2, 2);
    const std::vector<double> weights = uniform_values(tokens * slots, 12);
    Routing result = route(logits, c.top_k, c.shared, c.routing, true);
    Tensor grad_scores = make_tensor(weights, Shape{tokens, slots}, DType::float64);
    Tensor grad_logits = filled(Shape{tokens, routed}, DType::float64, NAN);
    run_reference<MoeRouteBackward>({.logits = logits,
                                     .experts = result.experts,
                                     .grad_scores = grad_scores,
                                     .grad_logits = grad_logits,
                                     .top_k = c.top_k,
                                     .shared_experts = c.shared,
                                     .routing = c.routing,
                                     .load_balancing_gradient = c.a,
                                     .z_loss_gradient = c.b,
                                     .expert_counts = &result.counts});
    const std::vector<double> expected = finite_difference_gradient(
        logits, [&] { return routing_objective(logits, weights, c.top_k, c.shared, c.routing, c.a, c.b); });
    expect_near(grad_logits, expected, 1e-8, 1e-6, "grad_logits");
  }
}

TEST(MoeReference, DispatchMapHandChecked) {
  // Expert 3 gets no token; within an expert, rows follow the slot order t * slots + j.
  Tensor experts = make_tensor({2, 0, 0, 2, 2, 1}, Shape{3, 2}, DType::int32);
  Tensor offsets = filled(Shape{5}, DType::int32, -1), rows = filled(Shape{3, 2}, DType::int32, -1);
  run_reference<MoeDispatchMap>({.experts = experts, .expert_offsets = offsets, .rows = rows});
  expect_near(offsets, {0, 2, 3, 6, 6}, 0, 0, "offsets");
  expect_near(rows, {3, 0, 1, 4, 5, 2}, 0, 0, "rows");
}

// The rows of the hand-checked dispatch map above.
Tensor hand_rows() { return make_tensor({3, 0, 1, 4, 5, 2}, Shape{3, 2}, DType::int32); }

TEST(MoeReference, PermuteUnpermuteScaleHandChecked) {
  for (DType dtype : kFloatingDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor rows = hand_rows();
    Tensor input = make_tensor({1, 2, 3, 4, 5, 6}, Shape{3, 2}, dtype);
    Tensor permuted = filled(Shape{6, 2}, dtype, NAN);
    run_reference<MoePermute>({.input = input, .rows = rows, .output = permuted});
    expect_near(permuted, {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}, 0, 0, "permute");

    Tensor scores = make_tensor({0.5, 2, 1, 0.25, 4, -1}, Shape{3, 2}, DType::float32);
    Tensor scaled = filled(Shape{6, 2}, dtype, NAN);
    run_reference<MoeScaleRows>({.input = permuted, .rows = rows, .scores = scores, .output = scaled});
    // Row 0 is slot (0, 1) (score 2), 1 (1, 0) (1), 2 (2, 1) (-1), 3 (0, 0) (0.5), 4 (1, 1) (0.25), 5 (2, 0) (4).
    expect_near(scaled, {2, 4, 3, 4, -5, -6, 0.5, 1, 0.75, 1, 20, 24}, 0, 0, "scale_rows");

    Tensor unpermuted = filled(Shape{3, 2}, dtype, NAN);
    run_reference<MoeUnpermute>({.input = scaled, .rows = rows, .output = unpermuted});
    expect_near(unpermuted, {2.5, 5, 3.75, 5, 15, 18}, 0, 0, "unpermute");

    // In place: output may be input.
    run_reference<MoeScaleRows>({.input = permuted, .rows = rows, .scores = scores, .output = permuted});
    expect_near(permuted, values_of(scaled), 0, 0, "scale_rows in place");
  }
}

TEST(MoeReference, PermuteIsUnpermutesAdjoint) {
  // <permute(x), y> = <x, unpermute(y)> for a random routing with shared experts and experts without tokens.
  const int64_t tokens = 9, slots = 3, hidden = 5, num_experts = 8;
  std::vector<double> chosen;
  for (int64_t t = 0; t < tokens; ++t) {
    // Expert 7 shared; two of experts 0..3 (4..6 get nothing).
    chosen.push_back(7);
    chosen.push_back(double(t % 4));
    chosen.push_back(double((t % 4 + 1 + t % 3) % 4));  // 1 .. 3 after t % 4: distinct
  }
  Tensor experts = make_tensor(chosen, Shape{tokens, slots}, DType::int32);
  Tensor offsets = filled(Shape{num_experts + 1}, DType::int32, -1), rows = filled(Shape{tokens, slots}, DType::int32, -1);
  run_reference<MoeDispatchMap>({.experts = experts, .expert_offsets = offsets, .rows = rows});
  std::vector<double> sorted_rows = values_of(rows);
  std::sort(sorted_rows.begin(), sorted_rows.end());
  std::vector<double> all_rows(size_t(tokens * slots));
  std::iota(all_rows.begin(), all_rows.end(), 0);
  EXPECT_EQ(sorted_rows, all_rows) << "rows are a permutation";
  const std::vector<double> offset_values = values_of(offsets);
  EXPECT_EQ(offset_values[4], offset_values[7]) << "experts 4..6 have no rows";

  Tensor x = random_tensor(Shape{tokens, hidden}, DType::float64, 21);
  Tensor y = random_tensor(Shape{tokens * slots, hidden}, DType::float64, 22);
  Tensor permuted = filled(Shape{tokens * slots, hidden}, DType::float64, NAN);
  Tensor unpermuted = filled(Shape{tokens, hidden}, DType::float64, NAN);
  run_reference<MoePermute>({.input = x, .rows = rows, .output = permuted});
  run_reference<MoeUnpermute>({.input = y, .rows = rows, .output = unpermuted});
  EXPECT_NEAR(dot(values_of(permuted), values_of(y)), dot(values_of(x), values_of(unpermuted)), 1e-12);
}

TEST(MoeReference, ScaleRowsBackwardMatchesFiniteDifferences) {
  const int64_t tokens = 4, slots = 2, width = 3;
  Tensor rows = make_tensor({5, 0, 2, 7, 1, 6, 3, 4}, Shape{tokens, slots}, DType::int32);
  Tensor input = random_tensor(Shape{tokens * slots, width}, DType::float64, 31);
  Tensor scores = random_tensor(Shape{tokens, slots}, DType::float64, 32);
  const std::vector<double> weights = uniform_values(tokens * slots * width, 33);
  Tensor grad_output = make_tensor(weights, Shape{tokens * slots, width}, DType::float64);
  auto objective = [&] {
    Tensor output = filled(Shape{tokens * slots, width}, DType::float64, NAN);
    run_reference<MoeScaleRows>({.input = input, .rows = rows, .scores = scores, .output = output});
    return dot(values_of(output), weights);
  };
  Tensor grad_input = filled(Shape{tokens * slots, width}, DType::float64, NAN);
  Tensor grad_scores = filled(Shape{tokens, slots}, DType::float64, NAN);
  run_reference<MoeScaleRowsBackward>({.grad_output = grad_output,
                                       .input = input,
                                       .rows = rows,
                                       .scores = scores,
                                       .grad_input = grad_input,
                                       .grad_scores = grad_scores});
  expect_near(grad_input, finite_difference_gradient(input, objective), 1e-9, 1e-7, "grad_input");
  expect_near(grad_scores, finite_difference_gradient(scores, objective), 1e-9, 1e-7, "grad_scores");

  // In place (grad_input is grad_output) and in 16-bit, against the fp64 result.
  for (DType dtype : kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor low_grad = converted(grad_output, dtype), low_input = converted(input, dtype);
    Tensor scores32 = converted(scores, DType::float32);
    Tensor low_grad_scores = filled(Shape{tokens, slots}, DType::float32, NAN);
    run_reference<MoeScaleRowsBackward>({.grad_output = low_grad,
                                         .input = low_input,
                                         .rows = rows,
                                         .scores = scores32,
                                         .grad_input = low_grad,
                                         .grad_scores = low_grad_scores});
    const double tolerance = 4 * dtype_tolerance(dtype);
    expect_near(low_grad, values_of(grad_input), tolerance, tolerance, "grad_input in place");
    expect_near(low_grad_scores, values_of(grad_scores), tolerance, tolerance, "grad_scores");
  }
}

TEST(MoeReference, ContractErrors) {
  Tensor logits = make_tensor({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::float32);
  Tensor experts = filled(Shape{2, 2}, DType::int32, 0), scores = filled(Shape{2, 2}, DType::float32, 0);
  Tensor counts = filled(Shape{3}, DType::float32, 0), sum = filled(Shape{1}, DType::float32, 0);
  expect_error([&] { moe_route_forward({.logits = logits, .experts = experts, .scores = scores, .top_k = 4}); },
               "[moe_route_forward] top_k is 4, expected 1 .. 3");
  expect_error([&] { moe_route_forward({.logits = logits, .experts = experts, .scores = scores, .top_k = 1}); },
               "[moe_route_forward] experts has shape (2, 2), expected (2, 1)");
  Tensor bf16_logits = converted(logits, DType::bfloat16);
  expect_error([&] { moe_route_forward({.logits = bf16_logits, .experts = experts, .scores = scores, .top_k = 2}); },
               "logits has dtype bfloat16");
  Tensor int64_experts = filled(Shape{2, 2}, DType::int64, 0);
  expect_error([&] { moe_route_forward({.logits = logits, .experts = int64_experts, .scores = scores, .top_k = 2}); },
               "experts has dtype int64");
  expect_error(
      [&] {
        moe_route_forward({.logits = logits, .experts = experts, .scores = scores, .top_k = 2,
                           .load_balancing_loss_sum = &sum});
      },
      "load_balancing_loss_sum is given without expert_counts");
  expect_error(
      [&] {
        moe_route_forward({.logits = logits, .experts = experts, .scores = scores, .top_k = 2,
                           .routing = MoeRouting::sinkhorn, .expert_counts = &counts, .load_balancing_loss_sum = &sum});
      },
      "sinkhorn routing has no load-balancing loss");
  Tensor grad_logits = filled(Shape{2, 3}, DType::float32, 0);
  expect_error(
      [&] {
        moe_route_backward({.logits = logits, .experts = experts, .grad_scores = scores, .grad_logits = grad_logits,
                            .top_k = 2, .load_balancing_gradient = 1.0});
      },
      "load_balancing_gradient is 1 without expert_counts");
  Tensor bad_experts = make_tensor({0, 3, 1, 2}, Shape{2, 2}, DType::int32);
  expect_error(
      [&] {
        moe_route_backward({.logits = logits, .experts = bad_experts, .grad_scores = scores,
                            .grad_logits = grad_logits, .top_k = 2});
      },
      "experts[0, 1] is 3, outside [0, 3)");

  Tensor offsets = filled(Shape{4}, DType::int32, 0), rows = filled(Shape{2, 2}, DType::int32, 0);
  expect_error([&] { moe_dispatch_map({.experts = bad_experts, .expert_offsets = offsets, .rows = rows}); },
               "[moe_dispatch_map] experts[0, 1] is 3, outside [0, 3)");
  Tensor long_rows = filled(Shape{2, 3}, DType::int32, 0);
  expect_error([&] { moe_dispatch_map({.experts = experts, .expert_offsets = offsets, .rows = long_rows}); },
               "rows has shape (2, 3), expected (2, 2)");

  Tensor input = filled(Shape{2, 5}, DType::float32, 1), permuted = filled(Shape{4, 5}, DType::float32, 0);
  Tensor out_of_range = make_tensor({0, 1, 2, 4}, Shape{2, 2}, DType::int32);
  expect_error([&] { moe_permute({.input = input, .rows = out_of_range, .output = permuted}); },
               "[moe_permute] rows[1, 1] is 4, outside [0, 4)");
  Tensor short_output = filled(Shape{3, 5}, DType::float32, 0);
  expect_error([&] { moe_permute({.input = input, .rows = rows, .output = short_output}); },
               "[moe_permute] output has shape (3, 5), expected (4, 5)");
  Tensor bf16_output = filled(Shape{2, 5}, DType::bfloat16, 0);
  expect_error([&] { moe_unpermute({.input = permuted, .rows = rows, .output = bf16_output}); },
               "[moe_unpermute] output has dtype bfloat16, input has float32");
  Tensor bf16_scores = filled(Shape{2, 2}, DType::bfloat16, 0);
  expect_error([&] { moe_scale_rows({.input = permuted, .rows = rows, .scores = bf16_scores, .output = permuted}); },
               "[moe_scale_rows] scores has dtype bfloat16");
  Tensor grad_scores64 = filled(Shape{2, 2}, DType::float64, 0);
  expect_error(
      [&] {
        moe_scale_rows_backward({.grad_output = permuted, .input = permuted, .rows = rows, .scores = scores,
                                 .grad_input = permuted, .grad_scores = grad_scores64});
      },
      "[moe_scale_rows_backward] grad_scores has dtype float64, scores has float32");
}

}  // namespace
}  // namespace fast_llm::kernels
