// Ops: the cross-entropy of kernels/cross_entropy.h when the vocabulary is split over tensor-parallel ranks (each holds
// the logits of columns [vocab_begin, vocab_begin + vocab) of the whole), in three passes between which the caller sums
// over the tensor-parallel group, so that the full (tokens, vocab) logits never exist on one rank:
//   vocab_parallel_logits_max     row_max[t] = max_k z_tk over this slice                     -> all-reduce max
//   vocab_parallel_logits_sums    sums[0][t] = sum_k exp(z_tk - row_max[t]) over this slice,
//                                 sums[1][t] = z_t[label_t] if the label is in this slice, else 0  -> all-reduce sum
//   vocab_parallel_cross_entropy  lse_t = row_max[t] + log(sums[0][t]): label loss lse_t - sums[1][t] and z-loss
//                                 lse_t^2 summed over unmasked tokens (+=, every rank the same sums), and the gradient
//                                 of this slice's logits (=), cross_entropy_forward_backward's restricted to the slice
// z = logits * logits_scale_factor, then softcap * tanh(z / softcap) with a softcap, as there; tokens with a negative
// label are masked (their statistics 0, their gradient 0). row_max and sums are float32 (float64 for float64 logits);
// grad_logits may be the logits tensor itself. Variants: the CPU reference, CUDA "rows" (kernels/cuda/).
#pragma once

#include <cstdint>
#include <optional>

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

// What the three passes share.
struct VocabParallelLogits {
  const Tensor& logits;  // (tokens, vocab slice)
  const Tensor& labels;  // (tokens) int64 in [0, whole vocabulary); < 0 masked
  int64_t vocab_begin = 0;
  double logits_scale_factor = 1.0;
  std::optional<double> softcap = std::nullopt;
};

struct VocabParallelMaxArgs {
  VocabParallelLogits slice;
  Tensor& row_max;  // (tokens) =
  Stream stream = {};
};

struct VocabParallelSumsArgs {
  VocabParallelLogits slice;
  const Tensor& row_max;  // (tokens): the maximum over the whole vocabulary
  Tensor& sums;           // (2, tokens) =
  Stream stream = {};
};

struct VocabParallelCrossEntropyArgs {
  VocabParallelLogits slice;
  const Tensor& row_max;   // (tokens): over the whole vocabulary
  const Tensor& sums;      // (2, tokens): over the whole vocabulary
  Tensor& label_loss_sum;  // (1) fp32 or fp64, +=
  Tensor* z_loss_sum;      // (1) fp32 or fp64, +=, or nullptr (no z-loss)
  Tensor* grad_logits;     // (tokens, vocab slice) =, or nullptr
  double label_weight = 1.0;
  double z_loss_weight = 0.0;
  Stream stream = {};
};

struct VocabParallelLogitsMax {
  static constexpr std::string_view name = "vocab_parallel_logits_max";
  using Args = VocabParallelMaxArgs;
};
struct VocabParallelLogitsSums {
  static constexpr std::string_view name = "vocab_parallel_logits_sums";
  using Args = VocabParallelSumsArgs;
};
struct VocabParallelCrossEntropy {
  static constexpr std::string_view name = "vocab_parallel_cross_entropy";
  using Args = VocabParallelCrossEntropyArgs;
};

// The contracts above, checked once by each entry function before dispatch: throw `[vocab_parallel_...] ...`.
void check_vocab_parallel_logits_max(const VocabParallelMaxArgs& args);
void check_vocab_parallel_logits_sums(const VocabParallelSumsArgs& args);
void check_vocab_parallel_cross_entropy(const VocabParallelCrossEntropyArgs& args);

inline void vocab_parallel_logits_max(const VocabParallelMaxArgs& args) {
  check_vocab_parallel_logits_max(args);
  dispatch<VocabParallelLogitsMax>(args, args.slice.logits.device());
}
inline void vocab_parallel_logits_sums(const VocabParallelSumsArgs& args) {
  check_vocab_parallel_logits_sums(args);
  dispatch<VocabParallelLogitsSums>(args, args.slice.logits.device());
}
inline void vocab_parallel_cross_entropy(const VocabParallelCrossEntropyArgs& args) {
  check_vocab_parallel_cross_entropy(args);
  dispatch<VocabParallelCrossEntropy>(args, args.slice.logits.device());
}

}  // namespace fast_llm::kernels
