// CPU reference of distillation_forward_backward (kernels/distillation.h).
//
// One row (token) at a time, as the cross-entropy reference: the row of logits is read into (vocab) buffers of the
// compute type (fp32 for fp32 / bf16 / fp16 logits, fp64 for fp64) before anything is written, so grad_logits may be
// the logits tensor itself. The row's loss and d/dz (reference_helpers.h distillation_row, which the cross-entropy
// reference's distillation term shares) run in fp64 whatever the dtype; log-softmax by the stable max +
// log(sum(exp)). Per-row losses are summed in fp64 in token order (deterministic).
#include "fast_llm/kernels/distillation.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/kernels/cpu/reference_helpers.h"

namespace fast_llm::kernels::cpu {
namespace {

void distillation_reference(const DistillationArgs& args) {
  const int64_t tokens = args.logits.size(0), vocab = args.logits.size(1);
  const int64_t* labels = args.labels.data_as<int64_t>();  // (tokens)
  const int64_t label_stride = args.labels.stride(0);
  const std::vector<double> targets = read_values<double>(args.target_logits);  // (tokens, vocab), contiguous

  visit_floating_dtype(args.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const T* logits = args.logits.data_as<T>();  // (tokens, vocab)
    const int64_t logits_row = args.logits.stride(0), logits_column = args.logits.stride(1);
    T* grad_logits = args.grad_logits != nullptr ? args.grad_logits->data_as<T>() : nullptr;  // (tokens, vocab)
    const int64_t grad_row = args.grad_logits != nullptr ? args.grad_logits->stride(0) : 0;
    const int64_t grad_column = args.grad_logits != nullptr ? args.grad_logits->stride(1) : 0;
    const Compute scale_factor = Compute(args.logits_scale_factor);
    const Compute target_scale = Compute(args.logits_scale_factor / args.temperature);
    const Compute weight = Compute(args.weight);
    std::vector<double> losses(size_t(tokens), 0.0);  // (tokens)

#pragma omp parallel for
    for (int64_t token = 0; token < tokens; ++token) {
      if (labels[token * label_stride] < 0) {
        if (grad_logits != nullptr && !args.accumulate_gradient)
          for (int64_t column = 0; column < vocab; ++column)
            grad_logits[token * grad_row + column * grad_column] = store_value<T>(0);
        continue;
      }
      // z and dz/dx (s, or s (1 - tanh^2) with a softcap); the teacher's row is scaled by s / temperature.
      std::vector<Compute> z(static_cast<size_t>(vocab)), dz_dx(static_cast<size_t>(vocab));  // (vocab)
      scaled_logits_row(logits + token * logits_row, logits_column, scale_factor, args.softcap, z, dz_dx);
      std::vector<Compute> grad_z(grad_logits != nullptr ? static_cast<size_t>(vocab) : 0);  // (vocab), weighted
      losses[size_t(token)] = double(distillation_row(z, targets.data() + token * vocab, target_scale, args.loss_type,
                                                      weight, grad_logits != nullptr ? &grad_z : nullptr));
      if (grad_logits == nullptr) continue;
      for (int64_t column = 0; column < vocab; ++column) {
        T& element = grad_logits[token * grad_row + column * grad_column];
        Compute value = grad_z[size_t(column)] * dz_dx[size_t(column)];
        if (args.accumulate_gradient) value += load_value(element);
        element = store_value<T>(value);
      }
    }

    add_row_sum(args.loss_sum, losses);
  });
}

}  // namespace

FLM_REGISTER_KERNEL(DistillationForwardBackward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline,
                    nullptr, &distillation_reference,
                    "one row at a time: the model's and the teacher's log-softmax, cross-entropy / forward or reverse "
                    "KL and the gradient in the same pass; the row's loss math in fp64");

}  // namespace fast_llm::kernels::cpu
