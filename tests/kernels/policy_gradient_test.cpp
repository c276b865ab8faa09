// Tests of the CPU reference policy_gradient_forward_backward (kernels/cpu/policy_gradient.cpp): GRPO's and GSPO's loss
// and metric sums against the formulas written here with plain loops, their gradients against central finite
// differences in fp64 (with logits_scale_factor and softcap); ratio 1 when the old log-probs are the current ones
// (loss = -sum of advantages); the four clipping cases; in place == out of place; fp32 against fp64; the advantage
// extremes (masked labels left out, taken with what the tensors held); errors.
#include "fast_llm/kernels/policy_gradient.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

struct Problem {
  int64_t tokens = 0, vocab = 0, documents = 0;
  std::vector<int64_t> labels;          // < 0 masked
  std::vector<double> advantages;       // (tokens)
  std::vector<double> old_log_probs;    // (tokens)
  std::vector<int32_t> label_documents; // (tokens)
};

struct Settings {
  bool gspo = false;
  double epsilon_low = 0.2, epsilon_high = 0.3;
  double logits_scale_factor = 1.0;
  std::optional<double> softcap = std::nullopt;
};

// ---------------------------------------------------------------------------------------------------------------------
// The formulas in double, straight from Fast-LLM's definitions (reference/fast-llm.md §4).

// Row `token` of the logits as the losses see them (scaled, soft-capped) into `z`; returns sum_k exp(z_k).
double naive_row(const std::vector<double>& logits, const Problem& problem, const Settings& settings, int64_t token,
                 std::vector<double>& z) {
  z.assign(size_t(problem.vocab), 0.0);
  double sum = 0;
  for (int64_t column = 0; column < problem.vocab; ++column) {
    double value = logits[size_t(token * problem.vocab + column)] * settings.logits_scale_factor;
    if (settings.softcap) value = *settings.softcap * std::tanh(value / *settings.softcap);
    z[size_t(column)] = value;
    sum += std::exp(value);
  }
  return sum;
}

std::vector<double> naive_log_probs(const std::vector<double>& logits, const Problem& problem,
                                    const Settings& settings) {
  std::vector<double> log_probs(size_t(problem.tokens), 0.0);
  for (int64_t token = 0; token < problem.tokens; ++token) {
    if (problem.labels[size_t(token)] < 0) continue;
    std::vector<double> z;
    const double sum = naive_row(logits, problem, settings, token, z);
    log_probs[size_t(token)] = z[size_t(problem.labels[size_t(token)])] - std::log(sum);
  }
  return log_probs;
}

double clipped_loss(double ratio, double advantage, const Settings& settings) {
  const double clipped = std::min(std::max(ratio, 1.0 - settings.epsilon_low), 1.0 + settings.epsilon_high);
  return -std::min(ratio * advantage, clipped * advantage);
}

struct NaiveResult {
  double loss = 0;
  std::map<PolicyMetric, double> metrics;
};

