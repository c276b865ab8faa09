#include "fast_llm/layers/common/normalization.h"

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/normalization.h"
#include "fast_llm/kernels/pointwise.h"
#include "fast_llm/layers/common/parameter_settings.h"

namespace fast_llm::layers {

namespace {
// The gradient view the backward kernels add into (zeroed first if this step has not written it), or null.
Tensor* gradient_of(Parameter* parameter, Stream stream) {
  if (parameter == nullptr || !parameter->grad.defined()) return nullptr;
  parameter->start_grad(stream);
  return &parameter->grad;
}
}  // namespace

Normalization::Normalization(std::string name, const NormalizationConfig& config, int64_t hidden_size, double lr_scale)
    : Module(std::move(name)), hidden_size_(hidden_size) {
  lr_scale = combine_lr_scales(lr_scale, config.lr_scale);
  const NormalizationSpec spec = config.spec();
  kernel_ = spec.kernel;
  epsilon_ = spec.epsilon;
  zero_centered_ = spec.zero_centered;
  if (spec.weight != nullptr) {
    auto weight = parameter_settings(*spec.weight, Initialization::fill(zero_centered_ ? 0.0 : 1.0), lr_scale,
                                     /*default_weight_decay=*/false);
    weight_ = &declare("weight", Shape{hidden_size}, weight.initialization, weight.weight_decay, weight.lr_scale);
    weight_->tracks_grad_start = true;
  }
  if (spec.bias != nullptr) {
    auto bias = parameter_settings(*spec.bias, default_bias_initialization(), lr_scale, false);
    bias_ = &declare("bias", Shape{hidden_size}, bias.initialization, bias.weight_decay, bias.lr_scale);
    bias_->tracks_grad_start = true;
  }
}

Tensor Normalization::forward(const Tensor& input, Saved* saved, Stream stream) const {
  if (is_identity()) {
    if (saved != nullptr) *saved = Saved{};
    return input;
  }
  return normalize(input, nullptr, nullptr, saved, stream);
}

Tensor Normalization::add_and_forward(Tensor& input, const Tensor& residual, Saved* saved, Stream stream) const {
  if (is_identity()) {
    kernels::axpy({.input = residual, .output = input, .alpha = 1.0, .stream = stream});
    if (saved != nullptr) *saved = Saved{};
    return input;
  }
  return normalize(input, &residual, &input, saved, stream);
}

Tensor Normalization::normalize(const Tensor& input, const Tensor* residual, Tensor* sum, Saved* saved,
                                Stream stream) const {
  FLM_ASSERT(input.rank() == 2 && input.size(1) == hidden_size_, "{}: input {} for hidden size {}", name(),
             input.shape().str(), hidden_size_);
  const int64_t rows = input.size(0);
  Device device = input.device();
  Tensor output = Tensor::empty(input.shape(), input.dtype(), device, stream);
  Tensor statistic = Tensor::empty(Shape{rows}, DType::float32, device, stream);
  Tensor inverse_std;
  const Tensor* weight = weight_ != nullptr ? &weight_->weight : nullptr;
  if (kernel_ == NormalizationSpec::Kernel::layer_norm) {
    inverse_std = Tensor::empty(Shape{rows}, DType::float32, device, stream);
    kernels::layer_norm_forward({.input = input,
                                 .weight = weight,
                                 .bias = &bias_->weight,
                                 .output = output,
                                 .mean = statistic,
                                 .inverse_std = inverse_std,
                                 .epsilon = epsilon_,
                                 .zero_centered = zero_centered_,
                                 .residual = residual,
                                 .sum = sum,
                                 .stream = stream});
  } else {
    kernels::rms_norm_forward({.input = input,
                               .weight = weight,
                               .output = output,
                               .inverse_rms = statistic,
                               .epsilon = epsilon_,
                               .zero_centered = zero_centered_,
                               .residual = residual,
                               .sum = sum,
                               .stream = stream});
  }
  if (saved != nullptr) *saved = Saved{.input = input, .statistic = statistic, .inverse_std = inverse_std};
  return output;
}

Tensor Normalization::backward(const Tensor& grad_output, const Saved& saved, Stream stream,
                               const Tensor* grad_residual) const {
  if (is_identity()) {
    if (grad_residual == nullptr) return grad_output;
    Tensor grad_input = Tensor::empty(grad_output.shape(), grad_output.dtype(), grad_output.device(), stream);
    kernels::copy({.source = grad_output, .destination = grad_input, .stream = stream});
    kernels::axpy({.input = *grad_residual, .output = grad_input, .alpha = 1.0, .stream = stream});
    return grad_input;
  }
  FLM_ASSERT(saved.input.defined(), "{}: backward without a saved forward", name());
  Tensor grad_input = Tensor::empty(saved.input.shape(), saved.input.dtype(), saved.input.device(), stream);
  const Tensor* weight = weight_ != nullptr ? &weight_->weight : nullptr;
  if (kernel_ == NormalizationSpec::Kernel::layer_norm) {
    kernels::layer_norm_backward({.grad_output = grad_output,
                                  .input = saved.input,
                                  .weight = weight,
                                  .mean = saved.statistic,
                                  .inverse_std = saved.inverse_std,
                                  .grad_input = grad_input,
                                  .grad_weight = gradient_of(weight_, stream),
                                  .grad_bias = gradient_of(bias_, stream),
                                  .zero_centered = zero_centered_,
                                  .grad_residual = grad_residual,
                                  .stream = stream});
  } else {
    kernels::rms_norm_backward({.grad_output = grad_output,
                                .input = saved.input,
                                .weight = weight,
                                .inverse_rms = saved.statistic,
                                .grad_input = grad_input,
                                .grad_weight = gradient_of(weight_, stream),
                                .zero_centered = zero_centered_,
                                .grad_residual = grad_residual,
                                .stream = stream});
  }
  return grad_input;
}

}  // namespace fast_llm::layers
