// CPU reference of activation_forward / activation_backward (kernels/activation.h).
//
// Element by element over (tokens, I) tensors of any strides; gated inputs are (tokens, 2 I) rows [gate | up]. All
// tensors of one call share a floating dtype; math in fp32 (fp64 for fp64), rounded on store. Backward recomputes the
// activation from the saved input and writes grad_input (=).
#include "fast_llm/kernels/activation.h"

#include <cmath>

#include "fast_llm/kernels/cpu/dtype_dispatch.h"

namespace fast_llm::kernels::cpu {
namespace {

// gelu (tanh approximation): 0.5 x (1 + tanh(k (x + c x^3))), k = sqrt(2 / pi), c = 0.044715.
constexpr double kGeluScale = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

template <class Compute>
Compute sigmoid(Compute x) {
  return Compute(1) / (Compute(1) + std::exp(-x));
}

template <class Compute>
Compute activation_value(ActivationType type, Compute x) {
  switch (type) {
    case ActivationType::gelu:
      return Compute(0.5) * x * (Compute(1) + std::tanh(Compute(kGeluScale) * (x + Compute(kGeluCubic) * x * x * x)));
    case ActivationType::silu: return x * sigmoid(x);
    case ActivationType::relu: return x > Compute(0) ? x : Compute(0);
    case ActivationType::squared_relu: return x > Compute(0) ? x * x : Compute(0);
    case ActivationType::sigmoid: return sigmoid(x);
    case ActivationType::identity: return x;
  }
  FLM_ASSERT(false, "activation type {} is not handled", int(type));
  return x;
}

// d act / dx.
template <class Compute>
Compute activation_derivative(ActivationType type, Compute x) {
  switch (type) {
    case ActivationType::gelu: {
      // With t = tanh(u), u = k (x + c x^3): 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2).
      const Compute t = std::tanh(Compute(kGeluScale) * (x + Compute(kGeluCubic) * x * x * x));
      return Compute(0.5) * (Compute(1) + t) + Compute(0.5) * x * (Compute(1) - t * t) * Compute(kGeluScale) *
                                                   (Compute(1) + Compute(3 * kGeluCubic) * x * x);
    }
    case ActivationType::silu: {
      // x s(x): s + x s (1 - s).
      const Compute s = sigmoid(x);
      return s * (Compute(1) + x * (Compute(1) - s));
    }
    case ActivationType::relu: return x > Compute(0) ? Compute(1) : Compute(0);
    case ActivationType::squared_relu: return x > Compute(0) ? Compute(2) * x : Compute(0);
    case ActivationType::sigmoid: {
      const Compute s = sigmoid(x);
      return s * (Compute(1) - s);
    }
    case ActivationType::identity: return Compute(1);
  }
  FLM_ASSERT(false, "activation type {} is not handled", int(type));
  return x;
}

void activation_forward_reference(const ActivationForwardArgs& args) {
  const int64_t tokens = args.output.size(0), size = args.output.size(1);
  visit_floating_dtype(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const T* input = args.input.data_as<T>();  // (tokens, I) or (tokens, 2 I)
    T* output = args.output.data_as<T>();      // (tokens, I)
    const int64_t input_row = args.input.stride(0), input_column = args.input.stride(1);
    const int64_t output_row = args.output.stride(0), output_column = args.output.stride(1);
#pragma omp parallel for
    for (int64_t token = 0; token < tokens; ++token) {
      for (int64_t column = 0; column < size; ++column) {
        // y = act(x), or act(gate) * up
        const Compute x = load_value(input[token * input_row + column * input_column]);
        Compute y = activation_value(args.type, x);
        if (args.gated) y *= load_value(input[token * input_row + (column + size) * input_column]);
        output[token * output_row + column * output_column] = store_value<T>(y);
      }
    }
  });
}

void activation_backward_reference(const ActivationBackwardArgs& args) {
  const int64_t tokens = args.grad_output.size(0), size = args.grad_output.size(1);
  visit_floating_dtype(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const T* input = args.input.data_as<T>();              // (tokens, I) or (tokens, 2 I)
    const T* grad_output = args.grad_output.data_as<T>();  // (tokens, I)
    T* grad_input = args.grad_input.data_as<T>();          // like input
    const int64_t input_row = args.input.stride(0), input_column = args.input.stride(1);
    const int64_t grad_output_row = args.grad_output.stride(0), grad_output_column = args.grad_output.stride(1);
    const int64_t grad_input_row = args.grad_input.stride(0), grad_input_column = args.grad_input.stride(1);
#pragma omp parallel for
    for (int64_t token = 0; token < tokens; ++token) {
      for (int64_t column = 0; column < size; ++column) {
        const Compute x = load_value(input[token * input_row + column * input_column]);
        const Compute g = load_value(grad_output[token * grad_output_row + column * grad_output_column]);
        if (args.gated) {
          // y = act(gate) up:  grad_gate = g up act'(gate),  grad_up = g act(gate)
          const Compute up = load_value(input[token * input_row + (column + size) * input_column]);
          const Compute grad_gate = g * up * activation_derivative(args.type, x);
          const Compute grad_up = g * activation_value(args.type, x);
          grad_input[token * grad_input_row + column * grad_input_column] = store_value<T>(grad_gate);
          grad_input[token * grad_input_row + (column + size) * grad_input_column] = store_value<T>(grad_up);
        } else {
          // y = act(x):  grad_x = g act'(x)
          grad_input[token * grad_input_row + column * grad_input_column] =
              store_value<T>(g * activation_derivative(args.type, x));
        }
      }
    }
  });
}

}  // namespace

FLM_REGISTER_KERNEL(ActivationForward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &activation_forward_reference, "element by element; fp32 math (fp64 for fp64 inputs)");
FLM_REGISTER_KERNEL(ActivationBackward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &activation_backward_reference,
                    "element by element, recomputing the activation; fp32 math (fp64 for fp64 inputs)");

}  // namespace fast_llm::kernels::cpu
