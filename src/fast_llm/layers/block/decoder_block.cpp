#include "fast_llm/layers/block/decoder_block.h"

#include <fmt/format.h>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/activation_distillation.h"
#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/embedding.h"
#include "fast_llm/kernels/pointwise.h"
#include "fast_llm/layers/common/dropout.h"
#include "fast_llm/layers/common/parameter_settings.h"

namespace fast_llm::layers {

namespace {

constexpr uint64_t kMixerDropout = 0;
constexpr uint64_t kMlpDropout = 1;

const DecoderBlockConfig& checked(const DecoderBlockConfig& config) {
  if (config.post_mixer_normalization || config.post_mlp_normalization)
    throw NotSupportedError("layers", fmt::format("{}: post-mixer and post-MLP normalizations are not supported",
                                                  config.path()));
  if (config.output_scale.enabled.value_or(false))
    throw NotSupportedError("layers", fmt::format("{}: a learned block output scale is not supported",
                                                  config.field_path("output_scale")));
  return config;
}

// x *= mask / (1 - p), in place; nothing when p is 0.
void apply_dropout(Tensor& tensor, double probability, uint64_t seed, Stream stream) {
  if (probability <= 0.0) return;
  kernels::dropout({.tensor = tensor, .probability = probability, .seed = seed, .stream = stream});
}

// A contiguous copy of `tensor` with dropout applied, or `tensor` itself when there is no dropout.
Tensor dropout_copy(const Tensor& tensor, double probability, uint64_t seed, Stream stream) {
  if (probability <= 0.0) return tensor;
  Tensor copy = Tensor::empty(tensor.shape(), tensor.dtype(), tensor.device(), stream);
  kernels::copy({.source = tensor, .destination = copy, .stream = stream});
  apply_dropout(copy, probability, seed, stream);
  return copy;
}

}  // namespace

DecoderBlock::DecoderBlock(std::string name, const DecoderBlockConfig& config, int64_t hidden_size, double lr_scale,
                           SharedResources* shared, const LoraConfig* lora, TensorParallelism tensor_parallel)
    : Layer(std::move(name)),
      dropout_(checked(config).dropout),
      distillation_model_(config.distillation_model),
      distillation_loss_weight_(config.distillation_loss_weight),
      norm_1_(child_name("norm_1"), config.mixer_normalization(), hidden_size,
              combine_lr_scales(lr_scale, config.lr_scale)),
      norm_2_(child_name("norm_2"), config.mlp_normalization(), hidden_size,
              combine_lr_scales(lr_scale, config.lr_scale)) {
  SharedResources own;
  SharedResources& resources = shared != nullptr ? *shared : own;
  const double block_lr_scale = combine_lr_scales(lr_scale, config.lr_scale);
  mixer_ = SublayerRegistry<Mixer>::instance().build(
      config.mixer, config.field_path("mixer"),
      {.name = child_name("mixer"), .hidden_size = hidden_size, .lr_scale = block_lr_scale, .shared = resources,
       .lora = lora, .tensor_parallel = tensor_parallel});
  mlp_ = SublayerRegistry<MlpBase>::instance().build(
      config.mlp, config.field_path("mlp"),
      {.name = child_name("mlp"), .hidden_size = hidden_size, .lr_scale = block_lr_scale, .shared = resources,
       .lora = lora, .tensor_parallel = tensor_parallel});
  if (tensor_parallel.enabled()) {
    if (!mixer_->supports_tensor_parallelism())
      throw NotSupportedError("layers", fmt::format("{}: mixer type '{}' with tensor parallelism "
                                                    "(model.distributed.tensor_parallel {}) is not supported",
                                                    config.field_path("mixer"), config.mixer.type(),
                                                    tensor_parallel.size));
    if (!mlp_->supports_tensor_parallelism())
      throw NotSupportedError("layers", fmt::format("{}: MLP type '{}' with tensor parallelism "
                                                    "(model.distributed.tensor_parallel {}) is not supported",
                                                    config.field_path("mlp"), config.mlp.type(), tensor_parallel.size));
    if (distillation_model_)
      throw NotSupportedError("layers", fmt::format("{}: activation distillation with tensor parallelism is not "
                                                    "supported",
                                                    config.field_path("distillation_model")));
    if (tensor_parallel.sequence_parallel && dropout_ > 0.0)
      throw NotSupportedError("layers", fmt::format("{}: block dropout with sequence-tensor parallelism is not "
                                                    "supported; set it to 0 or sequence_tensor_parallel to false",
                                                    config.field_path("dropout")));
    // With sequence-tensor parallelism each rank normalises its own rows: the norms' gradients are partial.
    for (Normalization* norm : {&norm_1_, &norm_2_})
      for (Parameter* parameter : norm->parameters())
        parameter->meta.tensor = {.size = tensor_parallel.size,
                                  .rank = tensor_parallel.rank,
                                  .partial_gradient = tensor_parallel.sequence_parallel};
  }
  add_child(norm_1_);
  add_child(*mixer_);
  add_child(norm_2_);
  add_child(*mlp_);
}

Tensor DecoderBlock::forward(LayerContext& context, const Tensor& input) {
  const bool keep = context.training;
  const double dropout = context.training ? dropout_ : 0.0;
  Saved saved;
  saved.dropout_seed = context.dropout_seed;
  const Stream stream = context.stream;

  Tensor normalized = norm_1_.forward(input, keep ? &saved.norm_1 : nullptr, stream);
  // (tokens, hidden): the mixer output, then the residual stream after the mixer.
  Tensor hidden = mixer_->forward(context, normalized);
  if (context.mixer_outputs != nullptr) {
    Tensor copy = Tensor::empty(hidden.shape(), hidden.dtype(), hidden.device(), stream);
    kernels::copy({.source = hidden, .destination = copy, .stream = stream});
    (*context.mixer_outputs)[name()] = std::move(copy);
  }
  if (distillation_model_ && context.training) saved.distillation_grad = distill_activations(context, hidden);
  apply_dropout(hidden, dropout, dropout_seed(saved.dropout_seed, name(), kMixerDropout), stream);
  // From here on, the loss rows only (see the header) or every row.
  saved.output_on_loss_rows = computes_output_on_loss_rows(context.batch);
  Tensor residual = input;
  if (saved.output_on_loss_rows) {
    hidden = kernels::gather_rows(hidden, context.batch.loss_rows, stream);
    residual = kernels::gather_rows(input, context.batch.loss_rows, stream);
  }
  // hidden += residual, in the same pass as norm_2.
  normalized = norm_2_.add_and_forward(hidden, residual, keep ? &saved.norm_2 : nullptr, stream);
  // (tokens, hidden): the MLP output, then the block output.
  Tensor output = mlp_->forward(context, normalized);
  apply_dropout(output, dropout, dropout_seed(saved.dropout_seed, name(), kMlpDropout), stream);
  kernels::axpy({.input = hidden, .output = output, .alpha = 1.0, .stream = stream});

  if (keep) saved_.put(context.batch.index, std::move(saved));
  return output;
}

Tensor DecoderBlock::backward(LayerContext& context, const Tensor& grad_output) {
  Saved saved = saved_.take(context.batch.index, name());
  const Stream stream = context.stream;

  // MLP branch: grad of the residual stream after the mixer = grad_output + norm_2'(mlp'(dropout'(grad_output))), the
  // skip connection's term added by norm_2's backward in its own pass.
  // Each part of the saved state is dropped after the backward that reads it last (the mixer's and the MLP's are
  // taken out by their backward), so its memory is free for the rest of this backward.
  Tensor grad_mlp = dropout_copy(grad_output, dropout_, dropout_seed(saved.dropout_seed, name(), kMlpDropout), stream);
  Tensor grad_hidden = norm_2_.backward(mlp_->backward(context, grad_mlp), saved.norm_2, stream,
                                        /*grad_residual=*/&grad_output);
  grad_mlp = Tensor();
  saved.norm_2 = Normalization::Saved();
  if (saved.output_on_loss_rows)
    grad_hidden = kernels::scatter_rows(grad_hidden, context.batch.loss_row_positions, stream);

  // Mixer branch: grad_input = grad_hidden + norm_1'(mixer'(dropout'(grad_hidden))), in the same way.
  Tensor grad_mixer =
      dropout_copy(grad_hidden, dropout_, dropout_seed(saved.dropout_seed, name(), kMixerDropout), stream);
  if (saved.distillation_grad.defined()) {
    // grad_mixer may be grad_hidden itself (no dropout), which norm_1's backward still reads as the residual's.
    if (grad_mixer.data() == grad_hidden.data()) {
      Tensor copy = Tensor::empty(grad_hidden.shape(), grad_hidden.dtype(), grad_hidden.device(), stream);
      kernels::copy({.source = grad_hidden, .destination = copy, .stream = stream});
      grad_mixer = std::move(copy);
    }
    kernels::axpy({.input = saved.distillation_grad, .output = grad_mixer, .alpha = 1.0, .stream = stream});
    saved.distillation_grad = Tensor();
  }
  return norm_1_.backward(mixer_->backward(context, grad_mixer), saved.norm_1, stream,
                          /*grad_residual=*/&grad_hidden);
}

Tensor DecoderBlock::distill_activations(LayerContext& context, const Tensor& mixer_output) {
  const auto model = context.batch.reference_mixer_outputs.find(*distillation_model_);
  FLM_CHECK(model != context.batch.reference_mixer_outputs.end() && model->second.contains(name()), "layers",
            "{}: activation distillation reads the mixer output of block {} of reference model '{}', which the "
            "micro-batch does not have",
            name(), name(), *distillation_model_);
  const Tensor& teacher = model->second.at(name());
  const Stream stream = context.stream;
  const int64_t tokens = mixer_output.size(0);
  const double micro_batches = double(std::max<int64_t>(context.micro_batches_in_step, 1));
  Tensor loss_sum = Tensor::empty(Shape{1}, context.device.is_cpu() ? DType::float64 : DType::float32, context.device,
                                  stream);
  kernels::fill({.tensor = loss_sum, .value = 0.0, .stream = stream});
  Tensor grad = Tensor::empty(mixer_output.shape(), mixer_output.dtype(), mixer_output.device(), stream);
  kernels::activation_distillation_forward_backward(
      {.student = mixer_output,
       .teacher = teacher,
       .loss_sum = loss_sum,
       .grad = &grad,
       .weight =
           distillation_loss_weight_ * context.loss_scale / (double(std::max<int64_t>(tokens, 1)) * micro_batches),
       .stream = stream});
  if (context.losses != nullptr)
    kernels::axpy({.input = loss_sum,
                   .output = context.losses->get("activation_distillation_loss", context.device,
                                                 LossNormalization::normalized),
                   .alpha = 1.0 / (double(std::max<int64_t>(tokens, 1)) * micro_batches),
                   .stream = stream});
  return grad;
}

void DecoderBlock::compute_output_on_loss_rows_when(BatchPredicate predicate) {
  FLM_ASSERT(!predicate || mlp_->row_wise(), "{}: the output on the loss rows only needs a row-wise MLP", name());
  output_on_loss_rows_ = std::move(predicate);
}

bool DecoderBlock::computes_output_on_loss_rows(const MicroBatch& batch) const {
  return output_on_loss_rows_ && output_on_loss_rows_(batch);
}

double DecoderBlock::flops(const MicroBatch& batch) const {
  // A row-wise MLP's FLOPs are proportional to its rows.
  const double mlp_rows = computes_output_on_loss_rows(batch)
                              ? double(batch.loss_rows.numel()) / double(std::max<int64_t>(batch.num_tokens(), 1))
                              : 1.0;
  return mixer_->flops(batch) + mlp_rows * mlp_->flops(batch);
}

}  // namespace fast_llm::layers
