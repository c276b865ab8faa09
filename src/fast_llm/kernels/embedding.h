// Ops: embedding_forward / embedding_backward. Row gather and its scatter-add:
//   output[t] = scale * weight[index[t]];   grad_weight[index[t]] += scale * grad_output[t]
// Used for word embeddings (index = token ids) and absolute position embeddings (index = positions). Indices out of
// [0, rows) are an error on the CPU (checked) and must not happen on the GPU (the data pipeline guarantees it).
// With `first_row` (vocabulary parallelism: each tensor-parallel rank holds a slice of the table) the weight holds rows
// [first_row, first_row + rows) of the table: index i reads row i - first_row, and an index outside the slice reads
// zeros in the forward and adds nothing in the backward.
#pragma once

#include <cstdint>
#include <optional>

#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

struct EmbeddingForwardArgs {
  const Tensor& indices;  // (tokens) int64 or int32
  const Tensor& weight;   // (rows, hidden)
  Tensor& output;         // (tokens, hidden), dtype of weight
  double scale = 1.0;
  bool accumulate = false;  // output += instead of = (adds position embeddings onto word embeddings)
  std::optional<int64_t> first_row = std::nullopt;
  Stream stream = {};
};

struct EmbeddingBackwardArgs {
  const Tensor& indices;      // (tokens)
  const Tensor& grad_output;  // (tokens, hidden)
  Tensor& grad_weight;        // (rows, hidden) +=, usually fp32
  double scale = 1.0;
  std::optional<int64_t> first_row = std::nullopt;
  Stream stream = {};
};

struct EmbeddingForward {
  static constexpr std::string_view name = "embedding_forward";
  using Args = EmbeddingForwardArgs;
};
struct EmbeddingBackward {
  static constexpr std::string_view name = "embedding_backward";
  using Args = EmbeddingBackwardArgs;
};

// The contract above, checked once by each entry function before dispatch: throws `[embedding_forward] ...`.
void check_embedding_forward(const EmbeddingForwardArgs& args);
void check_embedding_backward(const EmbeddingBackwardArgs& args);

inline void embedding_forward(const EmbeddingForwardArgs& args) {
  check_embedding_forward(args);
  dispatch<EmbeddingForward>(args, args.weight.device());
}
inline void embedding_backward(const EmbeddingBackwardArgs& args) {
  check_embedding_backward(args);
  dispatch<EmbeddingBackward>(args, args.grad_weight.device());
}

// Rows `indices` of `table` (rows, width) as a new (indices, width) tensor on the table's device: embedding_forward
// used as a row gather (a head's or a block's loss rows, the last row of each prompt).
inline Tensor gather_rows(const Tensor& table, const Tensor& indices, Stream stream) {
  Tensor result = Tensor::empty(Shape{indices.numel(), table.size(1)}, table.dtype(), table.device(), stream);
  embedding_forward({.indices = indices, .weight = table, .output = result, .stream = stream});
  return result;
}

// gather_rows undone, for distinct indices: `positions` (tokens) holds each row's index among `rows` (rows, width), or
// rows.size(0) for a row not among them; the result (tokens, width) has those rows in place and zeros elsewhere.
inline Tensor scatter_rows(const Tensor& rows, const Tensor& positions, Stream stream) {
  const int64_t count = rows.size(0);
  Tensor padded = Tensor::empty(Shape{count + 1, rows.size(1)}, rows.dtype(), rows.device(), stream);
  padded.slice(0, 0, count).copy_bytes_from(rows, stream);
  Tensor zero_row = padded.slice(0, count, count + 1);
  fill({.tensor = zero_row, .value = 0.0, .stream = stream});
  return gather_rows(padded, positions, stream);
}

}  // namespace fast_llm::kernels
