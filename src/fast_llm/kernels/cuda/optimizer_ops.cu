// Fused CUDA adam_step, squared_norm and optimizer_decision (kernels/optimizer_ops.h), variant "fused".
//
// adam_step: one launch over a contiguous fp32 range (a stage's shard); a grid-stride loop over 16-byte vectors of the
// four tensors (float4), the last count % 4 elements one by one; the scalar path runs when a pointer is not 16-byte
// aligned (or the compute-dtype weights not 8-byte aligned). Bias corrections are computed in fp64 (on the host from
// the arguments, or by optimizer_decision on the device), the update is in fp32. With a decision state every thread
// reads the same few fp64 scalars first and leaves at once when the step is skipped, so the compute-dtype weights stay
// as they are too. Those weights (bf16 / fp16) are the updated fp32 parameter rounded to nearest even by the same
// conversion `cast` uses for fp32 sources (common.cuh's store), so they are what the separate cast would write.
// optimizer_decision: one thread, in fp64, as the CPU reference.
// squared_norm: a two-stage deterministic reduction. A fixed grid (set by the element count and the device) sums
// x^2 per thread in fp32 over a fixed grid-stride pattern, each block reduces its threads in fp64 in a fixed order
// into a workspace slot, and one block adds the slots in order, in fp64, into the fp32 / fp64 result (+=).
#include "fast_llm/kernels/cuda/common.cuh"

#include <cmath>
#include <type_traits>
#include <utility>

#include "fast_llm/kernels/optimizer_ops.h"

