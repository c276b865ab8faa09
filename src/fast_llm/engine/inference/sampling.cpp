// Sampling of the next token (sampling.h): greedy is one pass for the arg max; otherwise the candidates are sorted by
// logit only as far as top-k needs (a partial sort), probabilities taken in fp64 relative to the largest logit, the
// nucleus cut on the sorted cumulative sum, and the draw walks the kept candidates in that order.
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
  for (int64_t index = 0; index < vocab; ++index) {
    const double value = processed(logits[size_t(index)], settings) / settings.temperature;
    values[size_t(index)] = std::isnan(value) ? -INFINITY : value;
  }
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), int64_t(0));
  // Largest first, ties by index, so the order (and the draw) does not depend on the sort's implementation.
  auto before = [&](int64_t a, int64_t b) {
    return values[size_t(a)] > values[size_t(b)] || (values[size_t(a)] == values[size_t(b)] && a < b);
  };
  int64_t kept = vocab;
  if (settings.top_k > 0 && settings.top_k < vocab) {
    std::partial_sort(order.begin(), order.begin() + settings.top_k, order.end(), before);
    // Hugging Face keeps every logit >= the k-th largest.
    const double threshold = values[size_t(order[size_t(settings.top_k - 1)])];
    kept = settings.top_k;
    std::sort(order.begin() + kept, order.end(), before);
    while (kept < vocab && values[size_t(order[size_t(kept)])] >= threshold) ++kept;
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  const double maximum = values[size_t(order[0])];
  if (maximum == -INFINITY) return order[0];
  std::vector<double> weights(static_cast<size_t>(kept));
  double total = 0.0;
  for (int64_t rank = 0; rank < kept; ++rank) {
    weights[size_t(rank)] = std::exp(values[size_t(order[size_t(rank)])] - maximum);
    total += weights[size_t(rank)];
  }
  if (settings.top_p < 1.0) {
    // The smallest prefix whose probability reaches top_p (Hugging Face removes the tokens whose cumulative
    // probability before them already exceeds top_p, and always keeps the first).
    double cumulative = 0.0;
    int64_t prefix = 0;
    while (prefix < kept && (prefix == 0 || cumulative < settings.top_p * total))
      cumulative += weights[size_t(prefix++)];
    kept = prefix;
    total = cumulative;
  }
  const double target = double(random_uniform(derive_seed(settings.seed, sequence), step)) * total;
  double cumulative = 0.0;
  for (int64_t rank = 0; rank < kept; ++rank) {
    cumulative += weights[size_t(rank)];
    if (target <= cumulative) return order[size_t(rank)];
  }
  return order[size_t(kept - 1)];
}

}  // namespace fast_llm::engine
