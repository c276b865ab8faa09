#include "fast_llm/layers/common/linear.h"

#include <fmt/format.h>

#include <algorithm>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/gemm.h"
#include "fast_llm/kernels/pointwise.h"
#include "fast_llm/layers/common/dropout.h"

namespace fast_llm::layers {

namespace {
// Which dropout of the layer (layers/common/dropout.h): the adapter's input dropout is the only one.
constexpr uint64_t kLoraDropout = 0;
}  // namespace

std::optional<LoraOptions> lora_options(const LoraConfig* lora, const LinearConfig& config, bool default_apply,
                                        int64_t begin, int64_t end) {
  if (lora == nullptr || !config.apply_peft.value_or(default_apply)) return std::nullopt;
  return LoraOptions{.rank = lora->rank, .alpha = lora->alpha, .dropout = lora->dropout, .begin = begin, .end = end};
}

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
  const TensorParallelism& parallel = options.tensor_parallel;
  if (parallel.enabled()) {
    if (options.lora)
      throw NotSupportedError("layers", fmt::format("{}: LoRA adapters with tensor parallelism "
                                                    "(model.distributed.tensor_parallel {}) are not supported",
                                                    this->name(), parallel.size));
    FLM_ASSERT(options.tensor_parallel_mode != TensorParallelMode::none, "{}: a linear layer of a tensor-parallel model "
               "without a tensor-parallel mode", this->name());
    const bool column = options.tensor_parallel_mode == TensorParallelMode::column;
    const bool replicated = options.tensor_parallel_mode == TensorParallelMode::replicated;
    // The weight's output features are dimension 0 ([output, input]) or 1 (transposed).
    const int output_dim = options.transposed_weight ? 1 : 0;
    weight_->meta.tensor = {.size = parallel.size,
                            .rank = parallel.rank,
                            .dim = replicated ? -1 : column ? output_dim : 1 - output_dim,
                            .blocks = column ? options.tensor_blocks : 1,
                            .partial_gradient = replicated};
    if (bias_ != nullptr)
      bias_->meta.tensor = {.size = parallel.size,
                            .rank = parallel.rank,
                            .dim = column ? 0 : -1,
                            .blocks = column ? options.tensor_blocks : 1,
                            .partial_gradient = replicated};
  }
  if (options.lora) {
    const LoraOptions& lora = *options.lora;
    FLM_ASSERT(lora.rank > 0 && lora.begin >= 0 && lora.begin < lora.end && lora.end <= options.output_size,
               "{}: LoRA rank {} over output features [{}, {}) of {}", this->name(), lora.rank, lora.begin, lora.end,
               options.output_size);
    const int64_t rank = lora.rank, outputs = lora.end - lora.begin;
    lora_0_ = &declare("lora_0.weight",
                       options.transposed_weight ? Shape{options.input_size, rank} : Shape{rank, options.input_size},
                       options.weight.initialization, options.weight.weight_decay, options.weight.lr_scale);
    lora_1_ = &declare("lora_1.weight", options.transposed_weight ? Shape{rank, outputs} : Shape{outputs, rank},
                       Initialization::fill(0.0), options.weight.weight_decay, options.weight.lr_scale);
    for (Parameter* parameter : {lora_0_, lora_1_}) {
      parameter->meta.peft = true;
      parameter->tracks_grad_start = true;
    }
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

Tensor Linear::forward(const Tensor& input, Stream stream, std::optional<OutputRange> range,
                       std::optional<uint64_t> dropout_seed) const {
  FLM_ASSERT(input.rank() == 2 && input.size(1) == options_.input_size, "{}: input {} for input size {}", name(),
             input.shape().str(), options_.input_size);
  const int64_t outputs = range ? range->end - range->begin : options_.output_size;
  Tensor output = Tensor::empty(Shape{input.size(0), outputs}, input.dtype(), input.device(), stream);
  Tensor weight = weight_rows(weight_->weight, range);
  Tensor bias;
  const bool with_bias = bias_ != nullptr && !bias_after_reduction();
  if (with_bias) bias = bias_rows(bias_->weight, range);
  // (tokens, output) = (tokens, input) @ W^T, or @ W for a [input, output] weight.
  kernels::gemm({.a = input,
                 .b = weight,
                 .out = output,
                 .bias = with_bias ? &bias : nullptr,
                 .transpose_b = !options_.transposed_weight,
                 .stream = stream});
  if (options_.lora) lora_forward(input, output, range, dropout_seed, stream);
  return output;
}

void Linear::add_bias(Tensor& output, Stream stream) const {
  if (!bias_after_reduction()) return;
  // output (tokens, output) += ones (tokens, 1) @ bias (1, output)
  const int64_t tokens = output.size(0);
  Tensor row_of_bias = bias_->weight.reshape(Shape{1, bias_->weight.numel()});
  kernels::gemm({.a = ones(tokens, output.dtype(), output.device(), stream),
                 .b = row_of_bias,
                 .out = output,
                 .transpose_a = true,
                 .beta = 1.0,
                 .stream = stream});
}

void Linear::backward(const Tensor& grad_output, const Tensor& input, Tensor* grad_input, bool accumulate_grad_input,
                      Stream stream, std::optional<OutputRange> range, std::optional<uint64_t> dropout_seed,
                      bool parameter_gradients) const {
  const int64_t tokens = input.size(0);
  FLM_ASSERT(parameter_gradients || !options_.lora, "{}: an input-only backward of a layer with a LoRA adapter",
             name());
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
  if (!parameter_gradients) return;
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
  if (options_.lora) lora_backward(grad_output, input, grad_input, range, dropout_seed, stream);
}

Tensor Linear::backward(const Tensor& grad_output, const Tensor& input, Stream stream,
                        std::optional<OutputRange> range, std::optional<uint64_t> dropout_seed) const {
  Tensor grad_input = Tensor::empty(input.shape(), input.dtype(), input.device(), stream);
  backward(grad_output, input, &grad_input, /*accumulate_grad_input=*/false, stream, range, dropout_seed);
  return grad_input;
}

Linear::OutputRange Linear::lora_overlap(const std::optional<OutputRange>& range) const {
  const OutputRange call = range.value_or(OutputRange{0, options_.output_size});
  const int64_t begin = std::max(call.begin, options_.lora->begin), end = std::min(call.end, options_.lora->end);
  return begin < end ? OutputRange{begin, end} : OutputRange{0, 0};
}

Tensor Linear::lora_input(const Tensor& input, const std::optional<uint64_t>& dropout_seed, Stream stream) const {
  if (!dropout_seed || options_.lora->dropout <= 0.0) return input;
  Tensor dropped = Tensor::empty(input.shape(), input.dtype(), input.device(), stream);
  kernels::copy({.source = input, .destination = dropped, .stream = stream});
  kernels::dropout({.tensor = dropped,
                    .probability = options_.lora->dropout,
                    .seed = layers::dropout_seed(*dropout_seed, name(), kLoraDropout),
                    .stream = stream});
  return dropped;
}

Tensor Linear::lora_1_part(const Tensor& weight, OutputRange overlap) const {
  const int64_t begin = overlap.begin - options_.lora->begin, end = overlap.end - options_.lora->begin;
  return options_.transposed_weight ? weight.slice(1, begin, end) : weight.slice(0, begin, end);
}

void Linear::lora_forward(const Tensor& input, Tensor& output, const std::optional<OutputRange>& range,
                          const std::optional<uint64_t>& dropout_seed, Stream stream) const {
  const OutputRange overlap = lora_overlap(range);
  if (overlap.begin == overlap.end) return;
  const int64_t first_output = range ? range->begin : 0;
  const bool transposed = options_.transposed_weight;
  const double scale = options_.lora->alpha / double(options_.lora->rank);
  Tensor dropped = lora_input(input, dropout_seed, stream);
  // (tokens, rank) = dropout(x) A^T
  Tensor middle =
      Tensor::empty(Shape{input.size(0), int64_t(options_.lora->rank)}, input.dtype(), input.device(), stream);
  kernels::gemm({.a = dropped, .b = lora_0_->weight, .out = middle, .transpose_b = !transposed, .stream = stream});
  // output[:, overlap] += scale * middle B^T
  Tensor columns = output.slice(1, overlap.begin - first_output, overlap.end - first_output);
  kernels::gemm({.a = middle,
                 .b = lora_1_part(lora_1_->weight, overlap),
                 .out = columns,
                 .transpose_b = !transposed,
                 .alpha = scale,
                 .beta = 1.0,
                 .stream = stream});
}

void Linear::lora_backward(const Tensor& grad_output, const Tensor& input, Tensor* grad_input,
                           const std::optional<OutputRange>& range, const std::optional<uint64_t>& dropout_seed,
                           Stream stream) const {
  const OutputRange overlap = lora_overlap(range);
  if (overlap.begin == overlap.end) return;
  const int64_t first_output = range ? range->begin : 0;
  const bool transposed = options_.transposed_weight;
  const double scale = options_.lora->alpha / double(options_.lora->rank);
  // A call that covers only part of the adapter's outputs (key_value's two halves) adds to the gradients: the first
  // of the step must not overwrite the other's rows (start_grad), as for the layer's own weight.
  const bool whole = overlap.begin == options_.lora->begin && overlap.end == options_.lora->end;
  const int64_t tokens = input.size(0), rank = options_.lora->rank;
  Tensor grad_columns = grad_output.slice(1, overlap.begin - first_output, overlap.end - first_output);
  Tensor weight_1 = lora_1_part(lora_1_->weight, overlap);
  // The forward's dropped input and intermediate, regenerated (same seed, same mask).
  Tensor dropped = lora_input(input, dropout_seed, stream);
  Tensor middle = Tensor::empty(Shape{tokens, rank}, input.dtype(), input.device(), stream);
  kernels::gemm({.a = dropped, .b = lora_0_->weight, .out = middle, .transpose_b = !transposed, .stream = stream});
  if (lora_1_->grad.defined()) {
    if (!whole) lora_1_->start_grad(stream);
    const double beta = whole ? lora_1_->grad_beta() : 1.0;
    Tensor grad_1 = lora_1_part(lora_1_->grad, overlap);
    if (transposed)  // grad B [rank, n] += scale * middle^T grad
      kernels::gemm({.a = middle, .b = grad_columns, .out = grad_1, .transpose_a = true, .alpha = scale, .beta = beta,
                     .stream = stream});
    else  // grad B [n, rank] += scale * grad^T middle
      kernels::gemm({.a = grad_columns, .b = middle, .out = grad_1, .transpose_a = true, .alpha = scale, .beta = beta,
                     .stream = stream});
  }
  // (tokens, rank), into the intermediate's memory: its gradient, scale * grad B
  Tensor grad_middle = middle;
  kernels::gemm({.a = grad_columns, .b = weight_1, .out = grad_middle, .transpose_b = transposed, .alpha = scale,
                 .stream = stream});
  if (lora_0_->grad.defined()) {
    if (!whole) lora_0_->start_grad(stream);
    const double beta = whole ? lora_0_->grad_beta() : 1.0;
    if (transposed)  // grad A [input, rank] += dropped^T grad_middle
      kernels::gemm({.a = dropped, .b = grad_middle, .out = lora_0_->grad, .transpose_a = true, .beta = beta,
                     .stream = stream});
    else  // grad A [rank, input] += grad_middle^T dropped
      kernels::gemm({.a = grad_middle, .b = dropped, .out = lora_0_->grad, .transpose_a = true, .beta = beta,
                     .stream = stream});
  }
  if (grad_input == nullptr) return;
  // grad_input += dropout(grad_middle A): the forward's mask and 1 / (1 - p), applied again.
  if (!dropout_seed || options_.lora->dropout <= 0.0) {
    kernels::gemm({.a = grad_middle, .b = lora_0_->weight, .out = *grad_input, .transpose_b = transposed, .beta = 1.0,
                   .stream = stream});
    return;
  }
  Tensor grad_dropped = Tensor::empty(input.shape(), input.dtype(), input.device(), stream);
  kernels::gemm({.a = grad_middle, .b = lora_0_->weight, .out = grad_dropped, .transpose_b = transposed,
                 .stream = stream});
  kernels::dropout({.tensor = grad_dropped,
                    .probability = options_.lora->dropout,
                    .seed = layers::dropout_seed(*dropout_seed, name(), kLoraDropout),
                    .stream = stream});
  kernels::axpy({.input = grad_dropped, .output = *grad_input, .alpha = 1.0, .stream = stream});
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
