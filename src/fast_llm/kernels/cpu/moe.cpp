// CPU references of the mixture-of-experts ops (kernels/moe.h): the definitions the CUDA variants are tested against.
//
// Routing math in the logits' dtype (fp32, or fp64 for fp64 logits), one token at a time, sums in token order: the
// results do not depend on threads. Top-k order: descending key (the logits, or the Sinkhorn values when training
// with `sinkhorn`), ties to the lower expert number. Sinkhorn is Fast-LLM's loop (exp of the logits, eps 1e-9 in the
// normalisers, stops when the mean change of the column factors is at most 1e-5), capped at 1000 iterations so that
// non-finite logits cannot hang it. Index tensors (experts, rows) are checked against their ranges before anything
// is written. Permute copies rows bit for bit; unpermute and the scalings compute in fp32 (fp64 when an operand is
// fp64) and round once on store.
#include "fast_llm/kernels/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/kernels/cpu/reference_helpers.h"

namespace fast_llm::kernels::cpu {
namespace {

constexpr double kSinkhornTolerance = 1e-5;
constexpr double kSinkhornEpsilon = 1e-9;
constexpr int kSinkhornMaxIterations = 1000;

// A (rows, columns) tensor of element type E read at (row, column) through its strides.
template <class E>
struct Matrix2 {
  E* data;
  int64_t row_stride, column_stride;
  E& operator()(int64_t row, int64_t column) const { return data[row * row_stride + column * column_stride]; }
};

template <class E>
Matrix2<E> matrix(const Tensor& tensor) {
  return {tensor.data_as<std::remove_const_t<E>>(), tensor.stride(0), tensor.stride(1)};
}

// Checks every row index of `rows` (T, slots) against [0, T * slots).
void check_rows(std::string_view op, const Tensor& rows) {
  const auto view = matrix<const int32_t>(rows);
  const int64_t limit = rows.size(0) * rows.size(1);
  for (int64_t token = 0; token < rows.size(0); ++token)
    for (int64_t slot = 0; slot < rows.size(1); ++slot) {
      const int64_t row = view(token, slot);
      FLM_CHECK(row >= 0 && row < limit, op, "rows[{}, {}] is {}, outside [0, {})", token, slot, row, limit);
    }
}

// Softmax of `logits` into `probabilities`; returns logsumexp.
template <class C>
C softmax(const std::vector<C>& logits, std::vector<C>& probabilities) {
  const C maximum = *std::max_element(logits.begin(), logits.end());
  C sum = 0;
  for (size_t e = 0; e < logits.size(); ++e) sum += (probabilities[e] = std::exp(logits[e] - maximum));
  for (C& probability : probabilities) probability /= sum;
  return maximum + std::log(sum);
}

// Fast-LLM's sinkhorn(logits): (T, routed) row-major values whose per-token order chooses the experts.
template <class C>
std::vector<C> sinkhorn(const std::vector<C>& logits, int64_t tokens, int64_t routed) {
  std::vector<C> cost(logits.size());
  for (size_t index = 0; index < logits.size(); ++index) cost[index] = std::exp(logits[index]);
  std::vector<C> row_factor(size_t(tokens), C(1)), column_factor(size_t(routed), C(1));
  std::vector<C> previous = column_factor;
  for (int iteration = 0; iteration < kSinkhornMaxIterations; ++iteration) {
    for (int64_t t = 0; t < tokens; ++t) {
      C sum = 0;
      for (int64_t e = 0; e < routed; ++e) sum += column_factor[size_t(e)] * cost[size_t(t * routed + e)];
      row_factor[size_t(t)] = C(1) / C(tokens) / (sum + C(kSinkhornEpsilon));
    }
    for (int64_t e = 0; e < routed; ++e) {
      C sum = 0;
      for (int64_t t = 0; t < tokens; ++t) sum += row_factor[size_t(t)] * cost[size_t(t * routed + e)];
      column_factor[size_t(e)] = C(1) / C(routed) / (sum + C(kSinkhornEpsilon));
    }
    C error = 0;
    for (int64_t e = 0; e < routed; ++e) error += std::abs(previous[size_t(e)] - column_factor[size_t(e)]);
    error /= C(routed);
    previous = column_factor;
    if (!(error > C(kSinkhornTolerance))) break;
  }
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < routed; ++e)
      cost[size_t(t * routed + e)] *= column_factor[size_t(e)] * row_factor[size_t(t)];
  return cost;
}

// The top_k indices of `keys`, descending, ties to the lower index; NaN ranks last (a strict weak order whatever the
// values).
template <class C>
void top_k(const C* keys, int64_t count, int top_k, std::vector<int32_t>& order) {
  order.resize(size_t(count));
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](int32_t index) {
    return std::isnan(keys[index]) ? -std::numeric_limits<C>::infinity() : keys[index];
  };
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
    return key(a) > key(b) || (key(a) == key(b) && a < b);
  });
}

