#include "fast_llm/layers/mlp/hybrid_moe.h"

#include <fmt/format.h>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/pointwise.h"
#include "fast_llm/layers/common/parameter_settings.h"

namespace fast_llm::layers {

namespace {

const HybridMoeMlpConfig& supported_config(const HybridMoeMlpConfig& config) {
  if (config.pre_norm || config.post_norm)
    throw NotSupportedError("layers", fmt::format("{}: normalization inside the MLP is not supported",
                                                  config.field_path(config.pre_norm ? "pre_norm" : "post_norm")));
  return config;
}

}  // namespace

HybridMoeMlp::HybridMoeMlp(std::string name, const HybridMoeMlpConfig& config, int64_t hidden_size, double lr_scale)
    : MlpBase(std::move(name)),
      dense_(child_name("dense"), supported_config(config).dense, hidden_size, combine_lr_scales(lr_scale, config.lr_scale)),
      routed_(child_name("routed"), config.routed, hidden_size, combine_lr_scales(lr_scale, config.lr_scale)) {
  add_child(dense_);
  add_child(routed_);
}

HybridMoeMlp::HybridMoeMlp(const HybridMoeMlpConfig& config, const SublayerArguments& arguments)
    : HybridMoeMlp(arguments.name, config, arguments.hidden_size, arguments.lr_scale) {
  if (arguments.lora != nullptr)
    throw NotSupportedError("layers", fmt::format("{}: LoRA with a hybrid mixture of experts is not supported",
                                                  config.path()));
}

FLM_REGISTER_SUBLAYER(MlpBase, HybridMoeMlp, HybridMoeMlpConfig, "hybrid_moe");

Tensor HybridMoeMlp::forward(LayerContext& context, const Tensor& input) {
  Tensor output = dense_.forward(context, input);
  const Tensor routed = routed_.forward(context, input);
  kernels::axpy({.input = routed, .output = output, .alpha = 1.0, .stream = context.stream});
  return output;
}

Tensor HybridMoeMlp::backward(LayerContext& context, const Tensor& grad_output) {
  Tensor grad_input = dense_.backward(context, grad_output);
  const Tensor routed = routed_.backward(context, grad_output);
  kernels::axpy({.input = routed, .output = grad_input, .alpha = 1.0, .stream = context.stream});
  return grad_input;
}

}  // namespace fast_llm::layers
