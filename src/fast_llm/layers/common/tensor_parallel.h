// Tensor parallelism as the layers see it (Megatron style; docs/distributed.md, "Tensor and sequence-tensor
// parallelism").
//
// A layer learns its place at construction (`TensorParallelism`: this rank, the group size, whether the activations
// between blocks are split over the sequence), so its parameters are declared with this rank's shapes and their
// ParameterMeta::tensor says how they split (parameter.h); the communicator comes at run time in
// LayerContext::tensor_group (null in a one-process run). Within a block:
//   column-parallel linear (query, key_value, layer_1): the full input, this rank's output features;
//   row-parallel linear (dense, layer_2): this rank's input features, a partial sum of the output that `reduce` sums
//     over the group (all-reduce, or reduce-scatter over the sequence with sequence-tensor parallelism) before the
//     bias is added, once;
//   backward: the same collectives transposed: the gradient of the row-parallel output is gathered over the sequence
//     (sequence-tensor parallelism) and the column-parallel input gradients are summed by `reduce`.
// Every collective waits on the compute stream (Communicator: on the CPU the host waits). The input gradient's
// reduction is started as soon as it is complete and waited for after the weight gradients' gemms, which run meanwhile
// (start_reduce; the explicit backwards take an `input_gradient_ready` callback for it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "fast_llm/distributed/communicator.h"
#include "fast_llm/layers/context.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::layers {

// A reduction on its way (TensorParallelism::start_reduce).
struct PendingReduction {
  Tensor result;                            // what reduce() would return, valid after `finish`
  std::unique_ptr<distributed::Work> work;  // null: nothing to wait for
  Tensor input;                             // the reduced tensor, kept alive until then
  // The stream waits for the reduction; returns its result.
  Tensor finish(Stream stream);
};

// Called by an explicit backward with its input gradient once it is complete, before the parameter gradients.
using InputGradientReady = std::function<void(Tensor&)>;

struct TensorParallelism {
  int rank = 0;
  int size = 1;
  // Sequence-tensor parallelism: activations between blocks hold this rank's 1/size of the tokens.
  bool sequence_parallel = false;

  bool enabled() const { return size > 1; }
  // (tokens / size, features) -> (tokens, features): every rank's rows in rank order (sequence-tensor parallelism);
  // the input itself otherwise.
  Tensor gather_sequence(const LayerContext& context, const Tensor& shard) const;
  // The sum over the group of every rank's (tokens, features) partial result: all of it (all-reduce), or this rank's
  // 1/size of the rows (reduce-scatter) with sequence-tensor parallelism. The input itself with one rank.
  Tensor reduce(const LayerContext& context, Tensor partial) const;
  // reduce(), started: `partial` (contiguous) must be neither read nor written before the result is finished.
  PendingReduction start_reduce(const LayerContext& context, Tensor partial) const;
  // This rank's 1/size of the rows of a tensor every rank holds whole (sequence-tensor parallelism); the input itself
  // otherwise.
  Tensor sequence_shard(const Tensor& full) const;
  // Sums a tensor over the group in place (replicated values computed in parts), or takes its maximum.
  void all_reduce(const LayerContext& context, Tensor& tensor, bool maximum = false) const;

  // The layer backward of a block sublayer (column-parallel in, row-parallel out): the output gradient and the saved
  // input (`saved.input`, kept as this rank's shard) gathered over the sequence, then
  // `backward(grad_output, saved, stream, input_gradient_ready)`, whose input gradient is reduced over the group,
  // started as soon as backward reports it complete.
  template <class Saved, class Backward>
  Tensor backward_reducing_input(const LayerContext& context, const Tensor& grad_output, Saved saved,
                                 const Backward& backward) const {
    const Tensor full_grad_output = gather_sequence(context, grad_output);
    saved.input = gather_sequence(context, saved.input);
    if (!enabled()) return backward(full_grad_output, std::move(saved), context.stream, InputGradientReady{});
    PendingReduction reduction;
    backward(full_grad_output, std::move(saved), context.stream,
             [&](Tensor& grad_input) { reduction = start_reduce(context, grad_input); });
    return reduction.finish(context.stream);
  }
};

}  // namespace fast_llm::layers