template <class C>
C sigmoid(C value) {
  return C(1) / (C(1) + std::exp(-value));
}

void moe_route_forward_reference(const MoeRouteForwardArgs& args) {
  const int64_t tokens = args.logits.size(0), routed = args.logits.size(1);
  const int64_t shared = args.shared_experts;
  visit_float32_or_float64(args.logits.dtype(), [&]<class C>(std::type_identity<C>) {
    const auto logits = matrix<const C>(args.logits);
    const auto experts = matrix<int32_t>(args.experts);
    const auto scores = matrix<C>(args.scores);
    std::vector<C> all_logits(size_t(tokens * routed));
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t e = 0; e < routed; ++e) all_logits[size_t(t * routed + e)] = logits(t, e);
    const bool by_sinkhorn = args.routing == MoeRouting::sinkhorn && args.training;
    const std::vector<C> keys = by_sinkhorn ? sinkhorn(all_logits, tokens, routed) : all_logits;

    std::vector<C> row(static_cast<size_t>(routed)), probabilities(static_cast<size_t>(routed)), probability_sums(size_t(routed), C(0));
    std::vector<int64_t> counts(size_t(routed), 0);
    std::vector<int32_t> order;
    C z_sum = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      std::copy_n(all_logits.begin() + t * routed, routed, row.begin());
      const C logsumexp = softmax(row, probabilities);
      z_sum += logsumexp * logsumexp;
      for (int64_t e = 0; e < routed; ++e) probability_sums[size_t(e)] += probabilities[size_t(e)];
      top_k(keys.data() + t * routed, routed, args.top_k, order);
      for (int64_t j = 0; j < shared; ++j) {
        experts(t, j) = int32_t(routed + j);
        scores(t, j) = C(1);
      }
      // top_k_softmax: softmax over the chosen logits (the first is their maximum).
      C chosen_sum = 0;
      if (args.routing == MoeRouting::top_k_softmax)
        for (int i = 0; i < args.top_k; ++i) chosen_sum += std::exp(row[size_t(order[size_t(i)])] - row[size_t(order[0])]);
      for (int i = 0; i < args.top_k; ++i) {
        const int32_t expert = order[size_t(i)];
        ++counts[size_t(expert)];
        experts(t, shared + i) = expert;
        C score;
        if (args.routing == MoeRouting::top_k_softmax)
          score = std::exp(row[size_t(expert)] - row[size_t(order[0])]) / chosen_sum;
        else
          score = args.top_k == 1 ? sigmoid(row[size_t(expert)]) : probabilities[size_t(expert)];
        scores(t, shared + i) = score;
      }
    }
    if (args.expert_counts != nullptr) {
      std::vector<float> values(counts.begin(), counts.end());
      write_values<float>(*args.expert_counts, values, /*accumulate=*/false);
    }
    if (tokens == 0) return;
    if (args.load_balancing_loss_sum != nullptr) {
      double aux = 0;
      for (int64_t e = 0; e < routed; ++e)
        aux += double(probability_sums[size_t(e)] / C(tokens)) * (double(counts[size_t(e)]) / double(tokens));
      const double value[1] = {args.loss_weight * aux};
      write_values<double>(*args.load_balancing_loss_sum, value, /*accumulate=*/true);
    }
    if (args.z_loss_sum != nullptr) {
      const double value[1] = {args.loss_weight * double(z_sum / C(tokens))};
      write_values<double>(*args.z_loss_sum, value, /*accumulate=*/true);
    }
  });
}

