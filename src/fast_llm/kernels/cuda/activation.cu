// Fused activations on CUDA (kernels/activation.h): one pass over (tokens, I), reading [gate | up] rows for gated
// MLPs (silu gated = SwiGLU), fp32 math (fp64 for fp64 tensors), rounded to nearest even on store. Backward recomputes
// the activation from the saved input, so forward keeps nothing else. Rows whose columns are contiguous and 16-byte
// aligned move in 16-byte vectors; any other strides go element by element. bf16 / fp16 tensors take the sigmoid's
// exp and reciprocal from the special-function unit (kFastMath below). One kernel per activation type, rather than the
// type switched on per element (docs/benchmarks.md).
#include "fast_llm/kernels/cuda/common.cuh"
//
#include "fast_llm/kernels/activation.h"

namespace fast_llm::kernels::cuda {

// The grid-stride loops' launch: 256 threads a block, at most 32 blocks per multiprocessor.
constexpr int kThreads = 256;
constexpr int kBlocksPerMultiprocessor = 32;

// Arithmetic type for elements of type T: fp64 for fp64, fp32 for the rest.
template <class T>
using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;

// gelu is the tanh approximation 0.5 x (1 + tanh(k (x + c x^3))), k = sqrt(2 / pi), c = 0.044715 (as Fast-LLM).
constexpr double kGeluScale = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

template <class C>
static __device__ __forceinline__ C exponential(C x) {
  if constexpr (std::is_same_v<C, float>)
    return expf(x);
  else
    return exp(x);
}

template <class C>
static __device__ __forceinline__ C hyperbolic_tangent(C x) {
  if constexpr (std::is_same_v<C, float>)
    return tanhf(x);
  else
    return tanh(x);
}

// kFast (16-bit storage types, whose results keep 8 or 11 bits): the sigmoid's exp and reciprocal on the
// special-function unit, one instruction each (__expf: 2 + 1.17 |x| ulp at most, about 1e-5 relative at the |x| of 88
// where exp overflows; rcp.approx.ftz: 1 ulp, and 1 + exp(-x) >= 1, so nothing it flushes is a result), instead of
// IEEE expf and division, which cost several times the instructions in these memory-bound passes. fp32 and fp64
// tensors keep the exact forms.
static __device__ __forceinline__ float approximate_reciprocal(float x) {
  float result;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(result) : "f"(x));
  return result;
}

template <bool kFast, class C>
static __device__ __forceinline__ C sigmoid(C x) {
  if constexpr (kFast && std::is_same_v<C, float>)
    return approximate_reciprocal(1.0f + __expf(-x));
  else
    return C(1) / (C(1) + exponential(-x));
}

// The activation is a template argument, so that a kernel's loop holds its arithmetic alone, not a switch over
// every activation per element (which doubled the instructions of the SwiGLU backward).
template <ActivationType kType, bool kFast, class C>
static __device__ __forceinline__ C activation_value(C x) {
  if constexpr (kType == ActivationType::gelu)
    return C(0.5) * x * (C(1) + hyperbolic_tangent(C(kGeluScale) * (x + C(kGeluCubic) * x * x * x)));
  else if constexpr (kType == ActivationType::silu)
    return x * sigmoid<kFast>(x);
  else if constexpr (kType == ActivationType::relu)
    return x > C(0) ? x : C(0);
  else if constexpr (kType == ActivationType::squared_relu)
    return x > C(0) ? x * x : C(0);
  else if constexpr (kType == ActivationType::sigmoid)
    return sigmoid<kFast>(x);
  else
    return x;
}

// (x s(x))' = s (1 + x (1 - s)), from x and its sigmoid s.
template <class C>
static __device__ __forceinline__ C silu_derivative(C x, C s) {
  return s * (C(1) + x * (C(1) - s));
}

// d act / dx.
template <ActivationType kType, bool kFast, class C>
static __device__ __forceinline__ C activation_derivative(C x) {
  if constexpr (kType == ActivationType::gelu) {
    // t = tanh(u), u = k (x + c x^3):  0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
    const C t = hyperbolic_tangent(C(kGeluScale) * (x + C(kGeluCubic) * x * x * x));
    return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * C(kGeluScale) * (C(1) + C(3 * kGeluCubic) * x * x);
  } else if constexpr (kType == ActivationType::silu) {
    return silu_derivative(x, sigmoid<kFast>(x));
  } else if constexpr (kType == ActivationType::relu) {
    return x > C(0) ? C(1) : C(0);
  } else if constexpr (kType == ActivationType::squared_relu) {
    return x > C(0) ? C(2) * x : C(0);
  } else if constexpr (kType == ActivationType::sigmoid) {
    const C s = sigmoid<kFast>(x);
    return s * (C(1) - s);
  } else {
    return C(1);
  }
}

// act(x) and act'(x) together, the sigmoid of silu computed once for both (inline asm is not merged by the compiler).
template <ActivationType kType, bool kFast, class C>
struct ValueAndDerivative {
  C value, derivative;
  __device__ __forceinline__ explicit ValueAndDerivative(C x) {
    if constexpr (kType == ActivationType::silu) {
      const C s = sigmoid<kFast>(x);
      value = x * s;
      derivative = silu_derivative(x, s);
    } else {
      value = activation_value<kType, kFast>(x);
      derivative = activation_derivative<kType, kFast>(x);
    }
  }
};