NaiveResult naive(const std::vector<double>& logits, const Problem& problem, const Settings& settings) {
  const std::vector<double> log_probs = naive_log_probs(logits, problem, settings);
  // Per document: labels, mean log-ratio, mean advantage.
  std::map<int32_t, std::vector<int64_t>> members;
  for (int64_t token = 0; token < problem.tokens; ++token)
    if (problem.labels[size_t(token)] >= 0) members[problem.label_documents[size_t(token)]].push_back(token);
  NaiveResult result;
  for (const auto& [document, tokens] : members) {
    const double count = double(tokens.size());
    double mean_log_ratio = 0, mean_advantage = 0;
    for (int64_t token : tokens) {
      mean_log_ratio += (log_probs[size_t(token)] - problem.old_log_probs[size_t(token)]) / count;
      mean_advantage += problem.advantages[size_t(token)] / count;
    }
    if (settings.gspo) {
      const double ratio = std::exp(mean_log_ratio);
      result.loss += count * clipped_loss(ratio, mean_advantage, settings);  // length-proportional
      result.metrics[PolicyMetric::ratio_new_old_sum] += ratio;
      result.metrics[PolicyMetric::ratio_new_old_squared_sum] += ratio * ratio;
      result.metrics[PolicyMetric::ratio_new_old] += ratio;
      result.metrics[PolicyMetric::kl_new_old] += ratio - mean_log_ratio - 1;
      result.metrics[PolicyMetric::clipped_ratio_fraction] +=
          (ratio < 1 - settings.epsilon_low || ratio > 1 + settings.epsilon_high) ? 1.0 : 0.0;
      result.metrics[PolicyMetric::advantage] += mean_advantage;
    }
    for (int64_t token : tokens) {
      const double log_ratio = log_probs[size_t(token)] - problem.old_log_probs[size_t(token)];
      const double ratio = std::exp(log_ratio), advantage = problem.advantages[size_t(token)];
      result.metrics[PolicyMetric::new_logprobs] += log_probs[size_t(token)] / count;
      result.metrics[PolicyMetric::old_logprobs] += problem.old_log_probs[size_t(token)] / count;
      result.metrics[PolicyMetric::num_tokens] += 1;
      if (settings.gspo) continue;
      result.loss += clipped_loss(ratio, advantage, settings);
      result.metrics[PolicyMetric::ratio_new_old_sum] += ratio;
      result.metrics[PolicyMetric::ratio_new_old_squared_sum] += ratio * ratio;
      result.metrics[PolicyMetric::ratio_new_old] += ratio / count;
      result.metrics[PolicyMetric::kl_new_old] += (ratio - log_ratio - 1) / count;
      result.metrics[PolicyMetric::clipped_ratio_fraction] +=
          ((ratio < 1 - settings.epsilon_low || ratio > 1 + settings.epsilon_high) ? 1.0 : 0.0) / count;
      result.metrics[PolicyMetric::advantage] += advantage / count;
    }
    result.metrics[PolicyMetric::num_segments] += 1;
  }
  // Entropy: -sum p log p of each labelled row, averaged per document.
  for (const auto& [document, tokens] : members)
    for (int64_t token : tokens) {
      std::vector<double> z;
      const double sum = naive_row(logits, problem, settings, token, z);
      double entropy = 0;
      for (double value : z) {
        const double p = std::exp(value) / sum;
        entropy -= p * std::log(p);
      }
      result.metrics[PolicyMetric::entropy] += entropy / double(tokens.size());
    }
  return result;
}

// ---------------------------------------------------------------------------------------------------------------------
// Calls of the op (on the CPU: its contract, then the reference variant).

struct Result {
  double loss = 0;
  std::vector<double> metrics;
  double max_advantage = 0, min_advantage = 0;
};

// `extremes`: the values the advantage extremes start at (max, min).
Result run(const Tensor& logits, const Problem& problem, const Settings& settings, Tensor* grad_logits,
           double grad_weight = 1.0, DType sum_dtype = DType::float64,
           std::pair<double, double> extremes = {-INFINITY, INFINITY}) {
  Tensor loss_sum = filled(Shape{1}, sum_dtype, 0.0);
  Tensor metric_sums = filled(Shape{kPolicyMetricCount}, sum_dtype, 0.0);
  Tensor max_advantage = filled(Shape{1}, sum_dtype, extremes.first);
  Tensor min_advantage = filled(Shape{1}, sum_dtype, extremes.second);
  const Tensor labels = make_tensor(std::vector<double>(problem.labels.begin(), problem.labels.end()),
                                    Shape{problem.tokens}, DType::int64);
  const Tensor advantages = make_tensor(problem.advantages, Shape{problem.tokens}, DType::float32);
  const Tensor old_log_probs = make_tensor(problem.old_log_probs, Shape{problem.tokens}, DType::float32);
  const Tensor documents =
      make_tensor(std::vector<double>(problem.label_documents.begin(), problem.label_documents.end()),
                  Shape{problem.tokens}, DType::int32);
  policy_gradient_forward_backward({.logits = logits,
                                    .labels = labels,
                                    .advantages = advantages,
                                    .old_log_probabilities = old_log_probs,
                                    .label_documents = documents,
                                    .num_documents = problem.documents,
                                    .sequence_level = settings.gspo,
                                    .loss_sum = loss_sum,
                                    .metric_sums = &metric_sums,
                                    .grad_logits = grad_logits,
                                    .grad_weight = grad_weight,
                                    .epsilon_low = settings.epsilon_low,
                                    .epsilon_high = settings.epsilon_high,
                                    .logits_scale_factor = settings.logits_scale_factor,
                                    .softcap = settings.softcap,
                                    .max_advantage = &max_advantage,
                                    .min_advantage = &min_advantage});
  return {values_of(loss_sum)[0], values_of(metric_sums), values_of(max_advantage)[0], values_of(min_advantage)[0]};
}

