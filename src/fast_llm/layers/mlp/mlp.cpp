#include "fast_llm/layers/mlp/mlp.h"

#include <fmt/format.h>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/common/parameter_settings.h"

namespace fast_llm::layers {

namespace {

const MlpConfig& dense_config(const MlpBaseConfig& config) {
  const auto* mlp = dynamic_cast<const MlpConfig*>(&config);
  if (mlp == nullptr || dynamic_cast<const MoeMlpConfig*>(&config) != nullptr)
    throw NotSupportedError("layers", fmt::format("{}: only the dense MLP (type: mlp) is supported",
                                                  config.field_path("type")));
  if (config.pre_norm || config.post_norm)
    throw NotSupportedError("layers", fmt::format("{}: normalization inside the MLP is not supported", config.path()));
  FLM_ASSERT(mlp->activation.has_value(), "{}: activation is resolved at validation", config.path());
  return *mlp;
}

LinearOptions layer_options(const AffineLinearConfig& config, int64_t input_size, int64_t output_size,
                            bool transposed_weight, int64_t hidden_size, double lr_scale, const LoraConfig* lora,
                            const TensorParallelism& tensor_parallel, TensorParallelMode mode, int blocks) {
  lr_scale = combine_lr_scales(lr_scale, config.lr_scale);
  FLM_ASSERT(config.bias.enabled.has_value(), "{}: bias.enabled is resolved at validation", config.path());
  return {.input_size = input_size,
          .output_size = output_size,
          .bias = *config.bias.enabled,
          .transposed_weight = transposed_weight,
          .weight = parameter_settings(config.weight, default_weight_initialization(hidden_size), lr_scale),
          .bias_settings = parameter_settings(config.bias, default_bias_initialization(), lr_scale,
                                              /*default_weight_decay=*/false),
          .lora = lora_options(lora, config, /*default_apply=*/false, 0, output_size),
          .tensor_parallel = tensor_parallel,
          .tensor_parallel_mode = tensor_parallel.enabled() ? mode : TensorParallelMode::none,
          .tensor_blocks = blocks};
}

int64_t local_intermediate_size(const MlpConfig& config, const TensorParallelism& tensor_parallel) {
  if (config.intermediate_size % tensor_parallel.size != 0)
    throw ConfigError(config.field_path("intermediate_size"),
                      fmt::format("{} does not split over tensor_parallel {}: it must divide it",
                                  config.intermediate_size, tensor_parallel.size));
  return config.intermediate_size / tensor_parallel.size;
}

}  // namespace

kernels::ActivationType kernel_activation(ActivationType type) {
  switch (type) {
    case ActivationType::gelu: return kernels::ActivationType::gelu;
    case ActivationType::silu: return kernels::ActivationType::silu;
    case ActivationType::relu: return kernels::ActivationType::relu;
    case ActivationType::sigmoid: return kernels::ActivationType::sigmoid;
    case ActivationType::squared_relu: return kernels::ActivationType::squared_relu;
    case ActivationType::identity: return kernels::ActivationType::identity;
  }
  FLM_ASSERT(false, "unknown activation type {}", int(type));
}

Mlp::Mlp(std::string name, const MlpBaseConfig& base_config, int64_t hidden_size, double lr_scale,
         const LoraConfig* lora, TensorParallelism tensor_parallel)
    : MlpBase(std::move(name)),
      intermediate_size_(local_intermediate_size(dense_config(base_config), tensor_parallel)),
      gated_(dense_config(base_config).gated),
      activation_(kernel_activation(*dense_config(base_config).activation)),
      recompute_level_(dense_config(base_config).recompute_level),
      layer_1_(child_name("layer_1"),
               layer_options(dense_config(base_config).layer_1, hidden_size,
                             (gated_ ? 2 : 1) * intermediate_size_, /*transposed_weight=*/false, hidden_size,
                             combine_lr_scales(lr_scale, base_config.lr_scale), lora, tensor_parallel,
                             TensorParallelMode::column, /*blocks=*/gated_ ? 2 : 1)),
      layer_2_(child_name("layer_2"),
               layer_options(dense_config(base_config).layer_2, intermediate_size_, hidden_size,
                             /*transposed_weight=*/true, hidden_size, combine_lr_scales(lr_scale, base_config.lr_scale),
                             lora, tensor_parallel, TensorParallelMode::row, /*blocks=*/1)),
      tensor_parallel_(tensor_parallel) {
  add_child(layer_1_);
  add_child(layer_2_);
}

Mlp::Mlp(const MlpConfig& config, const SublayerArguments& arguments)
    : Mlp(arguments.name, config, arguments.hidden_size, arguments.lr_scale, arguments.lora,
          arguments.tensor_parallel) {}

FLM_REGISTER_SUBLAYER(MlpBase, Mlp, MlpConfig, "mlp");

Tensor Mlp::forward(LayerContext& context, const Tensor& input) {
  const Tensor full_input = tensor_parallel_.gather_sequence(context, input);
  Tensor output = saved_.keep(context, [&](Saved* saved) {
    Tensor result = forward(full_input, saved, context.stream,
                            context.training ? std::optional<uint64_t>(context.dropout_seed) : std::nullopt);
    // Sequence-tensor parallelism keeps this rank's rows of the input only (backward gathers them again).
    if (saved != nullptr) saved->input = input;
    return result;
  });
  output = tensor_parallel_.reduce(context, std::move(output));
  layer_2_.add_bias(output, context.stream);
  return output;
}

Tensor Mlp::backward(LayerContext& context, const Tensor& grad_output) {
  return tensor_parallel_.backward_reducing_input(
      context, grad_output, saved_.take(context.batch.index, name()),
      [this](const Tensor& full_grad_output, Saved saved, Stream stream, const InputGradientReady& ready) {
        return backward(full_grad_output, std::move(saved), stream, ready);
      });
}

Tensor Mlp::forward(const Tensor& input, Saved* saved, Stream stream, std::optional<uint64_t> dropout_seed) const {
  Tensor hidden = layer_1_.forward(input, stream, std::nullopt, dropout_seed);
  Tensor activated = activate(hidden, stream);
  Tensor output = layer_2_.forward(activated, stream, std::nullopt, dropout_seed);
  if (saved != nullptr) {
    *saved = Saved{.input = input,
                   .hidden = recompute_level_ == MlpRecomputeLevel::full ? Tensor() : hidden,
                   .activated = recompute_level_ == MlpRecomputeLevel::none ? activated : Tensor(),
                   .dropout_seed = dropout_seed};
  }
  return output;
}

Tensor activate_mlp_hidden(const Tensor& hidden, int64_t intermediate_size, kernels::ActivationType activation,
                           bool gated, Stream stream) {
  Tensor activated = Tensor::empty(Shape{hidden.size(0), intermediate_size}, hidden.dtype(), hidden.device(), stream);
  kernels::activation_forward(
      {.type = activation, .gated = gated, .input = hidden, .output = activated, .stream = stream});
  return activated;
}

Tensor Mlp::activate(const Tensor& hidden, Stream stream) const {
  return activate_mlp_hidden(hidden, intermediate_size_, activation_, gated_, stream);
}

Tensor Mlp::backward(const Tensor& grad_output, Saved saved, Stream stream,
                     const InputGradientReady& input_gradient_ready) const {
  FLM_ASSERT(saved.input.defined(), "{}: backward without a saved forward", name());
  Tensor hidden = saved.hidden.defined() ? std::move(saved.hidden)
                                         : layer_1_.forward(saved.input, stream, std::nullopt, saved.dropout_seed);
  Tensor grad_hidden;
  {
    Tensor activated = saved.activated.defined() ? std::move(saved.activated) : activate(hidden, stream);
    Tensor grad_activated = layer_2_.backward(grad_output, activated, stream, std::nullopt, saved.dropout_seed);
    activated = Tensor();  // not needed any more: its memory can serve grad_hidden
    grad_hidden = Tensor::empty(hidden.shape(), hidden.dtype(), hidden.device(), stream);
    kernels::activation_backward({.type = activation_,
                                  .gated = gated_,
                                  .grad_output = grad_activated,
                                  .input = hidden,
                                  .grad_input = grad_hidden,
                                  .stream = stream});
  }
  hidden = Tensor();
  if (!input_gradient_ready) return layer_1_.backward(grad_hidden, saved.input, stream, std::nullopt, saved.dropout_seed);
  // The input gradient first, then layer_1's parameter gradients while the caller's reduction of it runs.
  Tensor grad_input = Tensor::empty(saved.input.shape(), saved.input.dtype(), saved.input.device(), stream);
  layer_1_.backward(grad_hidden, saved.input, &grad_input, /*accumulate_grad_input=*/false, stream, std::nullopt,
                    saved.dropout_seed, /*parameter_gradients=*/false);
  input_gradient_ready(grad_input);
  layer_1_.backward(grad_hidden, saved.input, nullptr, false, stream, std::nullopt, saved.dropout_seed);
  return grad_input;
}

}  // namespace fast_llm::layers
