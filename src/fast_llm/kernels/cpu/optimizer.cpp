// CPU reference of adam_step and squared_norm (kernels/optimizer_ops.h).
//
// adam_step: element by element over contiguous buffers of one floating dtype and one shape (the optimizer's flat
// shards: fp32, or fp64 in tests; bf16 / fp16 are computed in fp32 and rounded on store). Hyper-parameters (from the
// arguments or from an optimizer_decision state) are converted to the compute type once. The compute-dtype weights,
// when asked for, are the stored parameter converted by cast's own element conversion (cpu/cast_conversion.h), so they
// are bit for bit what a cast of the parameters after the step gives.
// optimizer_decision: the scalar decision of kernels/optimizer_ops.h, in fp64 on the host.
// squared_norm: sum of squares of a contiguous tensor of any floating dtype, in fp64, added to an fp32 / fp64 scalar.
// The sum is taken over fixed blocks of elements and the block sums added in order, so the result does not depend on
// the number of threads. NaN and inf reach the result, which is how a non-finite gradient is detected.
#include "fast_llm/kernels/optimizer_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "fast_llm/kernels/cpu/cast_conversion.h"
#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/kernels/cpu/reference_helpers.h"

namespace fast_llm::kernels::cpu {
namespace {

// ---------------------------------------------------------------------------------------------------------------------
// adam_step

void adam_step_reference(const AdamStepArgs& args) {
  // From the decision state, or from the arguments.
  double learning_rate = args.learning_rate, grad_scale = args.grad_scale, correction_1 = 0, correction_2 = 0;
  if (args.state != nullptr) {
    const double* state = args.state->data_as<double>();
    if (state[optimizer_state::successful] == 0.0) return;
    learning_rate = state[optimizer_state::learning_rate] * args.learning_rate;
    grad_scale = state[optimizer_state::grad_scale];
    correction_1 = state[optimizer_state::bias_correction_1];
    correction_2 = state[optimizer_state::bias_correction_2];
  } else {
    // Bias corrections 1 - beta^step, in fp64 before rounding (beta^step of many steps loses little either way).
    correction_1 = 1.0 - std::pow(args.beta_1, double(args.step));
    correction_2 = 1.0 - std::pow(args.beta_2, double(args.step));
  }

  visit_floating_dtype(args.parameters.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    T* parameters = args.parameters.data_as<T>();       // (n)
    const T* gradients = args.gradients.data_as<T>();   // (n)
    T* exp_avg = args.exp_avg.data_as<T>();             // (n)
    T* exp_avg_sq = args.exp_avg_sq.data_as<T>();       // (n)
    // 1 - beta in fp64 first: 1 - float(0.999) is off by 1e-5 relative, which would move fp32 updates by as much.
    const Compute beta_1 = Compute(args.beta_1), beta_2 = Compute(args.beta_2);
    const Compute one_minus_beta_1 = Compute(1.0 - args.beta_1), one_minus_beta_2 = Compute(1.0 - args.beta_2);
    const Compute rate = Compute(learning_rate), epsilon = Compute(args.epsilon);
    const Compute weight_decay = Compute(args.weight_decay), scale = Compute(grad_scale);
    const Compute bias_correction_1 = Compute(correction_1), bias_correction_2 = Compute(correction_2);
    const int64_t count = args.parameters.numel();
#pragma omp parallel for
    for (int64_t index = 0; index < count; ++index) {
      // g = grad grad_scale;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
      // p -= lr (m / c1 / (sqrt(v / c2) + eps) + wd p)   (decoupled weight decay on the old p)
      const Compute gradient = load_value(gradients[index]) * scale;
      const Compute m = beta_1 * load_value(exp_avg[index]) + one_minus_beta_1 * gradient;
      const Compute v = beta_2 * load_value(exp_avg_sq[index]) + one_minus_beta_2 * gradient * gradient;
      const Compute parameter = load_value(parameters[index]);
      const Compute update =
          m / bias_correction_1 / (std::sqrt(v / bias_correction_2) + epsilon) + weight_decay * parameter;
      exp_avg[index] = store_value<T>(m);
      exp_avg_sq[index] = store_value<T>(v);
      parameters[index] = store_value<T>(parameter - rate * update);
    }
  });
  if (args.compute_weights == nullptr) return;
  // compute_weights = cast(parameters), from the parameters as stored.
  visit_floating_dtype(args.parameters.dtype(), [&]<class T>(std::type_identity<T>) {
    visit_floating_dtype(args.compute_weights->dtype(), [&]<class Weight>(std::type_identity<Weight>) {
      const T* parameters = args.parameters.data_as<T>();         // (n)
      Weight* weights = args.compute_weights->data_as<Weight>();  // (n)
      const int64_t count = args.parameters.numel();
#pragma omp parallel for
      for (int64_t index = 0; index < count; ++index) weights[index] = cast_element<Weight>(parameters[index]);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------------
// squared_norm

void squared_norm_reference(const SquaredNormArgs& args) {
  // Elements per block; the block sums are added in block order whatever the thread count.
  constexpr int64_t kBlock = 1 << 14;
  visit_floating_dtype(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    const T* input = args.input.data_as<T>();  // (n)
    const int64_t count = args.input.numel();
    const int64_t blocks = (count + kBlock - 1) / kBlock;
    std::vector<double> block_sums(size_t(blocks), 0.0);  // (blocks)
#pragma omp parallel for
    for (int64_t block = 0; block < blocks; ++block) {
      double sum = 0;  // sum x^2 in fp64
      for (int64_t index = block * kBlock; index < std::min(count, (block + 1) * kBlock); ++index) {
        const double value = double(load_value(input[index]));
        sum += value * value;
      }
      block_sums[size_t(block)] = sum;
    }
    double total = 0;
    for (const double sum : block_sums) total += sum;
    write_values<double>(args.result, std::vector<double>{total}, /*accumulate=*/true);
  });
}

// ---------------------------------------------------------------------------------------------------------------------
// optimizer_decision

void optimizer_decision_reference(const OptimizerDecisionArgs& args) {
  constexpr std::string_view op = "optimizer_decision";
  namespace field = optimizer_state;
  double* state = args.state.data_as<double>();
  const double* rates = args.learning_rates.data_as<double>();
  const int64_t rate_count = args.learning_rates.numel();
  const double norm = std::sqrt(state[field::squared_norm]) / args.loss_scale;
  const bool finite = std::isfinite(norm);
  const double step = state[field::step] + (finite ? 1.0 : 0.0);
  // The rate of this update, or of the next one when this one is skipped.
  const int64_t rate_step = int64_t(step) + (finite ? 0 : 1);
  FLM_CHECK(rate_step >= 1 && rate_step <= rate_count, op, "no learning rate for step {} ({} rates)", rate_step,
            rate_count);
  state[field::grad_norm] = norm;
  state[field::successful] = finite ? 1.0 : 0.0;
  state[field::step] = step;
  state[field::learning_rate] = rates[rate_step - 1];
  if (finite) {
    state[field::clip_coefficient] = std::min(1.0, args.gradient_norm_clipping / (norm + 1e-6));
    state[field::grad_scale] = state[field::clip_coefficient] / args.loss_scale;
    state[field::bias_correction_1] = 1.0 - std::pow(args.beta_1, step);
    state[field::bias_correction_2] = 1.0 - std::pow(args.beta_2, step);
  } else {
    state[field::clip_coefficient] = 1.0;
    state[field::grad_scale] = 0.0;
  }
}

}  // namespace

FLM_REGISTER_KERNEL(OptimizerDecision, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &optimizer_decision_reference,
                    "clip coefficient, skip flag, step, rate and bias corrections from the squared gradient norm");
FLM_REGISTER_KERNEL(AdamStep, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &adam_step_reference,
                    "AdamW element by element, bias correction, decoupled weight decay; fp32 math (fp64 for fp64)");
FLM_REGISTER_KERNEL(SquaredNorm, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &squared_norm_reference, "sum of squares in fp64 over fixed blocks added in order (deterministic)");

}  // namespace fast_llm::kernels::cpu