// Three documents over 11 tokens, some labels masked (document starts, a loss-masking span); advantages constant per
// document (as rollouts give them) and old log-probs near the current ones so that some ratios clip and some do not.
// Values are rounded to float32, as the data carries them.
Problem random_problem(uint64_t seed) {
  Problem problem{.tokens = 11, .vocab = 7, .documents = 3};
  problem.labels = {3, 1, -100, 6, 0, 2, -100, 5, 5, 4, 1};
  problem.label_documents = {0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2};
  const double document_advantages[] = {0.7, -1.3, 0.4};
  const std::vector<double> noise = uniform_values(problem.tokens, seed, -0.6, 0.6);
  for (int64_t token = 0; token < problem.tokens; ++token) {
    problem.advantages.push_back(double(float(document_advantages[problem.label_documents[size_t(token)]])));
    problem.old_log_probs.push_back(double(float(-2.0 + noise[size_t(token)])));
  }
  return problem;
}

TEST(PolicyGradientTest, LossMetricsAndGradientMatchTheFormulasAndFiniteDifferences) {
  for (bool gspo : {false, true})
    for (double scale : {1.0, 0.7})
      for (std::optional<double> softcap : {std::optional<double>(), std::optional<double>(2.5)}) {
        const Settings settings{.gspo = gspo, .logits_scale_factor = scale, .softcap = softcap};
        const std::string what = fmt::format("gspo={} scale={} softcap={}", gspo, scale, softcap.value_or(0.0));
        const Problem problem = random_problem(11 + uint64_t(gspo));
        Tensor logits = random_tensor(Shape{problem.tokens, problem.vocab}, DType::float64, 5, -2.0, 2.0);
        Tensor grad = filled(logits.shape(), DType::float64, 123.0);
        const Result result = run(logits, problem, settings, &grad, 1.0);
        const NaiveResult expected = naive(values_of(logits), problem, settings);
        EXPECT_NEAR(result.loss, expected.loss, 1e-12) << what;
        for (int index = 0; index < kPolicyMetricCount; ++index) {
          const auto found = expected.metrics.find(PolicyMetric(index));
          const double value = found == expected.metrics.end() ? 0.0 : found->second;
          EXPECT_NEAR(result.metrics[size_t(index)], value, 1e-12) << what << " metric " << index;
        }
        const std::vector<double> numeric = finite_difference_gradient(
            logits, [&] { return naive(values_of(logits), problem, settings).loss; });
        expect_near(grad, numeric, 1e-8, 1e-6, what);
        // Masked rows: gradient 0.
        const std::vector<double> grads = values_of(grad);
        for (int64_t column = 0; column < problem.vocab; ++column)
          EXPECT_EQ(grads[size_t(2 * problem.vocab + column)], 0.0) << what;
      }
}

