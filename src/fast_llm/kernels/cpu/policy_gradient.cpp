// CPU reference of policy_gradient_forward_backward (kernels/policy_gradient.h).
//
// Three passes: (1) per row, the new log-prob of the label and (for metrics) the entropy, from a stable logsumexp of
// the (scaled, softcapped) row in the compute type; (2) per token or per document, the ratio, advantage and gradient
// coefficient in fp64, and the extremes of the labels' advantages; (3) per row again, the gradient c_t (softmax -
// onehot) * dz/dx, each row read before it is written, so grad_logits may be the logits tensor itself. Math in fp32 for
// fp32 / bf16 / fp16 logits and fp64 for fp64; sums in fp64 in token order (deterministic).
#include "fast_llm/kernels/policy_gradient.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/kernels/cpu/reference_helpers.h"

namespace fast_llm::kernels::cpu {
namespace {

// extreme = max(extreme, value), or min: a read-modify-write of a (1) fp32 / fp64 tensor.
void take_extreme(const Tensor& extreme, double value, bool largest) {
  const double current = read_values<double>(extreme)[0];
  write_values<double>(extreme, std::vector<double>{largest ? std::fmax(current, value) : std::fmin(current, value)},
                       /*accumulate=*/false);
}

void policy_gradient_reference(const PolicyGradientArgs& args) {
  constexpr std::string_view op = "policy_gradient_forward_backward";
  const int64_t tokens = args.logits.size(0), vocab = args.logits.size(1);
  const int64_t* labels = args.labels.data_as<int64_t>();  // (tokens)
  const int64_t label_stride = args.labels.stride(0);
  const bool metrics = args.metric_sums != nullptr;
  const bool per_document = args.sequence_level || metrics;
  const std::vector<double> advantages = read_values<double>(args.advantages);                // (tokens)
  const std::vector<double> old_log_probabilities = read_values<double>(args.old_log_probabilities);  // (tokens)
  const int32_t* documents = args.label_documents.data_as<int32_t>();  // (tokens)
  const int64_t document_stride = args.label_documents.stride(0);
  for (int64_t token = 0; token < tokens; ++token) {
    const int64_t label = labels[token * label_stride];
    FLM_CHECK(label < vocab, op, "label {} of token {} is outside the vocabulary of {} logits", label, token, vocab);
    if (label >= 0 && per_document) {
      const int32_t document = documents[token * document_stride];
      FLM_CHECK(document >= 0 && document < args.num_documents, op,
                "label of token {} belongs to document {}, outside [0, {})", token, document, args.num_documents);
    }
  }

  std::vector<double> new_log_probabilities(size_t(tokens), 0.0), entropies(size_t(tokens), 0.0);  // (tokens)
  visit_floating_dtype(args.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const T* logits = args.logits.data_as<T>();  // (tokens, vocab)
    const int64_t logits_row = args.logits.stride(0), logits_column = args.logits.stride(1);
    T* grad_logits = args.grad_logits != nullptr ? args.grad_logits->data_as<T>() : nullptr;  // (tokens, vocab)
    const int64_t grad_row = args.grad_logits != nullptr ? args.grad_logits->stride(0) : 0;
    const int64_t grad_column = args.grad_logits != nullptr ? args.grad_logits->stride(1) : 0;
    const Compute scale_factor = Compute(args.logits_scale_factor);

    // z = x s, or c tanh(x s / c) with a softcap c; dz/dx = s, or s (1 - tanh^2). Returns logsumexp(z).
    auto load_row = [&](int64_t token, std::vector<Compute>& z, std::vector<Compute>& dz_dx) {
      scaled_logits_row(logits + token * logits_row, logits_column, scale_factor, args.softcap, z, dz_dx);
      return logsumexp(z);
    };

    // Pass 1: new log-probs and entropies.
#pragma omp parallel for
    for (int64_t token = 0; token < tokens; ++token) {
      const int64_t label = labels[token * label_stride];
      if (label < 0) continue;
      std::vector<Compute> z(static_cast<size_t>(vocab)), dz_dx(static_cast<size_t>(vocab));  // (vocab)
      const Compute row_logsumexp = load_row(token, z, dz_dx);
      new_log_probabilities[size_t(token)] = double(z[size_t(label)] - row_logsumexp);
      if (!metrics) continue;
      // H = lse - sum_k softmax_k z_k
      Compute expected = 0;
      for (const Compute value : z) expected += std::exp(value - row_logsumexp) * value;
      entropies[size_t(token)] = double(row_logsumexp - expected);
    }

    // Pass 2: per-document label counts and means (GSPO, metrics), then per-token ratio, advantage and coefficient.
    std::vector<double> counts(size_t(per_document ? args.num_documents : 0), 0.0);
    std::vector<double> log_ratio_sums(counts.size(), 0.0), advantage_sums(counts.size(), 0.0);
    for (int64_t token = 0; token < tokens; ++token) {
      if (labels[token * label_stride] < 0 || !per_document) continue;
      const size_t document = size_t(documents[token * document_stride]);
      counts[document] += 1.0;
      log_ratio_sums[document] += new_log_probabilities[size_t(token)] - old_log_probabilities[size_t(token)];
      advantage_sums[document] += advantages[size_t(token)];
    }
    const double low = 1.0 - args.epsilon_low, high = 1.0 + args.epsilon_high;
    std::vector<double> coefficients(size_t(tokens), 0.0);  // (tokens) c_t
    std::vector<double> sums(size_t(kPolicyMetricCount), 0.0);
    double loss_sum = 0.0;
    double largest_advantage = -INFINITY, smallest_advantage = INFINITY;  // of the unmasked labels, NaN skipped
    auto metric = [&](PolicyMetric index) -> double& { return sums[size_t(index)]; };
    for (int64_t token = 0; token < tokens; ++token) {
      if (labels[token * label_stride] < 0) continue;
      const size_t document = per_document ? size_t(documents[token * document_stride]) : 0;
      double log_ratio = new_log_probabilities[size_t(token)] - old_log_probabilities[size_t(token)];
      double advantage = advantages[size_t(token)];
      largest_advantage = std::fmax(largest_advantage, advantage);
      smallest_advantage = std::fmin(smallest_advantage, advantage);
      if (args.sequence_level) {
        log_ratio = log_ratio_sums[document] / counts[document];
        advantage = advantage_sums[document] / counts[document];
      }
      const double ratio = std::exp(log_ratio);
      loss_sum += -std::min(ratio * advantage, std::clamp(ratio, low, high) * advantage);
      coefficients[size_t(token)] = (std::max(advantage, 0.0) * (ratio <= high ? 1.0 : 0.0) +
                                     std::min(advantage, 0.0) * (ratio >= low ? 1.0 : 0.0)) *
                                    ratio;
      if (!metrics) continue;
      const double weight = 1.0 / counts[document];
      const double variance_weight = args.sequence_level ? weight : 1.0;
      metric(PolicyMetric::new_logprobs) += weight * new_log_probabilities[size_t(token)];
      metric(PolicyMetric::old_logprobs) += weight * old_log_probabilities[size_t(token)];
      metric(PolicyMetric::ratio_new_old) += weight * ratio;
      metric(PolicyMetric::ratio_new_old_sum) += variance_weight * ratio;
      metric(PolicyMetric::ratio_new_old_squared_sum) += variance_weight * ratio * ratio;
      metric(PolicyMetric::kl_new_old) += weight * (ratio - log_ratio - 1.0);
      metric(PolicyMetric::clipped_ratio_fraction) += weight * ((ratio < low || ratio > high) ? 1.0 : 0.0);
      metric(PolicyMetric::advantage) += weight * advantage;
      metric(PolicyMetric::num_tokens) += 1.0;
      metric(PolicyMetric::num_segments) += weight;
      metric(PolicyMetric::entropy) += weight * entropies[size_t(token)];
    }
    if (args.max_advantage != nullptr) take_extreme(*args.max_advantage, largest_advantage, /*largest=*/true);
    if (args.min_advantage != nullptr) take_extreme(*args.min_advantage, smallest_advantage, /*largest=*/false);
    write_values<double>(args.loss_sum, std::vector<double>{loss_sum}, /*accumulate=*/true);
    if (metrics) write_values<double>(*args.metric_sums, sums, /*accumulate=*/true);
    if (args.row_coefficients != nullptr) {
      std::vector<double> weighted(coefficients.size());
      for (size_t token = 0; token < coefficients.size(); ++token)
        weighted[token] = args.grad_weight * coefficients[token];
      write_values<double>(*args.row_coefficients, weighted, /*accumulate=*/true);
    }
    if (grad_logits == nullptr) return;

    // Pass 3: grad z = grad_weight c_t (softmax - onehot), times dz/dx: the cross-entropy gradient of weight c_t.
#pragma omp parallel for
    for (int64_t token = 0; token < tokens; ++token) {
      const int64_t label = labels[token * label_stride];
      if (label < 0) {
        for (int64_t column = 0; column < vocab; ++column)
          grad_logits[token * grad_row + column * grad_column] = store_value<T>(0);
        continue;
      }
      std::vector<Compute> z(static_cast<size_t>(vocab)), dz_dx(static_cast<size_t>(vocab));  // (vocab)
      const Compute row_logsumexp = load_row(token, z, dz_dx);
      const Compute coefficient = Compute(args.grad_weight * coefficients[size_t(token)]);
      cross_entropy_gradient_row(z, dz_dx, row_logsumexp, label, coefficient, std::optional<Compute>(),
                                 grad_logits + token * grad_row, grad_column);
    }
  });
}

}  // namespace

FLM_REGISTER_KERNEL(PolicyGradientForwardBackward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline,
                    nullptr, &policy_gradient_reference,
                    "new log-probs per row, ratios per token (GRPO) or document (GSPO), gradient in a second pass "
                    "over the rows; fp32 math (fp64 for fp64)");

}  // namespace fast_llm::kernels::cpu
