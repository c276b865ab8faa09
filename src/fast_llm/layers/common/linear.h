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
//
// LoRA (`peft: lora`, LinearOptions::lora): a low-rank adapter on output features [begin, end) of the layer,
//   y[:, begin:end] += (alpha / rank) * dropout(x) A^T B^T,   A = lora_0.weight [rank, input] (the weight's
//   initialisation, as Fast-LLM), B = lora_1.weight [end - begin, rank] (zeros: training starts from the base model);
// both stored transposed with `transposed_weight`, as Fast-LLM's lora_linear does. Names as Fast-LLM's:
// `<name>.lora_0.weight`, `<name>.lora_1.weight`, marked ParameterMeta::peft. Dropout draws its mask from the seed the
// caller passes (the micro-batch's LayerContext::dropout_seed, hashed with the layer name); no seed: no dropout
// (inference). Backward regenerates the dropped input and the (tokens, rank) intermediate from the same seed rather
// than keeping them.
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include "fast_llm/layers/common/linear_config.h"
#include "fast_llm/layers/common/parameter_settings.h"
#include "fast_llm/layers/common/tensor_parallel.h"
#include "fast_llm/layers/peft/config.h"
#include "fast_llm/layers/layer.h"

namespace fast_llm::layers {

struct LoraOptions {
  int rank = 8;
  double alpha = 8.0;
  double dropout = 0.0;
  int64_t begin = 0;  // output features the adapter adds to: [begin, end)
  int64_t end = 0;
};

// Tensor parallelism of a linear layer (common/tensor_parallel.h). `column`: the output features are split over the
// ranks (in LinearOptions::tensor_blocks equal blocks, each split), and so is the bias; `row`: the input features are
// split, forward returns a partial sum without the bias, which the caller adds (add_bias) once it has summed the
// output over the group; `replicated`: whole on every rank, which uses its output for its own part of the work (the
// single key and value group of multi-query attention), so its gradients are partial (summed by the engine) and so is
// its input gradient (summed by the caller).
enum class TensorParallelMode { none, column, row, replicated };

struct LinearOptions {
  int64_t input_size = 0;
  int64_t output_size = 0;
  bool bias = false;
  bool transposed_weight = false;  // weight stored [input, output]
  ParameterSettings weight;
  ParameterSettings bias_settings;  // used when `bias`
  std::optional<LoraOptions> lora;
  // input_size and output_size are this rank's with tensor parallelism.
  TensorParallelism tensor_parallel;
  TensorParallelMode tensor_parallel_mode = TensorParallelMode::none;
  int tensor_blocks = 1;
};

// The adapter of a linear layer configured by `config`: LoRA over output features [begin, end) when the model has
// `lora` (null: no PEFT) and the layer's `apply_peft` says so (unset: `default_apply`, true for the query and value
// projections as in Fast-LLM); nothing otherwise.
std::optional<LoraOptions> lora_options(const LoraConfig* lora, const LinearConfig& config, bool default_apply,
                                        int64_t begin, int64_t end);

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
  bool transposed_weight() const { return options_.transposed_weight; }
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }
  // The LoRA adapter's options and weights (A = lora_0, B = lora_1), when the layer has one.
  const std::optional<LoraOptions>& lora() const { return options_.lora; }
  Parameter* lora_0() { return lora_0_; }
  Parameter* lora_1() { return lora_1_; }
  // Whether a forward with a dropout seed draws random numbers (the adapter's dropout).
  bool uses_dropout() const { return options_.lora && options_.lora->dropout > 0.0; }

  // (tokens, input) -> (tokens, output) [or (tokens, range size)], dtype of the input. `dropout_seed`: the
  // micro-batch's seed in a training forward (LoRA dropout), unset otherwise.
  Tensor forward(const Tensor& input, Stream stream, std::optional<OutputRange> range = std::nullopt,
                 std::optional<uint64_t> dropout_seed = std::nullopt) const;
  // grad_output (tokens, output or range size), input (tokens, input) and `dropout_seed` as given to forward. Writes
  // `grad_input` (tokens, input) when given: = , or += with `accumulate_grad_input`. Accumulates parameter gradients,
  // unless `parameter_gradients` is false (a caller that starts a reduction of grad_input first, then calls again
  // without grad_input for them; not with a LoRA adapter).
  void backward(const Tensor& grad_output, const Tensor& input, Tensor* grad_input, bool accumulate_grad_input,
                Stream stream, std::optional<OutputRange> range = std::nullopt,
                std::optional<uint64_t> dropout_seed = std::nullopt, bool parameter_gradients = true) const;
  // Convenience: returns a fresh grad_input.
  Tensor backward(const Tensor& grad_output, const Tensor& input, Stream stream,
                  std::optional<OutputRange> range = std::nullopt,
                  std::optional<uint64_t> dropout_seed = std::nullopt) const;

  // Whether forward leaves the bias out, for add_bias after the output has been summed over the tensor group.
  bool bias_after_reduction() const {
    return bias_ != nullptr && options_.tensor_parallel.enabled() &&
           options_.tensor_parallel_mode == TensorParallelMode::row;
  }
  // output (tokens, output) += bias, where forward left it out (bias_after_reduction).
  void add_bias(Tensor& output, Stream stream) const;

  // Forward + backward FLOPs for `tokens` tokens: 6 * tokens * input * output (the adapter's are not model FLOPs).
  double flops(int64_t tokens) const { return 6.0 * double(tokens) * double(options_.input_size * options_.output_size); }

 private:
  // The weight and bias (gradients) restricted to `range`.
  // The beta of this step's next gradient accumulation into `parameter` over `range` (Parameter::grad_beta).
  static double accumulation_beta(Parameter& parameter, const std::optional<OutputRange>& range, Stream stream);
  Tensor weight_rows(const Tensor& weight, const std::optional<OutputRange>& range) const;
  Tensor bias_rows(const Tensor& bias, const std::optional<OutputRange>& range) const;
  // The adapter's part of a call over `range`: output features [begin, end) of the layer, empty when they miss it.
  OutputRange lora_overlap(const std::optional<OutputRange>& range) const;
  // dropout(input) as a fresh contiguous tensor (the input itself without dropout or seed).
  Tensor lora_input(const Tensor& input, const std::optional<uint64_t>& dropout_seed, Stream stream) const;
  // The B rows (columns when transposed) of output features `overlap`.
  Tensor lora_1_part(const Tensor& weight, OutputRange overlap) const;
  void lora_forward(const Tensor& input, Tensor& output, const std::optional<OutputRange>& range,
                    const std::optional<uint64_t>& dropout_seed, Stream stream) const;
  void lora_backward(const Tensor& grad_output, const Tensor& input, Tensor* grad_input,
                     const std::optional<OutputRange>& range, const std::optional<uint64_t>& dropout_seed,
                     Stream stream) const;
  // (1, count) ones in `dtype` on `device`, for the bias gradient (column sums as a gemm); cached, grown on demand.
  Tensor ones(int64_t count, DType dtype, Device device, Stream stream) const;

  LinearOptions options_;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  Parameter* lora_0_ = nullptr;
  Parameter* lora_1_ = nullptr;
  mutable std::mutex ones_mutex_;
  mutable Tensor ones_;
};

}  // namespace fast_llm::layers
