// CPU references of the vocabulary-parallel cross-entropy passes (kernels/vocab_parallel_cross_entropy.h).
//
// One row (token) at a time, as the whole-vocabulary reference (cpu/cross_entropy.cpp): each row of this rank's slice
// of the logits is scaled (and soft-capped) into a buffer of the compute type before anything is written, so
// grad_logits may be the logits. Math in fp32 for fp32 / bf16 / fp16 logits and fp64 for fp64; per-row losses summed
// in fp64 in token order. Masked rows (label < 0) get zero statistics and a zero gradient.
#include "fast_llm/kernels/vocab_parallel_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/kernels/cpu/reference_helpers.h"

namespace fast_llm::kernels::cpu {
namespace {

// Calls `row(token, label, z, dz_dx)` for every unmasked token, with z (and dz/dx) of the row of this slice.
template <class T, class Row>
void for_each_row(const VocabParallelLogits& slice, Row&& row) {
  using Compute = ComputeType<T>;
  const int64_t tokens = slice.logits.size(0), vocab = slice.logits.size(1);
  const int64_t* labels = slice.labels.data_as<int64_t>();
  const T* logits = slice.logits.data_as<T>();
  const Compute scale = Compute(slice.logits_scale_factor);
#pragma omp parallel for
  for (int64_t token = 0; token < tokens; ++token) {
    const int64_t label = labels[token * slice.labels.stride(0)];
    std::vector<Compute> z(static_cast<size_t>(vocab)), dz_dx(static_cast<size_t>(vocab));
    if (label >= 0)
      scaled_logits_row(logits + token * slice.logits.stride(0), slice.logits.stride(1), scale, slice.softcap, z,
                        dz_dx);
    row(token, label, z, dz_dx);
  }
}

void logits_max_reference(const VocabParallelMaxArgs& args) {
  visit_floating_dtype(args.slice.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    Compute* row_max = args.row_max.data_as<Compute>();
    for_each_row<T>(args.slice, [&](int64_t token, int64_t label, const std::vector<Compute>& z, auto&) {
      row_max[token] = label < 0 ? Compute(0) : *std::max_element(z.begin(), z.end());
    });
  });
}

void logits_sums_reference(const VocabParallelSumsArgs& args) {
  const int64_t tokens = args.slice.logits.size(0), vocab = args.slice.logits.size(1);
  visit_floating_dtype(args.slice.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const Compute* row_max = args.row_max.data_as<Compute>();
    Compute* sums = args.sums.data_as<Compute>();  // (2, tokens)
    for_each_row<T>(args.slice, [&](int64_t token, int64_t label, const std::vector<Compute>& z, auto&) {
      Compute sum = 0, label_logit = 0;
      if (label >= 0) {
        for (const Compute value : z) sum += std::exp(value - row_max[token]);
        const int64_t column = label - args.slice.vocab_begin;
        if (column >= 0 && column < vocab) label_logit = z[size_t(column)];
      }
      sums[token] = sum;
      sums[tokens + token] = label_logit;
    });
  });
}

void cross_entropy_reference(const VocabParallelCrossEntropyArgs& args) {
  const int64_t tokens = args.slice.logits.size(0), vocab = args.slice.logits.size(1);
  visit_floating_dtype(args.slice.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const Compute* row_max = args.row_max.data_as<Compute>();
    const Compute* sums = args.sums.data_as<Compute>();
    T* grad = args.grad_logits != nullptr ? args.grad_logits->data_as<T>() : nullptr;  // (tokens, vocab slice)
    const int64_t grad_row = grad != nullptr ? args.grad_logits->stride(0) : 0;
    const int64_t grad_column = grad != nullptr ? args.grad_logits->stride(1) : 0;
    const Compute label_weight = Compute(args.label_weight);
    const bool with_z_loss = args.z_loss_sum != nullptr;
    const std::optional<Compute> z_loss_weight =
        with_z_loss ? std::optional<Compute>(Compute(args.z_loss_weight)) : std::nullopt;
    std::vector<double> label_losses(size_t(tokens), 0.0), z_losses(size_t(tokens), 0.0);
    for_each_row<T>(args.slice, [&](int64_t token, int64_t label, const std::vector<Compute>& z,
                                    const std::vector<Compute>& dz_dx) {
      if (label < 0) {
        if (grad != nullptr)
          for (int64_t column = 0; column < vocab; ++column)
            grad[token * grad_row + column * grad_column] = store_value<T>(0);
        return;
      }
      // lse over the whole vocabulary, from the statistics summed over the ranks.
      const Compute logsumexp = row_max[token] + std::log(sums[token]);
      label_losses[size_t(token)] = double(logsumexp - sums[tokens + token]);
      if (with_z_loss) z_losses[size_t(token)] = double(logsumexp) * double(logsumexp);
      if (grad == nullptr) return;
      // This slice's part of the gradient: the label's column is outside it on the other ranks.
      cross_entropy_gradient_row(z, dz_dx, logsumexp, label - args.slice.vocab_begin, label_weight, z_loss_weight,
                                 grad + token * grad_row, grad_column);
    });
    add_row_sum(args.label_loss_sum, label_losses);
    if (with_z_loss) add_row_sum(*args.z_loss_sum, z_losses);
  });
}

}  // namespace

FLM_REGISTER_KERNEL(VocabParallelLogitsMax, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline,
                    nullptr, &logits_max_reference, "row maxima of a vocabulary slice's scaled logits");
FLM_REGISTER_KERNEL(VocabParallelLogitsSums, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline,
                    nullptr, &logits_sums_reference, "row sums of exp(z - max) and the label's logit in the slice");
FLM_REGISTER_KERNEL(VocabParallelCrossEntropy, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline,
                    nullptr, &cross_entropy_reference,
                    "label and z-loss from the whole vocabulary's statistics, the slice's gradient; fp32 math (fp64 "
                    "for fp64)");

}  // namespace fast_llm::kernels::cpu