namespace fast_llm::kernels::cuda {
namespace {

constexpr int kAdamThreads = 256;
constexpr int kNormThreads = 512;
constexpr int kNormBlocksPerMultiprocessor = 4;
constexpr int kSumThreads = 1024;

struct AdamParams {
  const double* state;  // optimizer_decision state, or null: the fields below are final
  double learning_rate_factor;
  void* compute_weights;  // (count) of the kernel's Weight type, or null
  float* parameters;
  const float* gradients;
  float* exp_avg;
  float* exp_avg_sq;
  int64_t count;
  float learning_rate;
  float beta_1, one_minus_beta_1;
  float beta_2, one_minus_beta_2;
  float bias_correction_1;  // 1 - beta_1^step
  float bias_correction_2;  // 1 - beta_2^step
  float epsilon;
  float weight_decay;
  float grad_scale;
};

// m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr (m / c1 / (sqrt(v / c2) + eps) + wd p), g = grad * scale.
__device__ __forceinline__ void adam_element(const AdamParams& a, float& parameter, float gradient, float& exp_avg,
                                             float& exp_avg_sq) {
  const float g = gradient * a.grad_scale;
  exp_avg = a.beta_1 * exp_avg + a.one_minus_beta_1 * g;
  exp_avg_sq = a.beta_2 * exp_avg_sq + a.one_minus_beta_2 * g * g;
  const float denominator = sqrtf(exp_avg_sq / a.bias_correction_2) + a.epsilon;
  parameter -= a.learning_rate * (exp_avg / a.bias_correction_1 / denominator + a.weight_decay * parameter);
}

// Weight: the element type of the compute-dtype weights (bfloat16, float16), or void without them.
template <class Weight, bool kVectorized>
__global__ void __launch_bounds__(kAdamThreads) adam_kernel(const AdamParams params) {
  constexpr bool kWriteWeights = !std::is_void_v<Weight>;
  AdamParams a = params;
  if (a.state != nullptr) {
    namespace field = optimizer_state;
    if (a.state[field::successful] == 0.0) return;
    // The same fp64 -> fp32 roundings as the host path.
    a.learning_rate = float(a.state[field::learning_rate] * a.learning_rate_factor);
    a.bias_correction_1 = float(a.state[field::bias_correction_1]);
    a.bias_correction_2 = float(a.state[field::bias_correction_2]);
    a.grad_scale = float(a.state[field::grad_scale]);
  }
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t thread = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t scalar_begin = 0;
  if constexpr (kVectorized) {
    const int64_t vectors = a.count / 4;
    for (int64_t v = thread; v < vectors; v += stride) {
      float4 p = reinterpret_cast<const float4*>(a.parameters)[v];
      const float4 g = reinterpret_cast<const float4*>(a.gradients)[v];
      float4 m = reinterpret_cast<const float4*>(a.exp_avg)[v];
      float4 s = reinterpret_cast<const float4*>(a.exp_avg_sq)[v];
      adam_element(a, p.x, g.x, m.x, s.x);
      adam_element(a, p.y, g.y, m.y, s.y);
      adam_element(a, p.z, g.z, m.z, s.z);
      adam_element(a, p.w, g.w, m.w, s.w);
      reinterpret_cast<float4*>(a.parameters)[v] = p;
      reinterpret_cast<float4*>(a.exp_avg)[v] = m;
      reinterpret_cast<float4*>(a.exp_avg_sq)[v] = s;
      if constexpr (kWriteWeights) {
        const Vector<Weight, 4> weights{
            {store<Weight>(p.x), store<Weight>(p.y), store<Weight>(p.z), store<Weight>(p.w)}};
        reinterpret_cast<Vector<Weight, 4>*>(a.compute_weights)[v] = weights;
      }
    }
    scalar_begin = vectors * 4;
  }
  for (int64_t i = scalar_begin + thread; i < a.count; i += stride) {
    float p = a.parameters[i], m = a.exp_avg[i], s = a.exp_avg_sq[i];
    adam_element(a, p, a.gradients[i], m, s);
    a.parameters[i] = p;
    a.exp_avg[i] = m;
    a.exp_avg_sq[i] = s;
    if constexpr (kWriteWeights) static_cast<Weight*>(a.compute_weights)[i] = store<Weight>(p);
  }
}

// Launches adam_kernel for the compute-dtype weights' element type (void: none).
template <class Weight>
void launch_adam(const AdamParams& params, const LaunchScope& scope) {
  bool vectorized = is_aligned(params.parameters, 16) && is_aligned(params.gradients, 16) &&
                    is_aligned(params.exp_avg, 16) && is_aligned(params.exp_avg_sq, 16);
  if constexpr (!std::is_void_v<Weight>)
    vectorized = vectorized && is_aligned(params.compute_weights, 4 * sizeof(Weight));
  const unsigned grid = grid_for(vectorized ? ceil_div(params.count, 4) : params.count, kAdamThreads, scope);
  if (vectorized)
    adam_kernel<Weight, true><<<grid, kAdamThreads, 0, scope.stream()>>>(params);
  else
    adam_kernel<Weight, false><<<grid, kAdamThreads, 0, scope.stream()>>>(params);
}

// partials[block] = sum of x^2 over the block's grid-stride share (the last count % kVec elements go to block 0).
template <class T, int kVec>
__global__ void __launch_bounds__(kNormThreads) squared_norm_partial_kernel(const T* input, int64_t count,
                                                                             double* partials) {
  __shared__ double scratch[32];
  const int64_t vectors = count / kVec;
  float sum = 0.0f;
  for (int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors; v += int64_t(gridDim.x) * blockDim.x) {
    float x[kVec];
    load_floats<kVec>(input + v * kVec, x);
#pragma unroll
    for (int i = 0; i < kVec; ++i) sum += x[i] * x[i];
  }
  if (blockIdx.x == 0)
    for (int64_t i = vectors * kVec + threadIdx.x; i < count; i += blockDim.x) {
      const float x = load(input[i]);
      sum += x * x;
    }
  const double total = block_sum_to_thread0(double(sum), scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

template <class R>
__global__ void __launch_bounds__(kSumThreads) squared_norm_final_kernel(const double* partials, int count, R* result) {
  __shared__ double scratch[32];
  double sum = 0.0;
  for (int i = int(threadIdx.x); i < count; i += int(blockDim.x)) sum += partials[i];
  sum = block_sum_to_thread0(sum, scratch);
  if (threadIdx.x == 0) *result += R(sum);
}

__global__ void optimizer_decision_kernel(double* state, const double* rates, int64_t rate_count, double loss_scale,
                                          double clipping, double beta_1, double beta_2) {
  namespace field = optimizer_state;
  const double norm = sqrt(state[field::squared_norm]) / loss_scale;
  const bool finite = isfinite(norm);
  const double step = state[field::step] + (finite ? 1.0 : 0.0);
  // The rate of this update, or of the next one when this one is skipped. The host sizes the table so the index is in
  // range; the clamp only keeps a broken invariant from reading outside it.
  int64_t rate_step = int64_t(step) + (finite ? 0 : 1);
  rate_step = rate_step < 1 ? 1 : rate_step > rate_count ? rate_count : rate_step;
  state[field::grad_norm] = norm;
  state[field::successful] = finite ? 1.0 : 0.0;
  state[field::step] = step;
  state[field::learning_rate] = rates[rate_step - 1];
  if (finite) {
    const double coefficient = fmin(1.0, clipping / (norm + 1e-6));
    state[field::clip_coefficient] = coefficient;
    state[field::grad_scale] = coefficient / loss_scale;
    state[field::bias_correction_1] = 1.0 - pow(beta_1, step);
    state[field::bias_correction_2] = 1.0 - pow(beta_2, step);
  } else {
    state[field::clip_coefficient] = 1.0;
    state[field::grad_scale] = 0.0;
  }
}

std::optional<std::string> supports_adam_step(const AdamStepArgs& args) {
  // The contract gives the moments and gradients the parameters' dtype.
  if (auto reason = float32_reason("parameters", args.parameters)) return reason;
  if (args.compute_weights != nullptr) {
    const DType dtype = args.compute_weights->dtype();
    if (dtype != DType::bfloat16 && dtype != DType::float16)
      return fmt::format("compute_weights has dtype {}; supported: bfloat16, float16", dtype_name(dtype));
  }
  return std::nullopt;
}

void adam_step_fused(const AdamStepArgs& args) {
  const int64_t count = args.parameters.numel();
  if (count == 0) return;
  LaunchScope scope("adam_step", args.parameters.device(), args.stream);
  // Without a state the step is known here: bias corrections in fp64 on the host.
  const int64_t step = args.state != nullptr ? 1 : args.step;
  const AdamParams params{.state = args.state != nullptr ? args.state->data_as<double>() : nullptr,
                          .learning_rate_factor = args.learning_rate,
                          .compute_weights = args.compute_weights != nullptr ? args.compute_weights->data() : nullptr,
                          .parameters = args.parameters.data_as<float>(),
                          .gradients = args.gradients.data_as<float>(),
                          .exp_avg = args.exp_avg.data_as<float>(),
                          .exp_avg_sq = args.exp_avg_sq.data_as<float>(),
                          .count = count,
                          .learning_rate = float(args.learning_rate),
                          .beta_1 = float(args.beta_1),
                          .one_minus_beta_1 = float(1.0 - args.beta_1),
                          .beta_2 = float(args.beta_2),
                          .one_minus_beta_2 = float(1.0 - args.beta_2),
                          .bias_correction_1 = float(1.0 - std::pow(args.beta_1, double(step))),
                          .bias_correction_2 = float(1.0 - std::pow(args.beta_2, double(step))),
                          .epsilon = float(args.epsilon),
                          .weight_decay = float(args.weight_decay),
                          .grad_scale = float(args.grad_scale)};
  if (args.compute_weights == nullptr)
    launch_adam<void>(params, scope);
  else if (args.compute_weights->dtype() == DType::bfloat16)
    launch_adam<bfloat16>(params, scope);
  else
    launch_adam<float16>(params, scope);
  scope.check_launch();
}

std::optional<std::string> supports_squared_norm(const SquaredNormArgs& args) {
  return cuda_floating_reason("input", args.input);
}

void squared_norm_fused(const SquaredNormArgs& args) {
  const int64_t count = args.input.numel();
  if (count == 0) return;
  const Device device = args.input.device();
  LaunchScope scope("squared_norm", device, args.stream);
  visit_floating(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    constexpr int kVec = kVectorElements<T>;
    const bool vectorized = is_aligned(args.input.data(), 16);
    const int64_t vectors = vectorized ? count / kVec : count;
    const unsigned blocks = grid_for(vectors, kNormThreads, scope, kNormBlocksPerMultiprocessor);
    Tensor partials = Tensor::empty(Shape{int64_t(blocks)}, DType::float64, device, scope.tensor_stream());
    const T* input = static_cast<const T*>(args.input.data());
    if (vectorized)
      squared_norm_partial_kernel<T, kVec><<<blocks, kNormThreads, 0, scope.stream()>>>(input, count,
                                                                                        partials.data_as<double>());
    else
      squared_norm_partial_kernel<T, 1><<<blocks, kNormThreads, 0, scope.stream()>>>(input, count,
                                                                                     partials.data_as<double>());
    scope.check_launch();
    if (args.result.dtype() == DType::float64)
      squared_norm_final_kernel<double><<<1, kSumThreads, 0, scope.stream()>>>(partials.data_as<double>(), int(blocks),
                                                                               args.result.data_as<double>());
    else
      squared_norm_final_kernel<float><<<1, kSumThreads, 0, scope.stream()>>>(partials.data_as<double>(), int(blocks),
                                                                              args.result.data_as<float>());
    scope.check_launch();
  });
}

void optimizer_decision_fused(const OptimizerDecisionArgs& args) {
  LaunchScope scope("optimizer_decision", args.state.device(), args.stream);
  optimizer_decision_kernel<<<1, 1, 0, scope.stream()>>>(args.state.data_as<double>(),
                                                         args.learning_rates.data_as<double>(),
                                                         args.learning_rates.numel(), args.loss_scale,
                                                         args.gradient_norm_clipping, args.beta_1, args.beta_2);
  scope.check_launch();
}

}  // namespace

FLM_REGISTER_KERNEL(OptimizerDecision, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline, nullptr,
                    &optimizer_decision_fused, "one thread in fp64: the step's decisions stay on the device");
FLM_REGISTER_KERNEL(AdamStep, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline, &supports_adam_step,
                    &adam_step_fused,
                    "one launch per contiguous fp32 range, float4 accesses; bf16 / fp16 weights in the same pass");
FLM_REGISTER_KERNEL(SquaredNorm, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_squared_norm, &squared_norm_fused,
                    "fixed grid of per-block partial sums, then one block adds them in order (deterministic)");

}  // namespace fast_llm::kernels::cuda
