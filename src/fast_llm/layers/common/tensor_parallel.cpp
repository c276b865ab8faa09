// Tensor parallelism: the collectives of the layers (tensor_parallel.h).
#include "fast_llm/layers/common/tensor_parallel.h"

#include "fast_llm/core/error.h"
#include "fast_llm/distributed/communicator.h"
#include "fast_llm/kernels/copy.h"

namespace fast_llm::layers {

namespace {

distributed::Communicator& group(const LayerContext& context, int size) {
  FLM_CHECK(context.tensor_group != nullptr && context.tensor_group->size() == size, "layers",
            "a layer built for {} tensor-parallel ranks runs without its tensor-parallel group", size);
  return *context.tensor_group;
}

Tensor contiguous(const Tensor& tensor, Stream stream) {
  if (tensor.is_contiguous()) return tensor;
  Tensor copy = Tensor::empty(tensor.shape(), tensor.dtype(), tensor.device(), stream);
  kernels::copy({.source = tensor, .destination = copy, .stream = stream});
  return copy;
}

}  // namespace

Tensor TensorParallelism::gather_sequence(const LayerContext& context, const Tensor& shard) const {
  if (!enabled() || !sequence_parallel) return shard;
  Tensor input = contiguous(shard, context.stream);
  Shape shape = input.shape();
  shape[0] *= size;
  Tensor full = Tensor::empty(shape, input.dtype(), input.device(), context.stream);
  group(context, size).all_gather(input, full, context.stream)->wait(context.stream);
  return full;
}

Tensor PendingReduction::finish(Stream stream) {
  if (work) work->wait(stream);
  work.reset();
  input = Tensor();
  return result;
}

Tensor TensorParallelism::reduce(const LayerContext& context, Tensor partial) const {
  return start_reduce(context, std::move(partial)).finish(context.stream);
}

PendingReduction TensorParallelism::start_reduce(const LayerContext& context, Tensor partial) const {
  if (!enabled()) return {.result = partial, .work = nullptr};
  partial = contiguous(partial, context.stream);
  if (!sequence_parallel)
    return {.result = partial,
            .work = group(context, size).all_reduce(partial, distributed::ReduceOp::sum, context.stream)};
  Shape shape = partial.shape();
  FLM_CHECK(shape[0] % size == 0, "layers", "{} tokens do not split over {} sequence-tensor-parallel ranks", shape[0],
            size);
  shape[0] /= size;
  Tensor shard = Tensor::empty(shape, partial.dtype(), partial.device(), context.stream);
  std::unique_ptr<distributed::Work> work =
      group(context, size).reduce_scatter(partial, shard, distributed::ReduceOp::sum, context.stream);
  return {.result = shard, .work = std::move(work), .input = partial};
}

Tensor TensorParallelism::sequence_shard(const Tensor& full) const {
  if (!enabled() || !sequence_parallel) return full;
  const int64_t rows = full.size(0);
  FLM_CHECK(rows % size == 0, "layers", "{} tokens do not split over {} sequence-tensor-parallel ranks", rows, size);
  return full.slice(0, rows / size * rank, rows / size * (rank + 1));
}

void TensorParallelism::all_reduce(const LayerContext& context, Tensor& tensor, bool maximum) const {
  if (!enabled()) return;
  FLM_ASSERT(tensor.is_contiguous(), "a tensor-parallel all-reduce of a non-contiguous tensor");
  group(context, size)
      .all_reduce(tensor, maximum ? distributed::ReduceOp::max : distributed::ReduceOp::sum, context.stream)
      ->wait(context.stream);
}

}  // namespace fast_llm::layers