TEST(PolicyGradientTest, RatioIsOneWhenTheOldLogProbsAreTheCurrentOnes) {
  for (bool gspo : {false, true}) {
    const Settings settings{.gspo = gspo};
    Problem problem = random_problem(3);
    const Tensor logits = random_tensor(Shape{problem.tokens, problem.vocab}, DType::float64, 9, -2.0, 2.0);
    const std::vector<double> current = naive_log_probs(values_of(logits), problem, settings);
    problem.old_log_probs = current;  // rounded to float32 in the tensor: ratios within 1e-7 of 1
    const Result result = run(logits, problem, settings, nullptr);
    double advantage_sum = 0;
    int64_t labels = 0;
    for (int64_t token = 0; token < problem.tokens; ++token)
      if (problem.labels[size_t(token)] >= 0) {
        advantage_sum += problem.advantages[size_t(token)];
        ++labels;
      }
    // loss = -sum of advantages, i.e. -(mean advantage) once divided by the labels.
    EXPECT_NEAR(result.loss / double(labels), -advantage_sum / double(labels), 1e-6) << gspo;
    EXPECT_NEAR(result.metrics[size_t(PolicyMetric::ratio_new_old)], 3.0, 1e-6) << gspo;  // 1 per document
    EXPECT_NEAR(result.metrics[size_t(PolicyMetric::kl_new_old)], 0.0, 1e-10) << gspo;
    EXPECT_EQ(result.metrics[size_t(PolicyMetric::clipped_ratio_fraction)], 0.0) << gspo;
    EXPECT_EQ(result.metrics[size_t(PolicyMetric::num_tokens)], double(labels)) << gspo;
  }
}

// One token, vocabulary 2, logits (0, 0): the label's new log-prob is log(1/2); the old one sets the ratio.
TEST(PolicyGradientTest, ClippingOnBothSides) {
  struct Case {
    double ratio, advantage, loss;
    bool has_gradient;
  };
  // epsilon_low 0.2, epsilon_high 0.3: the clip range is [0.8, 1.3].
  const Case cases[] = {
      {1.5, 2.0, -1.3 * 2.0, false},  // above, positive advantage: clipped, no gradient
      {1.5, -2.0, 1.5 * 2.0, true},   // above, negative advantage: the unclipped term is the min, gradient
      {0.5, -2.0, 0.8 * 2.0, false},  // below, negative advantage: clipped, no gradient
      {0.5, 2.0, -0.5 * 2.0, true},   // below, positive advantage: unclipped, gradient
      {1.1, 2.0, -1.1 * 2.0, true},   // inside
  };
  for (bool gspo : {false, true})
    for (const Case& check : cases) {
      const Settings settings{.gspo = gspo};
      Problem problem{.tokens = 1, .vocab = 2, .documents = 1};
      problem.labels = {1};
      problem.label_documents = {0};
      problem.advantages = {check.advantage};
      problem.old_log_probs = {std::log(0.5) - std::log(check.ratio)};
      const Tensor logits = filled(Shape{1, 2}, DType::float64, 0.0);
      Tensor grad = filled(Shape{1, 2}, DType::float64, 0.0);
      const Result result = run(logits, problem, settings, &grad);
      const std::string what = fmt::format("gspo={} ratio={} advantage={}", gspo, check.ratio, check.advantage);
      EXPECT_NEAR(result.loss, check.loss, 1e-6) << what;
      const bool clipped = check.ratio < 0.8 || check.ratio > 1.3;
      EXPECT_EQ(result.metrics[size_t(PolicyMetric::clipped_ratio_fraction)], clipped ? 1.0 : 0.0) << what;
      // d loss / d z_label = -c (1 - p) with c = advantage * ratio when not clipped; p = 1/2.
      const double expected = check.has_gradient ? -check.advantage * check.ratio * 0.5 : 0.0;
      EXPECT_NEAR(values_of(grad)[1], expected, 1e-6) << what;
      EXPECT_NEAR(values_of(grad)[0], -expected, 1e-6) << what;
    }
}

