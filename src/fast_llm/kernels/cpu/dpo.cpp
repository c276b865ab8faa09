// CPU reference of dpo_forward_backward (kernels/dpo.h).
//
// Two passes over the rows the spans cover: the first computes each row's log-probability of its label under the
// model (stable logsumexp, fp32 math for fp32 / 16-bit logits, fp64 for fp64) and reads the reference's given one,
// from which each pair's margin, loss and gradient coefficient follow (sums in fp64, in pair order: deterministic);
// the second writes the rows' gradients. Nothing is written before the first pass is done, so grad_logits may be the
// logits tensor itself.
#include "fast_llm/kernels/dpo.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/kernels/cpu/reference_helpers.h"

namespace fast_llm::kernels::cpu {
namespace {

// log(1 + exp(x)) without overflow.
double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }

void dpo_reference(const DpoArgs& args) {
  constexpr std::string_view op = "dpo_forward_backward";
  const int64_t tokens = args.logits.size(0), vocab = args.logits.size(1);
  const int64_t* labels = args.labels.data_as<int64_t>();  // (tokens)
  const int64_t label_stride = args.labels.stride(0);
  // (tokens) log pi_ref(label), read on covered rows only.
  const std::vector<double> reference_log_probability = read_values<double>(args.reference_log_probabilities);

  // Rows covered by a span with a label, and each pair's gradient coefficient per row (chosen +, rejected -).
  std::vector<uint8_t> covered(size_t(tokens), 0);
  auto mark = [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t label = labels[row * label_stride];
      FLM_CHECK(label < vocab, op, "label {} of row {} is outside the vocabulary of {} logits", label, row, vocab);
      if (label >= 0) covered[size_t(row)] = 1;
    }
  };
  for (const PreferencePair& pair : args.pairs) {
    mark(pair.chosen_begin, pair.chosen_end);
    mark(pair.rejected_begin, pair.rejected_end);
  }

  visit_floating_dtype(args.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const T* logits = args.logits.data_as<T>();  // (tokens, vocab)
    const int64_t logits_row = args.logits.stride(0), logits_column = args.logits.stride(1);
    const Compute scale = Compute(args.logits_scale_factor);
    // Pass 1, per covered row: logsumexp of the scaled logits and log pi(label).
    std::vector<Compute> logsumexp(size_t(tokens), 0);
    std::vector<double> policy(size_t(tokens), 0.0);
#pragma omp parallel for
    for (int64_t row = 0; row < tokens; ++row) {
      if (!covered[size_t(row)]) continue;
      const int64_t label = labels[row * label_stride];
      Compute max_z = -INFINITY;
      for (int64_t column = 0; column < vocab; ++column)
        max_z = std::max(max_z, load_value(logits[row * logits_row + column * logits_column]) * scale);
      Compute sum = 0;
      for (int64_t column = 0; column < vocab; ++column)
        sum += std::exp(load_value(logits[row * logits_row + column * logits_column]) * scale - max_z);
      logsumexp[size_t(row)] = max_z + std::log(sum);
      policy[size_t(row)] =
          double(load_value(logits[row * logits_row + label * logits_column]) * scale - logsumexp[size_t(row)]);
    }

    // Per pair: the margin, the loss, and d loss / d log pi(t) = -beta sigmoid(-beta m) for chosen rows (+ for
    // rejected rows), accumulated per row.
    std::vector<double> row_coefficient(size_t(tokens), 0.0);
    double loss_sum = 0;
    auto span_sum = [&](const std::vector<double>& values, int64_t begin, int64_t end) {
      double sum = 0;
      for (int64_t row = begin; row < end; ++row)
        if (covered[size_t(row)]) sum += values[size_t(row)];
      return sum;
    };
    for (const PreferencePair& pair : args.pairs) {
      const double margin = (span_sum(policy, pair.chosen_begin, pair.chosen_end) -
                             span_sum(policy, pair.rejected_begin, pair.rejected_end)) -
                            (span_sum(reference_log_probability, pair.chosen_begin, pair.chosen_end) -
                             span_sum(reference_log_probability, pair.rejected_begin, pair.rejected_end));
      loss_sum += softplus(-args.beta * margin);  // -log sigmoid(beta m)
      const double coefficient = -args.beta * sigmoid(-args.beta * margin);
      for (int64_t row = pair.chosen_begin; row < pair.chosen_end; ++row) row_coefficient[size_t(row)] += coefficient;
      for (int64_t row = pair.rejected_begin; row < pair.rejected_end; ++row)
        row_coefficient[size_t(row)] -= coefficient;
    }
    write_values<double>(args.loss_sum, std::vector<double>{loss_sum}, /*accumulate=*/true);
    if (args.row_coefficients != nullptr) {
      // The gradient c_t (onehot - softmax) s is -c_t (softmax - onehot) s.
      std::vector<double> weighted(size_t(tokens), 0.0);
      for (int64_t row = 0; row < tokens; ++row)
        if (covered[size_t(row)]) weighted[size_t(row)] = -args.weight * row_coefficient[size_t(row)];
      write_values<double>(*args.row_coefficients, weighted, /*accumulate=*/true);
    }
    if (args.grad_logits == nullptr) return;

    // Pass 2: d loss / d logits_t = c_t (onehot - softmax) s, times weight.
    T* grad_logits = args.grad_logits->data_as<T>();  // (tokens, vocab)
    const int64_t grad_row = args.grad_logits->stride(0), grad_column = args.grad_logits->stride(1);
#pragma omp parallel for
    for (int64_t row = 0; row < tokens; ++row) {
      if (!covered[size_t(row)]) {
        if (!args.accumulate_gradient)
          for (int64_t column = 0; column < vocab; ++column)
            grad_logits[row * grad_row + column * grad_column] = store_value<T>(0);
        continue;
      }
      const int64_t label = labels[row * label_stride];
      const Compute factor = Compute(args.weight * row_coefficient[size_t(row)]) * scale;
      // Read the whole row first: grad_logits may be the logits.
      std::vector<Compute> softmax(static_cast<size_t>(vocab));  // (vocab)
      for (int64_t column = 0; column < vocab; ++column)
        softmax[size_t(column)] =
            std::exp(load_value(logits[row * logits_row + column * logits_column]) * scale - logsumexp[size_t(row)]);
      for (int64_t column = 0; column < vocab; ++column) {
        const Compute onehot = column == label ? Compute(1) : Compute(0);
        T& element = grad_logits[row * grad_row + column * grad_column];
        Compute value = factor * (onehot - softmax[size_t(column)]);
        if (args.accumulate_gradient) value += load_value(element);
        element = store_value<T>(value);
      }
    }
  });
}

}  // namespace

FLM_REGISTER_KERNEL(DpoForwardBackward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &dpo_reference,
                    "two passes over the spans' rows: the model's log-probabilities of the labels, then each pair's "
                    "sigmoid loss (with the given reference log-probabilities) and the gradient; fp32 math (fp64 for "
                    "fp64)");

}  // namespace fast_llm::kernels::cpu
