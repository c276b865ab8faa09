// The contract of activation_forward / activation_backward (kernels/activation.h), checked once per call by the
// entry functions.
#include "fast_llm/kernels/activation.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {
namespace {

// input (tokens, I), or (tokens, 2 I) [gate | up] when gated, of a floating dtype; returns the output's shape
// (tokens, I).
Shape check_input(const OpContract& contract, const Tensor& input, bool gated) {
  contract.rank("input", input, 2, gated ? "(tokens, 2 I) [gate | up]" : "(tokens, I)");
  contract.floating("input", input);
  FLM_CHECK(!gated || input.size(1) % 2 == 0, contract.op(),
            "input has shape {}: a gated input needs an even number of columns [gate | up]", input.shape().str());
  return Shape{input.size(0), gated ? input.size(1) / 2 : input.size(1)};
}

}  // namespace

void check_activation_forward(const ActivationForwardArgs& args) {
  const OpContract contract("activation_forward", args.input.device());
  contract.shape("output", args.output, check_input(contract, args.input, args.gated));
  contract.same_dtype("output", args.output, "input", args.input);
}

void check_activation_backward(const ActivationBackwardArgs& args) {
  const OpContract contract("activation_backward", args.input.device());
  contract.shape("grad_output", args.grad_output, check_input(contract, args.input, args.gated));
  contract.shape("grad_input", args.grad_input, args.input.shape());
  contract.same_dtype("grad_output", args.grad_output, "input", args.input);
  contract.same_dtype("grad_input", args.grad_input, "input", args.input);
}

}  // namespace fast_llm::kernels
