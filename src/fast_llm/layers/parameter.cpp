// Parameters: the gradient's first accumulation of a step, and the tensor-parallel index map (parameter.h).
#include "fast_llm/layers/parameter.h"

#include "fast_llm/core/error.h"
#include "fast_llm/tensor/stream.h"

namespace fast_llm::layers {

namespace {

// `local` seen as (outer, split dimension, inner).
struct SplitView {
  int64_t outer = 1, length = 1, inner = 1;
};

SplitView split_view(const Shape& local, int dim) {
  SplitView view;
  for (int d = 0; d < local.rank(); ++d) {
    if (d < dim) view.outer *= local[d];
    else if (d == dim) view.length = local[d];
    else view.inner *= local[d];
  }
  return view;
}

}  // namespace

Shape TensorSplit::global_shape(const Shape& local) const {
  if (!split()) return local;
  Shape global = local;
  global[dim] *= size;
  return global;
}

int64_t TensorSplit::global_index(const Shape& local, int64_t index) const {
  if (!split()) return index;
  const SplitView view = split_view(local, dim);
  const int64_t outer = index / (view.length * view.inner);
  const int64_t position = (index / view.inner) % view.length, within = index % view.inner;
  const int64_t block_length = view.length / blocks;
  const int64_t block = position / block_length, in_block = position % block_length;
  const int64_t global_position = block * block_length * size + int64_t(rank) * block_length + in_block;
  return (outer * view.length * size + global_position) * view.inner + within;
}

int64_t TensorSplit::contiguous_run(const Shape& local, int64_t index) const {
  if (!split()) return local.numel() - index;
  const SplitView view = split_view(local, dim);
  const int64_t run = view.length / blocks * view.inner;  // one block's part of one outer row
  return run - index % run;
}

void Parameter::start_grad(Stream stream) {
  if (grad_started) return;
  FLM_ASSERT(grad.is_contiguous(), "parameter {}: its gradient is not contiguous", meta.name);
  set_bytes(grad.data(), grad.device(), 0, grad.nbytes(), stream);
  grad_started = true;
}

}  // namespace fast_llm::layers
