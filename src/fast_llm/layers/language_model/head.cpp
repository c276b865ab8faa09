#include "fast_llm/layers/language_model/head.h"

#include <fmt/format.h>

#include <algorithm>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/cross_entropy.h"
#include "fast_llm/kernels/embedding.h"
#include "fast_llm/kernels/gemm.h"
#include "fast_llm/kernels/pointwise.h"
#include "fast_llm/kernels/vocab_parallel_cross_entropy.h"
#include "fast_llm/layers/common/parameter_settings.h"
#include "fast_llm/layers/language_model/loss_config.h"

namespace fast_llm::layers {

namespace {

// A zeroed scalar in the dtype of the context's loss sums.
Tensor zero_scalar(Device device, Stream stream) {
  Tensor scalar = Tensor::empty(Shape{1}, device.is_cpu() ? DType::float64 : DType::float32, device, stream);
  kernels::fill({.tensor = scalar, .value = 0.0, .stream = stream});
  return scalar;
}

}  // namespace

LanguageModelHead::LanguageModelHead(std::string name, const LanguageModelHeadConfig& config, int64_t hidden_size,
                                     int64_t vocab_size, double lr_scale, Parameter* tied_output_weights,
                                     TensorParallelism tensor_parallel, bool vocab_parallel)
    : Layer(std::move(name)),
      hidden_size_(hidden_size),
      vocab_size_(vocab_size),
      cross_entropy_splits_(config.cross_entropy_splits),
      logits_scale_factor_(config.logits_scale_factor),
      softcap_(config.final_logit_softcap),
      final_norm_(child_name("final_norm"), config.normalization.get(), hidden_size,
                  combine_lr_scales(lr_scale, config.lr_scale)),
      tensor_parallel_(tensor_parallel),
      vocab_parallel_(tensor_parallel.enabled() && vocab_parallel),
      local_vocab_size_(vocab_parallel_ ? vocab_size / tensor_parallel.size : vocab_size) {
  FLM_ASSERT(!vocab_parallel_ || vocab_size % tensor_parallel.size == 0,
             "a vocabulary of {} split over {} tensor-parallel ranks", vocab_size, tensor_parallel.size);
  vocab_begin_ = vocab_parallel_ ? local_vocab_size_ * tensor_parallel.rank : 0;
  lr_scale = combine_lr_scales(lr_scale, config.lr_scale);
  if (config.prediction_heads != 1)
    throw NotSupportedError("layers", fmt::format("{}: multi-token prediction ({} heads) is not supported",
                                                  config.field_path("prediction_heads"), config.prediction_heads));
  std::optional<double> loss_scale_factor;
  for (const auto& [loss_name, loss] : config.losses) {
    const std::string path = config.field_path("losses." + loss_name);
    std::optional<Loss>* slot = nullptr;
    bool policy = false;
    if (loss.is<LabelLossConfig>()) {
      slot = &label_loss_;
    } else if (loss.is<ZLossConfig>()) {
      slot = &z_loss_;
    } else if (loss.is<GrpoLossConfig>() || loss.is<GspoLossConfig>()) {
      if (policy_loss_)
        throw NotSupportedError("layers", fmt::format("{}: at most one policy-gradient loss is supported, '{}' is "
                                                      "another",
                                                      path, policy_loss_->name()));
      policy = true;
    } else if (!reference_losses_.take(loss_name, loss.get(), config, path)) {
      throw NotSupportedError("layers", fmt::format("{}: loss type '{}' is not supported (only label, z_loss, grpo, "
                                                    "gspo, distillation and dpo)",
                                                    path, loss.type()));
    }
    if (tensor_parallel.enabled() && slot == nullptr)
      throw NotSupportedError("layers", fmt::format("{}: the {} loss with tensor parallelism "
                                                    "(model.distributed.tensor_parallel {}) is not supported",
                                                    path, loss.type(), tensor_parallel.size));
    if (slot != nullptr && slot->has_value())
      throw NotSupportedError("layers", fmt::format("{}: at most one loss of type '{}' is supported, '{}' is another",
                                                    path, loss.type(), (*slot)->name));
    if (loss_scale_factor && *loss_scale_factor != loss->logits_scale_factor)
      throw NotSupportedError("layers", fmt::format("{}: the head's losses must share one logits_scale_factor", path));
    loss_scale_factor = loss->logits_scale_factor;
    if (slot != nullptr)
      *slot = Loss{.name = loss_name, .weight = loss->weight};
    else if (policy)
      policy_loss_.emplace(loss_name, static_cast<const PolicyGradientLossConfig&>(loss.get()),
                           /*sequence_level=*/loss.is<GspoLossConfig>());
  }
  FLM_CHECK(label_loss_ || z_loss_ || policy_loss_ || !reference_losses_.empty(), "layers",
            "{}: the head has no loss", config.field_path("losses"));
  logits_scale_factor_ *= loss_scale_factor.value_or(1.0);

  add_child(final_norm_);
  if (tied_output_weights != nullptr) {
    FLM_ASSERT(tied_output_weights->meta.shape == (Shape{local_vocab_size_, hidden_size}),
               "tied output weights of shape {} for vocab {} and hidden {}", tied_output_weights->meta.shape.str(),
               local_vocab_size_, hidden_size);
    output_weights_ = tied_output_weights;
    output_weights_tied_ = true;
  } else {
    auto weight = parameter_settings(config.output_weight, default_weight_initialization(hidden_size), lr_scale);
    output_weights_ = &declare("output_weights", Shape{local_vocab_size_, hidden_size}, weight.initialization,
                               weight.weight_decay, weight.lr_scale);
    output_weights_->tracks_grad_start = true;
  }
  for (Parameter* parameter : parameters())
    parameter->meta.tensor = {.size = tensor_parallel.size, .rank = tensor_parallel.rank};
  if (vocab_parallel_ && !output_weights_tied_) output_weights_->meta.tensor.dim = 0;
}

Tensor LanguageModelHead::logits(const Tensor& input, Stream stream) {
  FLM_CHECK(!tensor_parallel_.enabled(), "head", "generation with tensor parallelism is not supported");
  Tensor normalized = final_norm_.forward(input, nullptr, stream);  // (rows, hidden)
  const DType dtype = normalized.dtype() == DType::float64 ? DType::float64 : DType::float32;
  Tensor logits = Tensor::empty(Shape{input.size(0), vocab_size_}, dtype, input.device(), stream);
  kernels::gemm({.a = normalized, .b = output_weights_->weight, .out = logits, .transpose_b = true,
                 .alpha = logits_scale_factor_, .stream = stream});
  return logits;
}

Tensor LanguageModelHead::forward(LayerContext& context, const Tensor& sequence_input) {
  const Tensor input = tensor_parallel_.gather_sequence(context, sequence_input);
  const MicroBatch& batch = context.batch;
  const Stream stream = context.stream;
  const bool training = context.training;
  const Device device = input.device();
  Saved saved;
  // The rows the losses are computed on: all of them, or only those that carry a loss (gathered, or all the input has
  // when the block before computed those only), with their labels and the preference pairs in their numbering; the
  // reference models' logits have the same rows.
  saved.loss_rows_only = computes_loss_rows_only(batch);
  saved.input_on_loss_rows = saved.loss_rows_only && input.size(0) == batch.loss_rows.numel();
  const int64_t tokens = input.size(0);
  FLM_CHECK(batch.labels.defined() && (batch.labels.numel() == tokens || saved.input_on_loss_rows), "head",
            "the micro-batch has {} labels for {} input rows", batch.labels.defined() ? batch.labels.numel() : 0,
            tokens);
  const int64_t rows = saved.loss_rows_only ? batch.loss_rows.numel() : tokens;

  // (input rows, hidden)
  const Tensor all_normalized = final_norm_.forward(input, training ? &saved.final_norm : nullptr, stream);
  // (rows, hidden)
  const Tensor normalized = saved.loss_rows_only && !saved.input_on_loss_rows
                                ? kernels::gather_rows(all_normalized, batch.loss_rows, stream)
                                : all_normalized;
  const Tensor& labels = saved.loss_rows_only ? batch.loss_labels : batch.labels;
  const std::vector<kernels::PreferencePair>& pairs =
      saved.loss_rows_only ? batch.loss_preference_pairs : batch.preference_pairs;
  const Tensor& weight = output_weights_->weight;  // (vocab, hidden)
  Tensor* weight_grad = training && output_weights_->grad.defined() ? &output_weights_->grad : nullptr;
  if (training) {
    // Compacted from every row, one more row of zeros: the gradient of a row without a loss, which backward gathers
    // for it.
    const bool zero_row = saved.loss_rows_only && !saved.input_on_loss_rows;
    saved.grad_normalized =
        Tensor::empty(Shape{zero_row ? rows + 1 : rows, hidden_size_}, normalized.dtype(), device, stream);
    if (zero_row) {
      Tensor zero_row = saved.grad_normalized.slice(0, rows, rows + 1);
      kernels::fill({.tensor = zero_row, .value = 0.0, .stream = stream});
    }
  }

  const int64_t splits = std::max<int64_t>(1, std::min<int64_t>(cross_entropy_splits_, rows));
  const int64_t chunk_size = (rows + splits - 1) / splits;
  // (chunk, vocab): logits, overwritten in place by their gradient.
  Tensor logits_buffer = Tensor::empty(Shape{chunk_size, local_vocab_size_}, normalized.dtype(), device, stream);
  // Vocabulary parallelism: per-token statistics of each chunk, summed over the tensor group between the passes.
  const DType statistics_dtype = normalized.dtype() == DType::float64 ? DType::float64 : DType::float32;
  Tensor row_max_buffer, sums_buffer;
  if (vocab_parallel_) {
    row_max_buffer = Tensor::empty(Shape{chunk_size}, statistics_dtype, device, stream);
    sums_buffer = Tensor::empty(Shape{2, chunk_size}, statistics_dtype, device, stream);
  }
  Tensor label_sum = zero_scalar(device, stream);
  Tensor z_loss_sum = zero_scalar(device, stream);
  const double label_weight = label_loss_ ? label_loss_->weight * context.loss_gradient_scale : 0.0;
  const double z_loss_weight = z_loss_ ? z_loss_->weight * context.loss_gradient_scale : 0.0;
  const bool label_losses = label_loss_ || z_loss_;
  // dpo, grpo and gspo: their gradient is c_r (softmax - onehot) dz/dlogits per row, so in training they only add
  // their per-row coefficients c_r to `row_weights`, and the cross-entropy pass (run with label weight 0 when no label
  // loss is configured) writes every loss's gradient over the logits at once (kernels/cross_entropy.h).
  const bool row_weighted = training && (policy_loss_ || reference_losses_.has_dpo());
  FLM_ASSERT((reference_losses_.empty() && !policy_loss_) || !vocab_parallel_,
             "the policy and reference losses are refused with tensor parallelism");
  // The distillation loss is the cross-entropy pass's distillation term (the teacher's rows read beside the logits),
  // with label weight 0 when no label loss is configured.
  const bool cross_entropy_pass = label_losses || row_weighted || reference_losses_.has_distillation();
  Tensor row_weights_buffer;  // (chunk)
  if (row_weighted) row_weights_buffer = Tensor::empty(Shape{chunk_size}, statistics_dtype, device, stream);
  ReferenceLosses::Sums reference_sums = reference_losses_.zero_sums(device, stream);
  if (policy_loss_) policy_loss_->begin(context);

  for (int64_t begin = 0; begin < rows; begin += chunk_size) {
    const int64_t end = std::min(rows, begin + chunk_size);
    Tensor hidden = normalized.slice(0, begin, end);          // (chunk, hidden)
    Tensor logits = logits_buffer.slice(0, 0, end - begin);   // (chunk, vocab)
    kernels::gemm({.a = hidden, .b = weight, .out = logits, .transpose_b = true, .stream = stream});
    Tensor row_weights;
    if (row_weighted) {
      row_weights = row_weights_buffer.slice(0, 0, end - begin);
      kernels::fill({.tensor = row_weights, .value = 0.0, .stream = stream});
    }
    if (reference_losses_.has_dpo())
      reference_losses_.dpo_forward_backward(context, logits, labels, pairs, rows, reference_sums,
                                             logits_scale_factor_, row_weighted ? &row_weights : nullptr);
    if (policy_loss_)
      policy_loss_->forward_chunk(context, logits, begin, end, logits_scale_factor_, softcap_,
                                  row_weighted ? &row_weights : nullptr);
    if (label_losses && vocab_parallel_) {
      const Tensor chunk_labels = labels.slice(0, begin, end);
      const kernels::VocabParallelLogits slice{.logits = logits,
                                               .labels = chunk_labels,
                                               .vocab_begin = vocab_begin_,
                                               .logits_scale_factor = logits_scale_factor_,
                                               .softcap = softcap_};
      Tensor row_max = row_max_buffer.slice(0, 0, end - begin);
      Tensor sums = end - begin == chunk_size ? sums_buffer
                                              : Tensor::empty(Shape{2, end - begin}, statistics_dtype, device, stream);
      kernels::vocab_parallel_logits_max({.slice = slice, .row_max = row_max, .stream = stream});
      tensor_parallel_.all_reduce(context, row_max, /*maximum=*/true);
      kernels::vocab_parallel_logits_sums({.slice = slice, .row_max = row_max, .sums = sums, .stream = stream});
      tensor_parallel_.all_reduce(context, sums);
      kernels::vocab_parallel_cross_entropy({.slice = slice,
                                             .row_max = row_max,
                                             .sums = sums,
                                             .label_loss_sum = label_sum,
                                             .z_loss_sum = z_loss_ ? &z_loss_sum : nullptr,
                                             .grad_logits = training ? &logits : nullptr,
                                             .label_weight = label_weight,
                                             .z_loss_weight = z_loss_weight,
                                             .stream = stream});
    } else if (cross_entropy_pass) {
      Tensor teacher;  // the distillation term's teacher rows
      std::optional<kernels::CrossEntropyDistillation> distillation;
      if (reference_losses_.has_distillation())
        distillation.emplace(
            reference_losses_.distillation_term(context, begin, end, rows, teacher, reference_sums));
      // Without a label loss (only row-weighted losses or the distillation) the label sum it adds to is never logged.
      kernels::cross_entropy_forward_backward({.logits = logits,
                                               .labels = labels.slice(0, begin, end),
                                               .label_loss_sum = label_sum,
                                               .z_loss_sum = z_loss_ ? &z_loss_sum : nullptr,
                                               .grad_logits = training ? &logits : nullptr,
                                               .label_weight = label_weight,
                                               .row_gradient_weights = row_weighted ? &row_weights : nullptr,
                                               .distillation = distillation ? &*distillation : nullptr,
                                               .z_loss_weight = z_loss_weight,
                                               .logits_scale_factor = logits_scale_factor_,
                                               .softcap = softcap_,
                                               .stream = stream});
    }
    if (!training) continue;
    Tensor grad_hidden = saved.grad_normalized.slice(0, begin, end);
    // grad_h = grad_logits W;  grad W += grad_logits^T h
    kernels::gemm({.a = logits, .b = weight, .out = grad_hidden, .stream = stream});
    if (weight_grad != nullptr)
      kernels::gemm({.a = logits,
                     .b = hidden,
                     .out = *weight_grad,
                     .transpose_a = true,
                     .beta = output_weights_->grad_beta(),
                     .stream = stream});
  }

  // Vocabulary parallelism: each rank's gradient of the normalised input comes from its slice of the vocabulary.
  if (training && vocab_parallel_) tensor_parallel_.all_reduce(context, saved.grad_normalized);
  if (context.losses != nullptr) {
    const std::string total_name(LanguageModelHeadConfig::kHeadLossName);
    auto add = [&](const Tensor& sum, const Loss& loss) {
      kernels::axpy({.input = sum, .output = context.losses->get(loss.name, device), .alpha = 1.0, .stream = stream});
      kernels::axpy({.input = sum, .output = context.losses->get(total_name, device), .alpha = loss.weight,
                     .stream = stream});
    };
    if (label_loss_) add(label_sum, *label_loss_);
    if (z_loss_) add(z_loss_sum, *z_loss_);
    reference_losses_.add_losses(context, reference_sums, total_name);
    if (policy_loss_) policy_loss_->add_losses(context, total_name);
  }
  if (training) saved_.put(batch.index, std::move(saved));
  return Tensor();
}

Tensor LanguageModelHead::backward(LayerContext& context, const Tensor& grad_output) {
  Saved saved = saved_.take(context.batch.index, name());
  // Each row's gradient from its loss row, or the zero row after them (MicroBatch::loss_row_positions); the loss rows'
  // only when the input had those only.
  const Tensor grad_normalized =
      saved.loss_rows_only && !saved.input_on_loss_rows
          ? kernels::gather_rows(saved.grad_normalized, context.batch.loss_row_positions, context.stream)
          : saved.grad_normalized;
  return tensor_parallel_.sequence_shard(final_norm_.backward(grad_normalized, saved.final_norm, context.stream));
}

bool LanguageModelHead::computes_loss_rows_only(const MicroBatch& batch) const {
  return loss_rows_only_enabled_ && !tensor_parallel_.enabled() && !policy_loss_ && !batch.sequence_piece &&
         batch.loss_rows.defined() && batch.loss_row_positions.defined() && batch.loss_labels.defined() &&
         batch.loss_rows.numel() > 0 && batch.loss_rows.numel() < batch.num_tokens();
}

LossRowRule LanguageModelHead::loss_row_rule() const {
  const bool dpo_only = reference_losses_.has_dpo() && !reference_losses_.has_distillation() && !label_loss_ &&
                        !z_loss_ && !policy_loss_;
  return dpo_only ? LossRowRule::preference_spans : LossRowRule::labelled;
}

double LanguageModelHead::flops(const MicroBatch& batch) const {
  const int64_t rows = computes_loss_rows_only(batch) ? batch.loss_rows.numel() : batch.num_tokens();
  return 6.0 * double(rows) * double(matmul_weight_count());
}

}  // namespace fast_llm::layers
