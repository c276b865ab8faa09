// Linear module: y = x W^T (+ b) on (tokens, features) activations, through the kernels/gemm.h op.
//
// The weight is [output, input] (PyTorch / Fast-LLM layout), or [input, output] with `transposed_weight` (Fast-LLM's
// mlp.layer_2), in which case y = x W. Parameters: `<name>.weight`, `<name>.bias` (output) when enabled; the bias has
// no weight decay. A module keeps no per-micro-batch state: the owning layer keeps the input for backward.
// Backward: grad_input (=, or += when asked, for inputs shared by several projections), weight and bias
// gradients (+=) into the bound gradient views (skipped when a parameter is frozen).
//
// `OutputRange` runs the layer on a contiguous block of output features only (rows of a [output, input] weight):
// attention computes keys and values from the two halves of the fused key_value weight, so each comes out contiguous.
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include "fast_llm/layers/common/parameter_settings.h"
#include "fast_llm/layers/layer.h"

namespace fast_llm::layers {

struct LinearOptions {
  int64_t input_size = 0;
  int64_t output_size = 0;
  bool bias = false;
  bool transposed_weight = false;  // weight stored [input, output]
  ParameterSettings weight;
  ParameterSettings bias_settings;  // used when `bias`
};

class Linear : public Module {
 public:
  struct OutputRange {
    int64_t begin = 0;
    int64_t end = 0;
  };

  Linear(std::string name, const LinearOptions& options);

  int64_t input_size() const { return options_.input_size; }
  int64_t output_size() const { return options_.output_size; }
  bool has_bias() const { return bias_ != nullptr; }
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }

  // (tokens, input) -> (tokens, output) [or (tokens, range size)], dtype of the input.
  Tensor forward(const Tensor& input, Stream stream, std::optional<OutputRange> range = std::nullopt) const;
  // grad_output (tokens, output or range size), input (tokens, input) as given to forward. Writes `grad_input`
  // (tokens, input) when given: = , or += with `accumulate_grad_input`. Accumulates weight and bias gradients.
  void backward(const Tensor& grad_output, const Tensor& input, Tensor* grad_input, bool accumulate_grad_input,
                Stream stream, std::optional<OutputRange> range = std::nullopt) const;
  // Convenience: returns a fresh grad_input.
  Tensor backward(const Tensor& grad_output, const Tensor& input, Stream stream,
                  std::optional<OutputRange> range = std::nullopt) const;

  // Forward + backward FLOPs for `tokens` tokens: 6 * tokens * input * output.
  double flops(int64_t tokens) const { return 6.0 * double(tokens) * double(options_.input_size * options_.output_size); }

 private:
  // The weight and bias (gradients) restricted to `range`.
  // The beta of this step's next gradient accumulation into `parameter` over `range` (Parameter::grad_beta).
  static double accumulation_beta(Parameter& parameter, const std::optional<OutputRange>& range, Stream stream);
  Tensor weight_rows(const Tensor& weight, const std::optional<OutputRange>& range) const;
  Tensor bias_rows(const Tensor& bias, const std::optional<OutputRange>& range) const;
  // (1, count) ones in `dtype` on `device`, for the bias gradient (column sums as a gemm); cached, grown on demand.
  Tensor ones(int64_t count, DType dtype, Device device, Stream stream) const;

  LinearOptions options_;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  mutable std::mutex ones_mutex_;
  mutable Tensor ones_;
};

}  // namespace fast_llm::layers
