// Sampling of the next token (sampling.h): greedy is one pass for the arg max. Otherwise probabilities are taken in
// fp64 relative to the largest logit; top-k selects its candidates in linear time (nth_element, then the ties) and
// sorts only those; top-p sorts the most likely tokens in growing pieces until the nucleus is complete; the draw walks
// the kept candidates in that order (in index order when no filter applies, without sorting anything).
#include "fast_llm/engine/inference/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "fast_llm/core/random.h"

namespace fast_llm::engine {

namespace {

double processed(float logit, const SamplingSettings& settings) {
  double value = logit;
  if (settings.softcap) value = *settings.softcap * std::tanh(value / *settings.softcap);
  return value;
}

}  // namespace

int64_t sample_token(std::span<const float> logits, const SamplingSettings& settings, uint64_t sequence,
                     uint64_t step) {
  const int64_t vocab = int64_t(logits.size());
  if (settings.temperature <= 0.0) {
    // Softcap is monotonic: the arg max of the raw logits. NaN never wins a comparison.
    int64_t best = 0;
    for (int64_t index = 1; index < vocab; ++index)
      if (logits[size_t(index)] > logits[size_t(best)] || std::isnan(logits[size_t(best)])) best = index;
    return best;
  }
  std::vector<double> values(static_cast<size_t>(vocab));
  double maximum = -INFINITY;
  for (int64_t index = 0; index < vocab; ++index) {
    const double value = processed(logits[size_t(index)], settings) / settings.temperature;
    values[size_t(index)] = std::isnan(value) ? -INFINITY : value;
    maximum = std::max(maximum, values[size_t(index)]);
  }
  // Largest first, ties by index, so the order (and the draw) does not depend on the sort's implementation.
  auto before = [&](int64_t a, int64_t b) {
    return values[size_t(a)] > values[size_t(b)] || (values[size_t(a)] == values[size_t(b)] && a < b);
  };
  // The candidates, and how many of them are kept: all (in index order), or a prefix of the candidates in `before`
  // order once a filter applies.
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (maximum == -INFINITY) return 0;
  int64_t kept = vocab;
  bool sorted = false;
  if (settings.top_k > 0 && settings.top_k < vocab) {
    std::nth_element(order.begin(), order.begin() + (settings.top_k - 1), order.end(), before);
    // Hugging Face keeps every logit >= the k-th largest (ties at the k-th included).
    const double threshold = values[size_t(order[size_t(settings.top_k - 1)])];
    kept = int64_t(std::partition(order.begin(), order.end(),
                                  [&](int64_t index) { return values[size_t(index)] >= threshold; }) -
                   order.begin());
    std::sort(order.begin(), order.begin() + kept, before);
    sorted = true;
  }
  // Unnormalised probabilities relative to the largest, in place of the values (exp is monotonic: `before` orders
  // them as it ordered the values).
  std::vector<double>& weights = values;
  for (double& value : weights) value = std::exp(value - maximum);
  double total = 0.0;
  for (int64_t rank = 0; rank < kept; ++rank) total += weights[size_t(order[size_t(rank)])];
  if (settings.top_p < 1.0) {
    // The smallest prefix of the most likely tokens whose probability reaches top_p (Hugging Face removes the tokens
    // whose cumulative probability before them already exceeds top_p, and always keeps the first). The prefix is
    // sorted in growing pieces: the nucleus is usually a few tokens of a large vocabulary.
    const double target = settings.top_p * total;
    int64_t prefix = 0, ready = sorted ? kept : 0;
    double cumulative = 0.0;
    while (prefix < kept && (prefix == 0 || cumulative < target)) {
      if (prefix == ready) {
        const int64_t next = std::min(kept, std::max<int64_t>(64, 2 * ready));
        std::partial_sort(order.begin() + ready, order.begin() + next, order.begin() + kept, before);
        ready = next;
      }
      cumulative += weights[size_t(order[size_t(prefix++)])];
    }
    kept = prefix;
    total = cumulative;
  }
  const double target = double(random_uniform(derive_seed(settings.seed, sequence), step)) * total;
  double cumulative = 0.0;
  for (int64_t rank = 0; rank < kept; ++rank) {
    cumulative += weights[size_t(order[size_t(rank)])];
    if (target <= cumulative) return order[size_t(rank)];
  }
  // Rounding left the target above the last sum: the last kept token.
  return order[size_t(kept - 1)];
}

}  // namespace fast_llm::engine
