#include "fast_llm/layers/language_model/policy_gradient_loss.h"

#include <fmt/format.h>

#include <utility>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/pointwise.h"
#include "fast_llm/kernels/policy_gradient.h"

namespace fast_llm::layers {

namespace {

using kernels::PolicyMetric;

// Metrics logged as per-document means (divided by the documents in the step); the others are plain sums.
constexpr PolicyMetric kMeanMetrics[] = {PolicyMetric::old_logprobs, PolicyMetric::ratio_new_old,
                                         PolicyMetric::kl_new_old,   PolicyMetric::clipped_ratio_fraction,
                                         PolicyMetric::advantage,    PolicyMetric::entropy};
constexpr PolicyMetric kSumMetrics[] = {PolicyMetric::ratio_new_old_sum, PolicyMetric::ratio_new_old_squared_sum,
                                        PolicyMetric::num_tokens};

Tensor zeros(Shape shape, Device device, Stream stream) {
  Tensor tensor = Tensor::empty(shape, device.is_cpu() ? DType::float64 : DType::float32, device, stream);
  kernels::fill({.tensor = tensor, .value = 0.0, .stream = stream});
  return tensor;
}

}  // namespace

PolicyGradientLoss::PolicyGradientLoss(std::string name, const PolicyGradientLossConfig& config, bool sequence_level)
    : name_(std::move(name)),
      weight_(config.weight),
      epsilon_low_(config.epsilon_low),
      epsilon_high_(config.epsilon_high),
      sequence_level_(sequence_level),
      metrics_(config.metrics != PolicyMetricsLevel::none) {}

int64_t PolicyGradientLoss::labels_in_step(const MicroBatch& batch) {
  if (batch.labels_in_step > 0) return batch.labels_in_step;
  // A micro-batch run by itself (tests, tools): its own labels, counted on the host (begin() allows only the CPU).
  int64_t count = 0;
  for (int64_t index = 0; index < batch.labels.numel(); ++index)
    count += batch.labels.data_as<int64_t>()[index * batch.labels.stride(0)] >= 0;
  return count;
}

int64_t PolicyGradientLoss::documents_in_step(const MicroBatch& batch) {
  return batch.documents_in_step > 0 ? batch.documents_in_step : batch.num_documents;
}

void PolicyGradientLoss::begin(const LayerContext& context) {
  const MicroBatch& batch = context.batch;
  if (!batch.advantages.defined() || !batch.old_log_probabilities.defined() || !batch.label_documents.defined())
    throw Error("head", fmt::format("loss '{}' ({}) needs advantages and old log-probabilities: the training data "
                                    "carries no token data (prepare it with dataset.source_schema.advantages, or use "
                                    "a dataset file with `advantages` and `old_log_probabilities` sections)",
                                    name_, sequence_level_ ? "gspo" : "grpo"));
  loss_sum_ = zeros(Shape{1}, context.device, context.stream);
  metric_sums_ = zeros(Shape{kernels::kPolicyMetricCount}, context.device, context.stream);
}

void PolicyGradientLoss::forward_chunk(const LayerContext& context, const Tensor& logits, int64_t begin, int64_t end,
                                       double logits_scale_factor, std::optional<double> softcap,
                                       Tensor* row_coefficients) {
  const MicroBatch& batch = context.batch;
  FLM_CHECK(!sequence_level_ || (begin == 0 && end == batch.num_tokens()), "head",
            "loss '{}' (gspo) needs the whole micro-batch in one chunk (head.cross_entropy_splits: 1)", name_);
  // GRPO: / labels in the step (the head's loss_gradient_scale); GSPO: / documents in the step.
  const int64_t documents = documents_in_step(batch);
  const double scale = sequence_level_ ? (documents > 0 ? context.loss_scale / double(documents) : 0.0)
                                       : context.loss_gradient_scale;
  // The advantage extremes go straight into the step's (max= / min= combine in any order, nothing to normalise).
  Tensor* max_advantage = nullptr;
  Tensor* min_advantage = nullptr;
  if (metrics_ && context.losses != nullptr) {
    max_advantage = &context.losses->get(name_ + "_max_advantage", context.device, LossNormalization::maximum);
    min_advantage = &context.losses->get(name_ + "_min_advantage", context.device, LossNormalization::minimum);
  }
  kernels::policy_gradient_forward_backward({.logits = logits,
                                             .labels = batch.labels.slice(0, begin, end),
                                             .advantages = batch.advantages.slice(0, begin, end),
                                             .old_log_probabilities = batch.old_log_probabilities.slice(0, begin, end),
                                             .label_documents = batch.label_documents.slice(0, begin, end),
                                             .num_documents = batch.num_documents,
                                             .sequence_level = sequence_level_,
                                             .loss_sum = loss_sum_,
                                             .metric_sums = &metric_sums_,
                                             .grad_logits = nullptr,
                                             .grad_weight = weight_ * scale,
                                             .row_coefficients = row_coefficients,
                                             .epsilon_low = epsilon_low_,
                                             .epsilon_high = epsilon_high_,
                                             .logits_scale_factor = logits_scale_factor,
                                             .softcap = softcap,
                                             .max_advantage = max_advantage,
                                             .min_advantage = min_advantage,
                                             .stream = context.stream});
}

void PolicyGradientLoss::add_losses(const LayerContext& context, const std::string& total_name) const {
  if (context.losses == nullptr) return;
  const Device device = context.device;
  const Stream stream = context.stream;
  const double documents = double(documents_in_step(context.batch));
  const double per_document = documents > 0 ? 1.0 / documents : 0.0;
  auto add = [&](const Tensor& sum, const std::string& name, double alpha, LossNormalization normalization) {
    kernels::axpy({.input = sum, .output = context.losses->get(name, device, normalization), .alpha = alpha,
                   .stream = stream});
  };
  if (sequence_level_) {
    // The loss is the step's value already; the head total is per label, so it gets loss * labels in the step.
    add(loss_sum_, name_, per_document, LossNormalization::normalized);
    add(loss_sum_, total_name, weight_ * per_document * double(labels_in_step(context.batch)),
        LossNormalization::per_label);
  } else {
    add(loss_sum_, name_, 1.0, LossNormalization::per_label);
    add(loss_sum_, total_name, weight_, LossNormalization::per_label);
  }
  auto add_metric = [&](PolicyMetric index, double alpha) {
    add(metric_sums_.slice(0, int64_t(index), int64_t(index) + 1),
        fmt::format("{}_{}", name_, policy_metric_name(index)), alpha, LossNormalization::normalized);
  };
  add_metric(PolicyMetric::new_logprobs, per_document);
  if (!metrics_) return;
  for (const PolicyMetric index : kMeanMetrics) add_metric(index, per_document);
  for (const PolicyMetric index : kSumMetrics) add_metric(index, 1.0);
  if (sequence_level_) add_metric(PolicyMetric::num_segments, 1.0);
}

}  // namespace fast_llm::layers