TEST(PolicyGradientTest, InPlaceMatchesOutOfPlaceAndFloat32MatchesFloat64) {
  for (bool gspo : {false, true}) {
    const Settings settings{.gspo = gspo, .logits_scale_factor = 0.9};
    const Problem problem = random_problem(21);
    const Tensor logits = random_tensor(Shape{problem.tokens, problem.vocab}, DType::float64, 4, -2.0, 2.0);
    Tensor grad = filled(logits.shape(), DType::float64, 0.0);
    const Result expected = run(logits, problem, settings, &grad, 0.25);
    Tensor in_place = converted(logits, DType::float64);
    const Result result = run(in_place, problem, settings, &in_place, 0.25);
    EXPECT_EQ(result.loss, expected.loss);
    expect_near(in_place, values_of(grad), 0.0, 0.0, "in place");
    Tensor logits32 = converted(logits, DType::float32);
    Tensor grad32 = filled(logits.shape(), DType::float32, 0.0);
    const Result result32 = run(logits32, problem, settings, &grad32, 0.25, DType::float32);
    EXPECT_NEAR(result32.loss, expected.loss, 1e-4);
    expect_near(grad32, values_of(grad), 1e-6, 1e-4, "float32");
  }
}

// The largest and smallest advantage of the unmasked labels, as Fast-LLM's `max_advantage` / `min_advantage`: the
// tokens' own advantages for GSPO too (not the document means), masked labels left out however extreme their
// advantage, and combined with what the tensors held (max= / min=) so that chunks and micro-batches reduce in any
// order.
TEST(PolicyGradientTest, AdvantageExtremesOfTheUnmaskedLabels) {
  for (bool gspo : {false, true}) {
    const Settings settings{.gspo = gspo};
    Problem problem = random_problem(5);
    // Per token, not constant per document: token 3 holds the largest, token 9 the smallest; the masked tokens 2 and 6
    // hold values beyond both.
    problem.advantages = {0.7, 0.1, 9.0, 1.25, -0.5, 0.3, -9.0, 0.2, -0.4, -1.75, 0.0};
    const Tensor logits = random_tensor(Shape{problem.tokens, problem.vocab}, DType::float64, 8, -2.0, 2.0);
    Result result = run(logits, problem, settings, nullptr);
    EXPECT_EQ(result.max_advantage, 1.25) << gspo;
    EXPECT_EQ(result.min_advantage, -1.75) << gspo;
    // Starting values beyond the labels' extremes are kept; inside them, replaced. fp32 sums hold the same values.
    result = run(logits, problem, settings, nullptr, 1.0, DType::float64, {2.0, -3.0});
    EXPECT_EQ(result.max_advantage, 2.0) << gspo;
    EXPECT_EQ(result.min_advantage, -3.0) << gspo;
    result = run(converted(logits, DType::float32), problem, settings, nullptr, 1.0, DType::float32, {0.5, 0.5});
    EXPECT_EQ(result.max_advantage, 1.25) << gspo;
    EXPECT_EQ(result.min_advantage, -1.75) << gspo;
    // No unmasked label: the extremes stay where they started.
    for (int64_t& label : problem.labels) label = -100;
    result = run(logits, problem, settings, nullptr);
    EXPECT_EQ(result.max_advantage, -INFINITY) << gspo;
    EXPECT_EQ(result.min_advantage, INFINITY) << gspo;
  }
}

TEST(PolicyGradientTest, Errors) {
  Problem problem = random_problem(1);
  problem.label_documents[4] = 3;  // outside [0, 3)
  const Tensor logits = random_tensor(Shape{problem.tokens, problem.vocab}, DType::float64, 4);
  expect_error([&] { run(logits, problem, {.gspo = true}, nullptr); }, "belongs to document 3, outside [0, 3)");
  problem = random_problem(1);
  problem.labels[0] = 7;
  expect_error([&] { run(logits, problem, {}, nullptr); }, "outside the vocabulary");
  const Tensor bad_logits = random_tensor(Shape{problem.tokens + 1, problem.vocab}, DType::float64, 4);
  expect_error([&] { run(bad_logits, random_problem(1), {}, nullptr); }, "labels");
}

}  // namespace
}  // namespace fast_llm::kernels
