// Ops: rms_norm_forward / rms_norm_backward, layer_norm_forward / layer_norm_backward.
//
// Rows are normalised over the last dimension: input (rows, hidden) in the compute dtype, math in fp32 (fp64 for
// fp64 inputs). `zero_centered` means the effective weight is 1 + weight (Gemma style). `weight` may be null
// (fixed_rms_norm: no weight). Backward writes grad_input (=) and accumulates grad_weight / grad_bias (+=), which
// are usually fp32 gradient buffers.
//   rms_norm:   y = x / sqrt(mean(x^2) + eps) * w
//   layer_norm: y = (x - mean(x)) / sqrt(var(x) + eps) * w + b
// Residual form, which folds a skip connection into the norm next to it and saves a pass over the activations each
// way: given `residual`, the forward normalises x = input + residual (rounded to the dtype), which it also writes to
// `sum` (the residual stream after the addition, and the input the backward is given); given `grad_residual`, the
// backward writes grad_input = grad_residual + the norm's gradient (the skip connection's gradient joins the norm's).
// dtypes: every (rows, hidden) tensor has the input's floating dtype; weight and bias any floating dtype; statistics
// and parameter gradients float32 (or float64, for exact fp64 tests).
#pragma once

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

struct RmsNormForwardArgs {
  const Tensor& input;     // (rows, hidden)
  const Tensor* weight;    // (hidden) or nullptr
  Tensor& output;          // (rows, hidden), dtype of input
  Tensor& inverse_rms;     // (rows) fp32: 1 / sqrt(mean(x^2) + eps), saved for backward
  double epsilon = 1e-5;
  bool zero_centered = false;
  const Tensor* residual = nullptr;  // (rows, hidden) or nullptr: the row normalised is input + residual
  Tensor* sum = nullptr;             // (rows, hidden) input + residual, with `residual`; may be `input` itself
  Stream stream = {};
};

struct RmsNormBackwardArgs {
  const Tensor& grad_output;  // (rows, hidden)
  const Tensor& input;        // (rows, hidden)
  const Tensor* weight;       // (hidden) or nullptr
  const Tensor& inverse_rms;  // (rows) fp32
  Tensor& grad_input;         // (rows, hidden) =
  Tensor* grad_weight;        // (hidden) +=, or nullptr
  bool zero_centered = false;
  const Tensor* grad_residual = nullptr;  // (rows, hidden) or nullptr: added to grad_input
  Stream stream = {};
};

struct LayerNormForwardArgs {
  const Tensor& input;    // (rows, hidden)
  const Tensor* weight;   // (hidden) or nullptr
  const Tensor* bias;     // (hidden) or nullptr
  Tensor& output;         // (rows, hidden)
  Tensor& mean;           // (rows) fp32, saved
  Tensor& inverse_std;    // (rows) fp32, saved
  double epsilon = 1e-5;
  bool zero_centered = false;
  const Tensor* residual = nullptr;  // (rows, hidden) or nullptr: the row normalised is input + residual
  Tensor* sum = nullptr;             // (rows, hidden) input + residual, with `residual`; may be `input` itself
  Stream stream = {};
};

struct LayerNormBackwardArgs {
  const Tensor& grad_output;  // (rows, hidden)
  const Tensor& input;        // (rows, hidden)
  const Tensor* weight;       // (hidden) or nullptr
  const Tensor& mean;         // (rows) fp32
  const Tensor& inverse_std;  // (rows) fp32
  Tensor& grad_input;         // (rows, hidden) =
  Tensor* grad_weight;        // (hidden) +=, or nullptr
  Tensor* grad_bias;          // (hidden) +=, or nullptr
  bool zero_centered = false;
  const Tensor* grad_residual = nullptr;  // (rows, hidden) or nullptr: added to grad_input
  Stream stream = {};
};

struct RmsNormForward {
  static constexpr std::string_view name = "rms_norm_forward";
  using Args = RmsNormForwardArgs;
};
struct RmsNormBackward {
  static constexpr std::string_view name = "rms_norm_backward";
  using Args = RmsNormBackwardArgs;
};
struct LayerNormForward {
  static constexpr std::string_view name = "layer_norm_forward";
  using Args = LayerNormForwardArgs;
};
struct LayerNormBackward {
  static constexpr std::string_view name = "layer_norm_backward";
  using Args = LayerNormBackwardArgs;
};

// The contract above (shapes, dtypes, devices), checked once by each entry function before dispatch: throws
// `[rms_norm_forward] ...` naming the argument that breaks it.
void check_rms_norm_forward(const RmsNormForwardArgs& args);
void check_rms_norm_backward(const RmsNormBackwardArgs& args);
void check_layer_norm_forward(const LayerNormForwardArgs& args);
void check_layer_norm_backward(const LayerNormBackwardArgs& args);

inline void rms_norm_forward(const RmsNormForwardArgs& args) {
  check_rms_norm_forward(args);
  dispatch<RmsNormForward>(args, args.input.device());
}
inline void rms_norm_backward(const RmsNormBackwardArgs& args) {
  check_rms_norm_backward(args);
  dispatch<RmsNormBackward>(args, args.input.device());
}
inline void layer_norm_forward(const LayerNormForwardArgs& args) {
  check_layer_norm_forward(args);
  dispatch<LayerNormForward>(args, args.input.device());
}
inline void layer_norm_backward(const LayerNormBackwardArgs& args) {
  check_layer_norm_backward(args);
  dispatch<LayerNormBackward>(args, args.input.device());
}

}  // namespace fast_llm::kernels
