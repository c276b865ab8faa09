#include "fast_llm/layers/common/linear.h"

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/gemm.h"

namespace fast_llm::layers {

Linear::Linear(std::string name, const LinearOptions& options) : Module(std::move(name)), options_(options) {
  const Shape weight_shape = options.transposed_weight ? Shape{options.input_size, options.output_size}
                                                       : Shape{options.output_size, options.input_size};
  weight_ = &declare("weight", weight_shape, options.weight.initialization, options.weight.weight_decay,
                     options.weight.lr_scale);
  weight_->tracks_grad_start = true;
  if (options.bias) {
    bias_ = &declare("bias", Shape{options.output_size}, options.bias_settings.initialization,
                     options.bias_settings.weight_decay, options.bias_settings.lr_scale);
    bias_->tracks_grad_start = true;
  }
}

double Linear::accumulation_beta(Parameter& parameter, const std::optional<OutputRange>& range, Stream stream) {
  // A range writes only some rows: the others must hold zeros (or this step's values) too.
  if (range) {
    parameter.start_grad(stream);
    return 1.0;
  }
  return parameter.grad_beta();
}

Tensor Linear::weight_rows(const Tensor& weight, const std::optional<OutputRange>& range) const {
  if (!range) return weight;
  FLM_ASSERT(!options_.transposed_weight, "{}: output ranges need a [output, input] weight", name());
  FLM_ASSERT(range->begin >= 0 && range->begin < range->end && range->end <= options_.output_size,
             "{}: output range [{}, {}) of {}", name(), range->begin, range->end, options_.output_size);
  return weight.slice(0, range->begin, range->end);
}

Tensor Linear::bias_rows(const Tensor& bias, const std::optional<OutputRange>& range) const {
  return range ? bias.slice(0, range->begin, range->end) : bias;
}

Tensor Linear::forward(const Tensor& input, Stream stream, std::optional<OutputRange> range) const {
  FLM_ASSERT(input.rank() == 2 && input.size(1) == options_.input_size, "{}: input {} for input size {}", name(),
             input.shape().str(), options_.input_size);
  const int64_t outputs = range ? range->end - range->begin : options_.output_size;
  Tensor output = Tensor::empty(Shape{input.size(0), outputs}, input.dtype(), input.device(), stream);
  Tensor weight = weight_rows(weight_->weight, range);
  Tensor bias;
  if (bias_ != nullptr) bias = bias_rows(bias_->weight, range);
  // (tokens, output) = (tokens, input) @ W^T, or @ W for a [input, output] weight.
  kernels::gemm({.a = input,
                 .b = weight,
                 .out = output,
                 .bias = bias_ != nullptr ? &bias : nullptr,
                 .transpose_b = !options_.transposed_weight,
                 .stream = stream});
  return output;
}

void Linear::backward(const Tensor& grad_output, const Tensor& input, Tensor* grad_input, bool accumulate_grad_input,
                      Stream stream, std::optional<OutputRange> range) const {
  const int64_t tokens = input.size(0);
  if (grad_input != nullptr) {
    // grad_input (tokens, input) = grad_output @ W, or @ W^T for a [input, output] weight.
    Tensor weight = weight_rows(weight_->weight, range);
    kernels::gemm({.a = grad_output,
                   .b = weight,
                   .out = *grad_input,
                   .transpose_b = options_.transposed_weight,
                   .beta = accumulate_grad_input ? 1.0 : 0.0,
                   .stream = stream});
  }
  if (weight_->grad.defined()) {
    const double beta = accumulation_beta(*weight_, range, stream);
    Tensor weight_grad = weight_rows(weight_->grad, range);
    if (options_.transposed_weight) {
      // grad W [input, output] += input^T @ grad_output
      kernels::gemm({.a = input, .b = grad_output, .out = weight_grad, .transpose_a = true, .beta = beta, .stream = stream});
    } else {
      // grad W [output, input] += grad_output^T @ input
      kernels::gemm({.a = grad_output, .b = input, .out = weight_grad, .transpose_a = true, .beta = beta, .stream = stream});
    }
  }
  if (bias_ != nullptr && bias_->grad.defined()) {
    // grad b (1, output) += ones (1, tokens) @ grad_output: the column sums, through the gemm op.
    const double beta = accumulation_beta(*bias_, range, stream);
    Tensor bias_grad = bias_rows(bias_->grad, range);
    Tensor row_of_bias_grad = bias_grad.reshape(Shape{1, bias_grad.numel()});
    kernels::gemm({.a = ones(tokens, grad_output.dtype(), grad_output.device(), stream),
                   .b = grad_output,
                   .out = row_of_bias_grad,
                   .beta = beta,
                   .stream = stream});
  }
}

Tensor Linear::backward(const Tensor& grad_output, const Tensor& input, Stream stream,
                        std::optional<OutputRange> range) const {
  Tensor grad_input = Tensor::empty(input.shape(), input.dtype(), input.device(), stream);
  backward(grad_output, input, &grad_input, /*accumulate_grad_input=*/false, stream, range);
  return grad_input;
}

Tensor Linear::ones(int64_t count, DType dtype, Device device, Stream stream) const {
  std::lock_guard lock(ones_mutex_);
  if (!ones_.defined() || ones_.dtype() != dtype || ones_.device() != device || ones_.size(1) < count) {
    ones_ = Tensor::empty(Shape{1, count}, dtype, device, stream);
    kernels::fill({.tensor = ones_, .value = 1.0, .stream = stream});
  }
  return ones_.slice(1, 0, count);
}

}  // namespace fast_llm::layers