// Calls f.template operator()<kType>() for the run-time activation type.
template <class F>
static void visit_activation(ActivationType type, F&& f) {
  switch (type) {
    case ActivationType::gelu: return f.template operator()<ActivationType::gelu>();
    case ActivationType::silu: return f.template operator()<ActivationType::silu>();
    case ActivationType::relu: return f.template operator()<ActivationType::relu>();
    case ActivationType::squared_relu: return f.template operator()<ActivationType::squared_relu>();
    case ActivationType::sigmoid: return f.template operator()<ActivationType::sigmoid>();
    case ActivationType::identity: return f.template operator()<ActivationType::identity>();
  }
  FLM_CHECK(false, "activation", "unknown activation type {}", int(type));
}

// N consecutive elements of a row: one 16-byte access when N > 1 (then the column stride is 1), else one element at
// any stride.
template <class T, int N>
static __device__ __forceinline__ Vector<T, N> load_row(const T* pointer) {
  return *reinterpret_cast<const Vector<T, N>*>(pointer);
}
template <class T, int N>
static __device__ __forceinline__ void store_row(T* pointer, const Vector<T, N>& value) {
  *reinterpret_cast<Vector<T, N>*>(pointer) = value;
}

// Element strides of a (tokens, columns) tensor.
struct RowStrides {
  int64_t row = 0, column = 0;
};

// A grid-stride loop's position over (token, column step) pairs, steps_per_row column steps a row: advancing by the
// grid's stride adds its whole rows and remainder (one carry at most), so that no step pays a 64-bit division.
struct GridRowCursor {
  int64_t token, column_step;
  const int64_t steps_per_row, stride_rows, stride_columns;

  __device__ __forceinline__ explicit GridRowCursor(int64_t steps_per_row_)
      : steps_per_row(steps_per_row_),
        stride_rows(int64_t(gridDim.x) * blockDim.x / steps_per_row_),
        stride_columns(int64_t(gridDim.x) * blockDim.x % steps_per_row_) {
    const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    token = first / steps_per_row;
    column_step = first % steps_per_row;
  }
  __device__ __forceinline__ void advance() {
    token += stride_rows;
    column_step += stride_columns;
    if (column_step >= steps_per_row) {
      column_step -= steps_per_row;
      ++token;
    }
  }
};

template <class T>
constexpr bool kFastMath = sizeof(T) == 2;

// output (tokens, I) = act(input[:, :I]) (* input[:, I:2I] when gated), N columns per step.
template <class T, ActivationType kType, bool kGated, int N>
static __global__ void activation_forward_kernel(const T* __restrict__ input, RowStrides input_strides,
                                                 T* __restrict__ output, RowStrides output_strides, int64_t tokens,
                                                 int64_t size) {
  using C = Compute<T>;
  for (GridRowCursor cursor(size / N); cursor.token < tokens; cursor.advance()) {
    const int64_t token = cursor.token, column = cursor.column_step * N;
    const T* gate_pointer = input + token * input_strides.row + column * input_strides.column;
    const Vector<T, N> gate = load_row<T, N>(gate_pointer);
    Vector<T, N> up;
    if constexpr (kGated) up = load_row<T, N>(gate_pointer + size * input_strides.column);
    Vector<T, N> result;
#pragma unroll
    for (int lane = 0; lane < N; ++lane) {
      C y = activation_value<kType, kFastMath<T>>(C(load(gate.values[lane])));
      if constexpr (kGated) y *= C(load(up.values[lane]));
      result.values[lane] = store<T>(y);
    }
    store_row<T, N>(output + token * output_strides.row + column * output_strides.column, result);
  }
}

// grad_input = d/d input of sum(grad_output * output): for gated rows [gate | up],
//   grad_gate = g up act'(gate), grad_up = g act(gate); otherwise grad_x = g act'(x).
template <class T, ActivationType kType, bool kGated, int N>
static __global__ void activation_backward_kernel(const T* __restrict__ grad_output,
                                                  RowStrides grad_output_strides, const T* __restrict__ input,
                                                  RowStrides input_strides, T* __restrict__ grad_input,
                                                  RowStrides grad_input_strides, int64_t tokens, int64_t size) {
  using C = Compute<T>;
  for (GridRowCursor cursor(size / N); cursor.token < tokens; cursor.advance()) {
    const int64_t token = cursor.token, column = cursor.column_step * N;
    const T* x_pointer = input + token * input_strides.row + column * input_strides.column;
    const Vector<T, N> x = load_row<T, N>(x_pointer);
    const Vector<T, N> g =
        load_row<T, N>(grad_output + token * grad_output_strides.row + column * grad_output_strides.column);
    T* grad_pointer = grad_input + token * grad_input_strides.row + column * grad_input_strides.column;
    if constexpr (kGated) {
      const Vector<T, N> up = load_row<T, N>(x_pointer + size * input_strides.column);
      Vector<T, N> grad_gate, grad_up;
#pragma unroll
      for (int lane = 0; lane < N; ++lane) {
        const ValueAndDerivative<kType, kFastMath<T>, C> activation(C(load(x.values[lane])));
        const C g_value = C(load(g.values[lane]));
        grad_gate.values[lane] = store<T>(g_value * C(load(up.values[lane])) * activation.derivative);
        grad_up.values[lane] = store<T>(g_value * activation.value);
      }
      store_row<T, N>(grad_pointer, grad_gate);
      store_row<T, N>(grad_pointer + size * grad_input_strides.column, grad_up);
    } else {
      Vector<T, N> grad_x;
#pragma unroll
      for (int lane = 0; lane < N; ++lane)
        grad_x.values[lane] =
            store<T>(C(load(g.values[lane])) * activation_derivative<kType, kFastMath<T>>(C(load(x.values[lane]))));
      store_row<T, N>(grad_pointer, grad_x);
    }
  }
}