void moe_route_backward_reference(const MoeRouteBackwardArgs& args) {
  const int64_t tokens = args.logits.size(0), routed = args.logits.size(1);
  const int64_t shared = args.shared_experts;
  visit_float32_or_float64(args.logits.dtype(), [&]<class C>(std::type_identity<C>) {
    const auto logits = matrix<const C>(args.logits);
    const auto experts = matrix<const int32_t>(args.experts);
    const auto grad_scores = matrix<const C>(args.grad_scores);
    for (int64_t t = 0; t < tokens; ++t)
      for (int i = 0; i < args.top_k; ++i) {
        const int64_t expert = experts(t, shared + i);
        FLM_CHECK(expert >= 0 && expert < routed, "moe_route_backward", "experts[{}, {}] is {}, outside [0, {})", t,
                  shared + i, expert, routed);
      }
    // The load-balancing mask means c_e = counts_e / T.
    std::vector<C> mask_means(size_t(routed), C(0));
    if (args.load_balancing_gradient != 0.0) {
      const std::vector<float> counts = read_values<float>(*args.expert_counts);
      for (int64_t e = 0; e < routed; ++e) mask_means[size_t(e)] = C(counts[size_t(e)]) / C(tokens);
    }
    const C load_balancing_gradient = C(args.load_balancing_gradient), z_loss_gradient = C(args.z_loss_gradient);
    std::vector<C> grad_logits(size_t(tokens * routed), C(0));
#pragma omp parallel for
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<C> row(static_cast<size_t>(routed)), probabilities(static_cast<size_t>(routed));
      for (int64_t e = 0; e < routed; ++e) row[size_t(e)] = logits(t, e);
      const C logsumexp = softmax(row, probabilities);
      C* grad = grad_logits.data() + t * routed;
      if (args.routing == MoeRouting::top_k_softmax) {
        // s_i = softmax over the chosen logits: dl_{e_i} = s_i (g_i - sum_j s_j g_j).
        const C maximum = row[size_t(experts(t, shared))];
        C sum = 0;
        for (int i = 0; i < args.top_k; ++i) sum += std::exp(row[size_t(experts(t, shared + i))] - maximum);
        C dot = 0;
        for (int i = 0; i < args.top_k; ++i)
          dot += std::exp(row[size_t(experts(t, shared + i))] - maximum) / sum * grad_scores(t, shared + i);
        for (int i = 0; i < args.top_k; ++i) {
          const int64_t expert = experts(t, shared + i);
          const C score = std::exp(row[size_t(expert)] - maximum) / sum;
          grad[expert] += score * (grad_scores(t, shared + i) - dot);
        }
      } else if (args.top_k == 1) {
        // s = sigmoid(l_e): dl_e = g s (1 - s).
        const int64_t expert = experts(t, shared);
        const C score = sigmoid(row[size_t(expert)]);
        grad[expert] += grad_scores(t, shared) * score * (C(1) - score);
      } else {
        // s_i = p_{e_i}, p = softmax(l): dl_k = sum_i g_i p_{e_i} ([k = e_i] - p_k).
        C dot = 0;
        for (int i = 0; i < args.top_k; ++i)
          dot += grad_scores(t, shared + i) * probabilities[size_t(experts(t, shared + i))];
        for (int64_t e = 0; e < routed; ++e) grad[e] -= probabilities[size_t(e)] * dot;
        for (int i = 0; i < args.top_k; ++i) {
          const int64_t expert = experts(t, shared + i);
          grad[expert] += grad_scores(t, shared + i) * probabilities[size_t(expert)];
        }
      }
      if (args.load_balancing_gradient != 0.0) {
        // aux = sum_e c_e mean_t p_te: d aux / d l_tk = p_tk (c_k - <p_t, c>) / T.
        C mean_mask = 0;
        for (int64_t e = 0; e < routed; ++e) mean_mask += probabilities[size_t(e)] * mask_means[size_t(e)];
        for (int64_t e = 0; e < routed; ++e)
          grad[e] += load_balancing_gradient / C(tokens) * probabilities[size_t(e)] * (mask_means[size_t(e)] - mean_mask);
      }
      if (args.z_loss_gradient != 0.0) {
        // z = mean_t lse_t^2: d z / d l_tk = 2 lse_t p_tk / T.
        for (int64_t e = 0; e < routed; ++e)
          grad[e] += z_loss_gradient / C(tokens) * C(2) * logsumexp * probabilities[size_t(e)];
      }
    }
    write_values<C>(args.grad_logits, grad_logits, /*accumulate=*/false);
  });
}

void moe_dispatch_map_reference(const MoeDispatchMapArgs& args) {
  const int64_t tokens = args.experts.size(0), slots = args.experts.size(1);
  const int64_t num_experts = args.expert_offsets.size(0) - 1;
  const auto experts = matrix<const int32_t>(args.experts);
  std::vector<int64_t> counts(size_t(num_experts), 0);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < slots; ++j) {
      const int64_t expert = experts(t, j);
      FLM_CHECK(expert >= 0 && expert < num_experts, "moe_dispatch_map", "experts[{}, {}] is {}, outside [0, {})", t,
                j, expert, num_experts);
      ++counts[size_t(expert)];
    }
  // Exclusive prefix sum; then each slot in slot order takes its expert's next row.
  std::vector<int64_t> next(size_t(num_experts) + 1, 0);
  for (int64_t e = 0; e < num_experts; ++e) next[size_t(e) + 1] = next[size_t(e)] + counts[size_t(e)];
  int32_t* offsets = args.expert_offsets.data_as<int32_t>();
  for (int64_t e = 0; e <= num_experts; ++e) offsets[e * args.expert_offsets.stride(0)] = int32_t(next[size_t(e)]);
  const auto rows = matrix<int32_t>(args.rows);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < slots; ++j) rows(t, j) = int32_t(next[size_t(experts(t, j))]++);
}

