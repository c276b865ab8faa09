// CPU reference of cross_entropy_forward_backward (kernels/cross_entropy.h).
//
// One row (token) at a time: the row of logits is read into a (vocab) buffer of the compute type before anything is
// written, so grad_logits may be the logits tensor itself. Math in fp32 for fp32 / bf16 / fp16 logits (the gradient
// is rounded on store) and fp64 for fp64 logits; logsumexp is the stable max + log(sum(exp(z - max))). Per-row losses
// are summed in fp64 in token order (deterministic) and added to the fp32 / fp64 sums. Logits and gradients of any
// strides; labels (tokens) int64, < 0 masked.
//
// The z-loss is on exactly when z_loss_sum is given (its gradient weight without a sum to add to is an error).
// Per-row gradient weights (row_gradient_weights) are read in fp64 and added to label_weight in fp64 before the
// row's weight is rounded to the compute type. The distillation term is the distillation reference's row math
// (reference_helpers.h distillation_row, as kernels/cpu/distillation.cpp, in fp64 whatever the dtype) on the same row:
// its weighted d/dz is added to the label losses' before the product with dz/dx and the store (one rounding), its loss
// to its own sum.
#include "fast_llm/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/kernels/cpu/reference_helpers.h"

namespace fast_llm::kernels::cpu {
namespace {

void cross_entropy_reference(const CrossEntropyArgs& args) {
  constexpr std::string_view op = "cross_entropy_forward_backward";
  const int64_t tokens = args.logits.size(0), vocab = args.logits.size(1);
  const int64_t* labels = args.labels.data_as<int64_t>();  // (tokens)
  const int64_t label_stride = args.labels.stride(0);
  for (int64_t token = 0; token < tokens; ++token) {
    const int64_t label = labels[token * label_stride];
    FLM_CHECK(label < vocab, op, "label {} of token {} is outside the vocabulary of {} logits", label, token, vocab);
  }

  visit_floating_dtype(args.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const T* logits = args.logits.data_as<T>();  // (tokens, vocab)
    const int64_t logits_row = args.logits.stride(0), logits_column = args.logits.stride(1);
    T* grad_logits = args.grad_logits != nullptr ? args.grad_logits->data_as<T>() : nullptr;  // (tokens, vocab)
    const int64_t grad_row = args.grad_logits != nullptr ? args.grad_logits->stride(0) : 0;
    const int64_t grad_column = args.grad_logits != nullptr ? args.grad_logits->stride(1) : 0;
    const CrossEntropyDistillation* distillation = args.distillation;
    const std::vector<double> targets = distillation != nullptr ? read_values<double>(distillation->target_logits)
                                                                : std::vector<double>();  // (tokens, vocab) or empty
    const Compute target_scale =
        distillation != nullptr ? Compute(args.logits_scale_factor / distillation->temperature) : Compute(0);
    const Compute distillation_weight = distillation != nullptr ? Compute(distillation->weight) : Compute(0);
    const Compute scale_factor = Compute(args.logits_scale_factor);
    const bool with_z_loss = args.z_loss_sum != nullptr;
    const std::optional<Compute> z_loss_weight =
        with_z_loss ? std::optional<Compute>(Compute(args.z_loss_weight)) : std::nullopt;
    std::vector<double> label_losses(size_t(tokens), 0.0), z_losses(size_t(tokens), 0.0),
        distillation_losses(size_t(tokens), 0.0);  // (tokens)
    const std::vector<double> row_weights = args.row_gradient_weights != nullptr
                                                ? read_values<double>(*args.row_gradient_weights)
                                                : std::vector<double>();  // (tokens) or empty

#pragma omp parallel for
    for (int64_t token = 0; token < tokens; ++token) {
      const int64_t label = labels[token * label_stride];
      if (label < 0) {
        if (grad_logits != nullptr)
          for (int64_t column = 0; column < vocab; ++column)
            grad_logits[token * grad_row + column * grad_column] = store_value<T>(0);
        continue;
      }
      // z = x s, or c tanh(x s / c) with a softcap c; dz/dx = s, or s (1 - tanh^2).
      std::vector<Compute> z(static_cast<size_t>(vocab)), dz_dx(static_cast<size_t>(vocab));  // (vocab)
      scaled_logits_row(logits + token * logits_row, logits_column, scale_factor, args.softcap, z, dz_dx);
      // lse = m + log(sum_k exp(z_k - m)), m = max_k z_k;  softmax_k = exp(z_k - lse)
      const Compute row_logsumexp = logsumexp(z);
      label_losses[size_t(token)] = double(row_logsumexp - z[size_t(label)]);
      if (with_z_loss) z_losses[size_t(token)] = double(row_logsumexp) * double(row_logsumexp);
      const Compute label_weight =
          Compute(row_weights.empty() ? args.label_weight : args.label_weight + row_weights[size_t(token)]);
      std::vector<Compute> distillation_grad_z;  // (vocab) when training with the distillation term
      if (distillation != nullptr) {
        if (grad_logits != nullptr) distillation_grad_z.resize(static_cast<size_t>(vocab));
        distillation_losses[size_t(token)] =
            double(distillation_row(z, targets.data() + token * vocab, target_scale, distillation->loss_type,
                                    distillation_weight, grad_logits != nullptr ? &distillation_grad_z : nullptr));
      }
      if (grad_logits != nullptr)
        cross_entropy_gradient_row(z, dz_dx, row_logsumexp, label, label_weight, z_loss_weight,
                                   grad_logits + token * grad_row, grad_column,
                                   distillation != nullptr ? &distillation_grad_z : nullptr);
    }

    add_row_sum(args.label_loss_sum, label_losses);
    if (with_z_loss) add_row_sum(*args.z_loss_sum, z_losses);
    if (distillation != nullptr) add_row_sum(distillation->loss_sum, distillation_losses);
  });
}

}  // namespace

FLM_REGISTER_KERNEL(CrossEntropyForwardBackward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline,
                    nullptr, &cross_entropy_reference,
                    "one row at a time: stable logsumexp, label and z-loss, distillation, gradient in the same pass; "
                    "fp32 math (fp64 for fp64), the distillation row's in fp64");

}  // namespace fast_llm::kernels::cpu