static RowStrides strides_of(const Tensor& tensor) { return {.row = tensor.stride(0), .column = tensor.stride(1)}; }

// Whether N-element steps can use 16-byte accesses on `tensor`: unit column stride, rows and the start aligned.
template <class T, int N>
static bool vectorizable(const Tensor& tensor) {
  return tensor.stride(1) == 1 && tensor.stride(0) % N == 0 && is_aligned(tensor.data(), sizeof(T) * N);
}

// The element types of the kernels: the fused ops' and float64.
template <class Function>
static void visit_element_type(DType dtype, Function&& function) {
  visit_dtype<float, double, bfloat16, float16>(dtype, std::forward<Function>(function));
}

static void activation_forward_cuda(const ActivationForwardArgs& args) {
  const int64_t tokens = args.output.size(0), size = args.output.size(1);
  if (tokens == 0 || size == 0) return;
  LaunchScope scope("activation_forward", args.input.device(), args.stream);
  visit_element_type(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    constexpr int N = int(16 / sizeof(T));
    const T* input = static_cast<const T*>(args.input.data());
    T* output = static_cast<T*>(args.output.data());
    const bool vectorized = size % N == 0 && vectorizable<T, N>(args.input) && vectorizable<T, N>(args.output);
    visit_activation(args.type, [&]<ActivationType kType>() {
      auto launch = [&]<bool kGated, int kWidth>() {
        activation_forward_kernel<T, kType, kGated, kWidth>
            <<<grid_for(tokens * (size / kWidth), kThreads, scope, kBlocksPerMultiprocessor), kThreads, 0,
               scope.stream()>>>(input, strides_of(args.input), output, strides_of(args.output), tokens, size);
      };
      if (args.gated)
        vectorized ? launch.template operator()<true, N>() : launch.template operator()<true, 1>();
      else
        vectorized ? launch.template operator()<false, N>() : launch.template operator()<false, 1>();
    });
    scope.check_launch();
  });
}

static void activation_backward_cuda(const ActivationBackwardArgs& args) {
  const int64_t tokens = args.grad_output.size(0), size = args.grad_output.size(1);
  if (tokens == 0 || size == 0) return;
  LaunchScope scope("activation_backward", args.input.device(), args.stream);
  visit_element_type(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    constexpr int N = int(16 / sizeof(T));
    const T* grad_output = static_cast<const T*>(args.grad_output.data());
    const T* input = static_cast<const T*>(args.input.data());
    T* grad_input = static_cast<T*>(args.grad_input.data());
    const bool vectorized = size % N == 0 && vectorizable<T, N>(args.grad_output) && vectorizable<T, N>(args.input) &&
                            vectorizable<T, N>(args.grad_input);
    visit_activation(args.type, [&]<ActivationType kType>() {
      auto launch = [&]<bool kGated, int kWidth>() {
        activation_backward_kernel<T, kType, kGated, kWidth>
            <<<grid_for(tokens * (size / kWidth), kThreads, scope, kBlocksPerMultiprocessor), kThreads, 0,
               scope.stream()>>>(grad_output, strides_of(args.grad_output), input, strides_of(args.input), grad_input,
                                 strides_of(args.grad_input), tokens, size);
      };
      if (args.gated)
        vectorized ? launch.template operator()<true, N>() : launch.template operator()<true, 1>();
      else
        vectorized ? launch.template operator()<false, N>() : launch.template operator()<false, 1>();
    });
    scope.check_launch();
  });
}

FLM_REGISTER_KERNEL(ActivationForward, DeviceType::cuda, "fused", /*priority=*/0, KernelKind::baseline, nullptr,
                    &activation_forward_cuda,
                    "one pass over [gate | up] rows (SwiGLU when gated silu), 16-byte vectors, fp32 math");
FLM_REGISTER_KERNEL(ActivationBackward, DeviceType::cuda, "fused", /*priority=*/0, KernelKind::baseline, nullptr,
                    &activation_backward_cuda, "one pass recomputing the activation, 16-byte vectors, fp32 math");

}  // namespace fast_llm::kernels::cuda
