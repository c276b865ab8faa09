#include "fast_llm/layers/language_model/reference_losses.h"

#include <fmt/format.h>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/dpo.h"
#include "fast_llm/kernels/pointwise.h"
#include "fast_llm/layers/language_model/loss_config.h"

namespace fast_llm::layers {

namespace {

kernels::DistillationLossType kernel_loss_type(EntropyLossType type) {
  switch (type) {
    case EntropyLossType::cross_entropy: return kernels::DistillationLossType::cross_entropy;
    case EntropyLossType::forward_kl: return kernels::DistillationLossType::forward_kl;
    case EntropyLossType::reverse_kl: return kernels::DistillationLossType::reverse_kl;
  }
  return kernels::DistillationLossType::cross_entropy;
}

}  // namespace

bool ReferenceLosses::take(const std::string& name, const LanguageModelLossConfig& loss,
                           const LanguageModelHeadConfig& head, const std::string& path) {
  if (const auto* distillation = dynamic_cast<const DistillationLossConfig*>(&loss)) {
    if (distillation_)
      throw NotSupportedError("layers", fmt::format("{}: at most one distillation loss is supported, '{}' is another",
                                                    path, distillation_->name));
    distillation_ = Distillation{.name = name,
                                 .reference_model = distillation->reference_model,
                                 .weight = distillation->weight,
                                 .temperature = distillation->temperature,
                                 .loss_type = kernel_loss_type(distillation->loss_type)};
    return true;
  }
  if (const auto* dpo = dynamic_cast<const DpoLossConfig*>(&loss)) {
    if (dpo_)
      throw NotSupportedError("layers",
                              fmt::format("{}: at most one dpo loss is supported, '{}' is another", path, dpo_->name));
    // A pair's sums need all its rows in one call (Fast-LLM's dpo refuses splits too).
    if (head.cross_entropy_splits != 1)
      throw NotSupportedError("layers",
                              fmt::format("{}: the dpo loss needs {} 1 (it is {})", path,
                                          head.field_path("cross_entropy_splits"), head.cross_entropy_splits));
    if (head.final_logit_softcap)
      throw NotSupportedError("layers", fmt::format("{}: the dpo loss does not support {}", path,
                                                    head.field_path("final_logit_softcap")));
    dpo_ = Dpo{.name = name, .reference_model = *dpo->reference_model, .weight = dpo->weight, .beta = dpo->beta};
    return true;
  }
  return false;
}

ReferenceLosses::Sums ReferenceLosses::zero_sums(Device device, Stream stream) const {
  auto zero = [&] {
    Tensor scalar = Tensor::empty(Shape{1}, device.is_cpu() ? DType::float64 : DType::float32, device, stream);
    kernels::fill({.tensor = scalar, .value = 0.0, .stream = stream});
    return scalar;
  };
  Sums sums;
  if (distillation_) sums.distillation = zero();
  if (dpo_) sums.dpo = zero();
  return sums;
}

Tensor ReferenceLosses::reference_rows(const std::map<std::string, Tensor>& outputs, std::string_view what,
                                       const std::string& loss, const std::string& model, int64_t begin, int64_t end,
                                       int64_t rows) {
  const auto found = outputs.find(model);
  FLM_CHECK(found != outputs.end(), "head",
            "loss '{}' reads the {} of reference model '{}', which the micro-batch does not have (is it in "
            "`reference_models`?)",
            loss, what, model);
  FLM_ASSERT(found->second.size(0) == rows,
             "the {} of reference model '{}' have {} rows and the head computes {} (both must follow "
             "LanguageModelHead::computes_loss_rows_only)",
             what, model, found->second.size(0), rows);
  return found->second.slice(0, begin, end);
}

kernels::CrossEntropyDistillation ReferenceLosses::distillation_term(const LayerContext& context, int64_t begin,
                                                                     int64_t end, int64_t rows, Tensor& teacher,
                                                                     Sums& sums) const {
  FLM_ASSERT(distillation_.has_value(), "distillation_term without a distillation loss");
  teacher = reference_rows(context.batch.reference_logits, "logits", distillation_->name,
                           distillation_->reference_model, begin, end, rows);
  return {.target_logits = teacher,
          .loss_sum = sums.distillation,
          .loss_type = distillation_->loss_type,
          .temperature = distillation_->temperature,
          .weight = distillation_->weight * context.loss_gradient_scale};
}

void ReferenceLosses::dpo_forward_backward(const LayerContext& context, const Tensor& logits, const Tensor& labels,
                                           std::span<const kernels::PreferencePair> row_pairs, int64_t rows,
                                           Sums& sums, double logits_scale_factor, Tensor* row_coefficients) const {
  FLM_ASSERT(dpo_.has_value(), "dpo_forward_backward without a dpo loss");
  FLM_ASSERT(!context.training || row_coefficients != nullptr,
             "in training the dpo loss hands its gradient to the cross-entropy pass through row_coefficients");
  FLM_ASSERT(logits.size(0) == rows && labels.numel() == rows, "the dpo loss runs on whole micro-batches");
  const int64_t pairs = context.batch.preference_pairs_in_step;
  FLM_CHECK(pairs > 0 || !context.training, "head",
            "the dpo loss '{}' needs preference pairs (the chosen_spans and rejected_spans of the dataset), and the "
            "step has none: prepare the data with source_schema.chosen_span and rejected_span",
            dpo_->name);
  const Tensor reference = reference_rows(context.batch.reference_label_log_probabilities, "label log-probabilities",
                                         dpo_->name, dpo_->reference_model, 0, rows, rows);
  kernels::dpo_forward_backward({.logits = logits,
                                 .reference_log_probabilities = reference,
                                 .labels = labels,
                                 .pairs = row_pairs,
                                 .loss_sum = sums.dpo,
                                 .grad_logits = nullptr,
                                 .row_coefficients = row_coefficients,
                                 .beta = dpo_->beta,
                                 .weight = pairs > 0 ? dpo_->weight * context.loss_scale / double(pairs) : 0.0,
                                 .logits_scale_factor = logits_scale_factor,
                                 .stream = context.stream});
}

void ReferenceLosses::add_losses(const LayerContext& context, const Sums& sums, const std::string& total_name) const {
  if (context.losses == nullptr) return;
  const Device device = context.device;
  Tensor& total = context.losses->get(total_name, device);
  if (distillation_) {
    kernels::axpy({.input = sums.distillation, .output = context.losses->get(distillation_->name, device),
                   .alpha = 1.0, .stream = context.stream});
    kernels::axpy({.input = sums.distillation, .output = total, .alpha = distillation_->weight,
                   .stream = context.stream});
  }
  if (dpo_) {
    const int64_t pairs = context.batch.preference_pairs_in_step;
    const double mean = pairs > 0 ? 1.0 / double(pairs) : 0.0;
    kernels::axpy({.input = sums.dpo,
                   .output = context.losses->get(dpo_->name, device, LossNormalization::normalized),
                   .alpha = mean,
                   .stream = context.stream});
    kernels::axpy({.input = sums.dpo,
                   .output = total,
                   .alpha = dpo_->weight * mean * double(context.batch.labels_in_step),
                   .stream = context.stream});
  }
}

}  // namespace fast_llm::layers
