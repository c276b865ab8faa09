// CUDA launchers of activation_forward / activation_backward (kernels/activation.h), registered as
// `activation_forward:cuda:fused` / `activation_backward:cuda:fused` in activation.cu. With `gated` and silu they are
// the fused SwiGLU of the MLP: out = silu(gate) * up over rows [gate | up], and its backward.
#pragma once

#include "fast_llm/kernels/activation.h"

namespace fast_llm::kernels::cuda {

std::optional<std::string> activation_forward_cuda_supports(const ActivationForwardArgs& args);
void activation_forward_cuda(const ActivationForwardArgs& args);
std::optional<std::string> activation_backward_cuda_supports(const ActivationBackwardArgs& args);
void activation_backward_cuda(const ActivationBackwardArgs& args);

}  // namespace fast_llm::kernels::cuda
