// The head's policy-gradient loss (`type: grpo` or `gspo`), as Fast-LLM's LanguageModelGRPOLoss / GSPOLoss: runs
// kernels/policy_gradient.h on each chunk of logits with the micro-batch's token data (advantages and old
// log-probabilities aligned with the labels) and adds the loss and its metrics to the context's loss sums.
//
// Normalisation (reference/fast-llm.md §4): GRPO is sum over labels / labels in the step (the head's per-label
// normalisation); GSPO is sum over documents of (labels of the document * its loss) / documents in the step, and its
// gradient is scaled accordingly. Logged, under Fast-LLM's names: `<name>` (the loss), `<name>_new_logprobs` (mean
// over documents of each document's mean new log-prob) always, and with `metrics: basic` (or `auto`: the head always
// sees the whole vocabulary, so basic) `<name>_{old_logprobs, ratio_new_old, ratio_new_old_sum,
// ratio_new_old_squared_sum, kl_new_old, clipped_ratio_fraction, advantage, max_advantage, min_advantage, num_tokens,
// entropy}` and, for GSPO, `<name>_num_segments`. Per-document means are divided by the documents in the step; the
// `_sum`s and counts are plain sums over the step; `_max_advantage` / `_min_advantage` are the extremes of the
// unmasked labels' advantages over the step (LossNormalization::maximum / minimum: taken by the op straight into the
// step's LossSums; -inf / +inf, left out of the log, in a step without labels). Fast-LLM's streaming-only reward /
// staleness metrics are not logged.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "fast_llm/kernels/policy_gradient.h"
#include "fast_llm/layers/context.h"
#include "fast_llm/layers/language_model/loss_config.h"

namespace fast_llm::layers {

// Fast-LLM's name of each metric sum, in kernels::PolicyMetric order (logged as `<loss name>_<metric name>`).
inline constexpr std::array<std::string_view, kernels::kPolicyMetricCount> kPolicyMetricNames = {
    "new_logprobs", "old_logprobs", "ratio_new_old", "ratio_new_old_sum", "ratio_new_old_squared_sum", "kl_new_old",
    "clipped_ratio_fraction", "advantage", "num_tokens", "num_segments", "entropy"};
static_assert(!kPolicyMetricNames.back().empty(), "kernels::PolicyMetric changed: name the new metric here");

inline std::string_view policy_metric_name(kernels::PolicyMetric metric) { return kPolicyMetricNames[size_t(metric)]; }

class PolicyGradientLoss {
 public:
  PolicyGradientLoss(std::string name, const PolicyGradientLossConfig& config, bool sequence_level);

  const std::string& name() const { return name_; }
  bool sequence_level() const { return sequence_level_; }

  // Starts a micro-batch: checks that it carries token data and zeroes the sums (on the logits' device).
  void begin(const LayerContext& context);
  // The loss on logits (chunk, vocab) of the micro-batch's tokens [begin, end). It writes no gradient: in training it
  // adds (+=) its per-row gradient coefficients to row_coefficients (chunk), and the head's cross-entropy pass writes
  // the gradient (nullptr: no gradient, e.g. validation).
  void forward_chunk(const LayerContext& context, const Tensor& logits, int64_t begin, int64_t end,
                     double logits_scale_factor, std::optional<double> softcap, Tensor* row_coefficients);
  // Adds the micro-batch's loss and metrics to context.losses, and weight * loss to the head total `total_name`.
  void add_losses(const LayerContext& context, const std::string& total_name) const;

 private:
  // Labels and documents in the step: the trainer's counts, or this micro-batch's alone when it is run by itself.
  static int64_t labels_in_step(const MicroBatch& batch);
  static int64_t documents_in_step(const MicroBatch& batch);

  std::string name_;
  double weight_;
  double epsilon_low_, epsilon_high_;
  bool sequence_level_;
  bool metrics_;
  Tensor loss_sum_;     // (1)
  Tensor metric_sums_;  // (kPolicyMetricCount)
};

}  // namespace fast_llm::layers