void moe_permute_reference(const MoePermuteArgs& args) {
  check_rows("moe_permute", args.rows);
  const int64_t tokens = args.rows.size(0), slots = args.rows.size(1), hidden = args.input.size(1);
  const auto rows = matrix<const int32_t>(args.rows);
  visit_floating_dtype(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    const auto input = matrix<const T>(args.input);
    const auto output = matrix<T>(args.output);
#pragma omp parallel for
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t j = 0; j < slots; ++j) {
        const int64_t row = rows(t, j);
        for (int64_t column = 0; column < hidden; ++column) output(row, column) = input(t, column);
      }
  });
}

void moe_unpermute_reference(const MoeUnpermuteArgs& args) {
  check_rows("moe_unpermute", args.rows);
  const int64_t tokens = args.rows.size(0), slots = args.rows.size(1), hidden = args.input.size(1);
  const auto rows = matrix<const int32_t>(args.rows);
  visit_floating_dtype(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const auto input = matrix<const T>(args.input);
    const auto output = matrix<T>(args.output);
#pragma omp parallel for
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t column = 0; column < hidden; ++column) {
        Compute sum = 0;
        for (int64_t j = 0; j < slots; ++j) sum += load_value(input(rows(t, j), column));
        output(t, column) = store_value<T>(sum);
      }
  });
}

void moe_scale_rows_reference(const MoeScaleRowsArgs& args) {
  check_rows("moe_scale_rows", args.rows);
  const int64_t tokens = args.rows.size(0), slots = args.rows.size(1), width = args.input.size(1);
  const auto rows = matrix<const int32_t>(args.rows);
  visit_floating_dtype(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    visit_float32_or_float64(args.scores.dtype(), [&]<class S>(std::type_identity<S>) {
      using Compute = WiderComputeType<T, S>;
      const auto input = matrix<const T>(args.input);
      const auto scores = matrix<const S>(args.scores);
      const auto output = matrix<T>(args.output);
#pragma omp parallel for
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t j = 0; j < slots; ++j) {
          const int64_t row = rows(t, j);
          const Compute score = Compute(scores(t, j));
          for (int64_t column = 0; column < width; ++column)
            output(row, column) = store_value<T>(score * Compute(load_value(input(row, column))));
        }
    });
  });
}

void moe_scale_rows_backward_reference(const MoeScaleRowsBackwardArgs& args) {
  check_rows("moe_scale_rows_backward", args.rows);
  const int64_t tokens = args.rows.size(0), slots = args.rows.size(1), width = args.grad_output.size(1);
  const auto rows = matrix<const int32_t>(args.rows);
  visit_floating_dtype(args.grad_output.dtype(), [&]<class T>(std::type_identity<T>) {
    visit_float32_or_float64(args.scores.dtype(), [&]<class S>(std::type_identity<S>) {
      using Compute = WiderComputeType<T, S>;
      const auto grad_output = matrix<const T>(args.grad_output);
      const auto input = matrix<const T>(args.input);
      const auto scores = matrix<const S>(args.scores);
      const auto grad_input = matrix<T>(args.grad_input);
      const auto grad_scores = matrix<S>(args.grad_scores);
#pragma omp parallel for
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t j = 0; j < slots; ++j) {
          // The row's dot product first: grad_input may be grad_output itself.
          const int64_t row = rows(t, j);
          Compute dot = 0;
          for (int64_t column = 0; column < width; ++column)
            dot += Compute(load_value(grad_output(row, column))) * Compute(load_value(input(row, column)));
          grad_scores(t, j) = S(dot);
          const Compute score = Compute(scores(t, j));
          for (int64_t column = 0; column < width; ++column)
            grad_input(row, column) = store_value<T>(score * Compute(load_value(grad_output(row, column))));
        }
    });
  });
}

}  // namespace

FLM_REGISTER_KERNEL(MoeRouteForward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &moe_route_forward_reference,
                    "per-token top-k (Sinkhorn choice when training with sinkhorn), losses summed in token order");
FLM_REGISTER_KERNEL(MoeRouteBackward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &moe_route_backward_reference, "per-token softmax gradients of scores, aux loss and z-loss");
FLM_REGISTER_KERNEL(MoeDispatchMap, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &moe_dispatch_map_reference, "counts, prefix sum, rows in slot order within each expert");
FLM_REGISTER_KERNEL(MoePermute, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &moe_permute_reference, "row copies into expert order, rows checked");
FLM_REGISTER_KERNEL(MoeUnpermute, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &moe_unpermute_reference, "per-token sum of its slots' rows in slot order, one rounding");
FLM_REGISTER_KERNEL(MoeScaleRows, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &moe_scale_rows_reference, "row times its slot's score, fp32 math (fp64 with fp64)");
FLM_REGISTER_KERNEL(MoeScaleRowsBackward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline,
                    nullptr, &moe_scale_rows_backward_reference,
                    "row dot products for the scores' gradient, then the scaled output gradient");

}  // namespace fast_llm::kernels::cpu
