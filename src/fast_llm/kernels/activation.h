// Ops: activation_forward / activation_backward for the MLP's middle: y = act(x), or for gated MLPs
// y = act(gate) * up where the input row is [gate (I) | up (I)] (Fast-LLM's fused layer_1 output, gate first).
// Activations as Fast-LLM: gelu is the tanh approximation; squared_relu is relu(x)^2. Math in fp32 (fp64 for fp64).
// Backward recomputes act from the saved input and writes grad_input (=). Every tensor has the input's floating dtype.
#pragma once

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

enum class ActivationType { gelu, silu, relu, squared_relu, sigmoid, identity };

struct ActivationForwardArgs {
  ActivationType type = ActivationType::silu;
  bool gated = false;
  const Tensor& input;  // (tokens, I), or (tokens, 2 I) when gated
  Tensor& output;       // (tokens, I)
  Stream stream = {};
};

struct ActivationBackwardArgs {
  ActivationType type = ActivationType::silu;
  bool gated = false;
  const Tensor& grad_output;  // (tokens, I)
  const Tensor& input;        // (tokens, I) or (tokens, 2 I)
  Tensor& grad_input;         // like input, =
  Stream stream = {};
};

struct ActivationForward {
  static constexpr std::string_view name = "activation_forward";
  using Args = ActivationForwardArgs;
};
struct ActivationBackward {
  static constexpr std::string_view name = "activation_backward";
  using Args = ActivationBackwardArgs;
};

// The contract above, checked once by each entry function before dispatch: throws `[activation_forward] ...`.
void check_activation_forward(const ActivationForwardArgs& args);
void check_activation_backward(const ActivationBackwardArgs& args);

inline void activation_forward(const ActivationForwardArgs& args) {
  check_activation_forward(args);
  dispatch<ActivationForward>(args, args.input.device());
}
inline void activation_backward(const ActivationBackwardArgs& args) {
  check_activation_backward(args);
  dispatch<ActivationBackward>(args, args.input.device());
}

}  // namespace fast_llm::kernels
