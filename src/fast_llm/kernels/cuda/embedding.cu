// Fused CUDA embedding_forward / embedding_backward (kernels/embedding.h), variant "fused". Weight and output share a
// float32, bfloat16 or float16 dtype; grad_output is any of those and grad_weight float32; last dimensions contiguous,
// row strides free. Indices are int32 or int64 with any stride and must lie in [0, rows) (the data pipeline guarantees
// it; an index outside reads as a zero row in the forward and is skipped in the backward, never read or written out of
// bounds), after first_row is subtracted (a slice of the table: outside it is what the op asks for).
//
// Forward: a gather. A thread owns one 16-byte vector column of the output and walks tokens blockIdx.y,
// blockIdx.y + gridDim.y, ..., kTokensPerStep of them at a time; weight rows are read with 16-byte accesses.
// Backward: a scatter-add without atomics. The (index, token) pairs are sorted by index with CUB's stable radix sort
// and cut into chunks of kChunk tokens; one block per (chunk, column tile) sums each index's tokens in order, straight
// into its grad_weight row when they all lie in the chunk, else into the chunk's head and tail slots, which a second
// kernel adds in chunk order into the row (embedding_chunk_kernel, embedding_merge_kernel). The summation order
// depends only on the indices, so results are bitwise reproducible.
#include "fast_llm/kernels/cuda/common.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <bit>

#include "fast_llm/kernels/embedding.h"

namespace fast_llm::kernels::cuda {
namespace {

constexpr int kChunk = 32;     // sorted tokens per block in the backward
constexpr int kPrefetch = 8;   // rows of grad_output loaded ahead in the backward
constexpr int kPrepareThreads = 256;
constexpr int kTokensPerStep = 4;  // tokens a thread of the forward gathers at once

__device__ __forceinline__ int64_t load_index(const void* indices, bool int64_indices, int64_t offset) {
  return int64_indices ? static_cast<const int64_t*>(indices)[offset]
                       : int64_t(static_cast<const int32_t*>(indices)[offset]);
}

struct EmbeddingForwardParams {
  const void* indices;  // (tokens) int32 or int64
  int64_t index_stride;
  bool int64_indices;
  const void* weight;  // (rows, hidden) T
  int64_t weight_stride;
  int64_t rows;
  int64_t first_row;
  void* output;  // (tokens, hidden) T
  int64_t output_stride;
  int64_t tokens;
  int64_t hidden;
  float scale;
  bool accumulate;
};

// output[t] (+)= scale * weight[index[t]], for kTokensPerStep tokens at a time (their index loads, then their row
// loads, are all in flight together).
template <class T, int kVec>
__global__ void __launch_bounds__(256) embedding_forward_kernel(const EmbeddingForwardParams p) {
  const int64_t vector = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vector >= p.hidden / kVec) return;
  const int64_t column = vector * kVec;
  const int64_t token_stride = gridDim.y;
  for (int64_t first = blockIdx.y; first < p.tokens; first += token_stride * kTokensPerStep) {
    int64_t rows[kTokensPerStep];
#pragma unroll
    for (int u = 0; u < kTokensPerStep; ++u) {
      const int64_t token = first + u * token_stride;
      rows[u] = token < p.tokens ? load_index(p.indices, p.int64_indices, token * p.index_stride) - p.first_row : -1;
    }
    float values[kTokensPerStep][kVec];
#pragma unroll
    for (int u = 0; u < kTokensPerStep; ++u) {
      if (rows[u] >= 0 && rows[u] < p.rows) {
        load_floats<kVec>(static_cast<const T*>(p.weight) + rows[u] * p.weight_stride + column, values[u]);
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i) values[u][i] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kTokensPerStep; ++u) {
      const int64_t token = first + u * token_stride;
      if (token >= p.tokens) continue;
      T* output = static_cast<T*>(p.output) + token * p.output_stride + column;
#pragma unroll
      for (int i = 0; i < kVec; ++i) values[u][i] *= p.scale;
      if (p.accumulate) {
        float previous[kVec];
        load_floats<kVec>(output, previous);
#pragma unroll
        for (int i = 0; i < kVec; ++i) values[u][i] += previous[i];
      }
      store_floats<kVec>(output, values[u]);
    }
  }
}

// keys[t] = index[t] (rows for an index outside [0, rows): sorted last and skipped), tokens[t] = t.
__global__ void __launch_bounds__(kPrepareThreads)
    embedding_prepare_kernel(const void* indices, int64_t index_stride, bool int64_indices, int64_t count,
                             int64_t rows, int64_t first_row, uint32_t* keys, int32_t* tokens) {
  const int64_t token = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (token >= count) return;
  const int64_t index = load_index(indices, int64_indices, token * index_stride) - first_row;
  keys[token] = uint32_t(index >= 0 && index < rows ? index : rows);
  tokens[token] = int32_t(token);
}

struct EmbeddingBackwardParams {
  const uint32_t* keys;   // (count) sorted indices
  const int32_t* tokens;  // (count) tokens in index order
  int64_t count;
  int64_t rows;
  const void* grad_output;  // (tokens, hidden) T
  int64_t grad_output_stride;
  float* grad_weight;  // (rows, hidden)
  int64_t grad_weight_stride;
  float* pieces;  // (chunks, 2, hidden): [0] the head piece, [1] the tail piece of each chunk
  int64_t hidden;
  float scale;
};

template <int kVec>
__device__ __forceinline__ void add_into(float* target, const float (&values)[kVec]) {
  float current[kVec];
  load_floats<kVec>(target, current);
#pragma unroll
  for (int i = 0; i < kVec; ++i) current[i] += values[i];
  store_floats<kVec>(target, current);
}

// One chunk of sorted tokens, one column tile: sums each run of equal keys in token order; a run that is a whole
// segment (all the tokens of its index) goes into grad_weight, a run cut by the chunk's start or end into the
// chunk's head or tail slot.
template <class T, int kVec>
__global__ void __launch_bounds__(256) embedding_chunk_kernel(const EmbeddingBackwardParams p) {
  __shared__ uint32_t chunk_keys[kChunk];
  __shared__ int32_t chunk_tokens[kChunk];
  const int64_t chunk = blockIdx.x;
  const int64_t begin = chunk * kChunk;
  const int count = int(p.count - begin < kChunk ? p.count - begin : kChunk);
  if (int(threadIdx.x) < count) {
    chunk_keys[threadIdx.x] = p.keys[begin + threadIdx.x];
    chunk_tokens[threadIdx.x] = p.tokens[begin + threadIdx.x];
  }
  // Whether the first / last key of the chunk goes on from the previous / into the next chunk.
  const bool continues_from_previous = begin > 0 && p.keys[begin - 1] == p.keys[begin];
  const bool continues_into_next = begin + count < p.count && p.keys[begin + count] == p.keys[begin + count - 1];
  __syncthreads();

  const int64_t vector = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  const bool valid = vector < p.hidden / kVec;
  const int64_t column = vector * kVec;
  const T* grad_output = static_cast<const T*>(p.grad_output) + column;
  float sum[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) sum[i] = 0.0f;
  int run_start = 0;
  for (int first = 0; first < count; first += kPrefetch) {
    Vector<T, kVec> loaded[kPrefetch];
#pragma unroll
    for (int q = 0; q < kPrefetch; ++q)
      if (valid && first + q < count)
        loaded[q] = load_pack<kVec>(grad_output + int64_t(chunk_tokens[first + q]) * p.grad_output_stride);
#pragma unroll
    for (int q = 0; q < kPrefetch; ++q) {
      const int j = first + q;
      if (j >= count) break;
      if (valid) {
        float g[kVec];
        unpack_floats(loaded[q], g);
#pragma unroll
        for (int i = 0; i < kVec; ++i) sum[i] += p.scale * g[i];
      }
      const uint32_t key = chunk_keys[j];
      if (j + 1 < count && chunk_keys[j + 1] == key) continue;
      // The run [run_start, j] ends here.
      const bool starts_segment = run_start > 0 || !continues_from_previous;
      const bool ends_segment = j + 1 < count || !continues_into_next;
      if (valid && key < p.rows) {
        if (starts_segment && ends_segment)
          add_into<kVec>(p.grad_weight + int64_t(key) * p.grad_weight_stride + column, sum);
        else
          store_floats<kVec>(p.pieces + (chunk * 2 + (starts_segment ? 1 : 0)) * p.hidden + column, sum);
      }
#pragma unroll
      for (int i = 0; i < kVec; ++i) sum[i] = 0.0f;
      run_start = j + 1;
    }
  }
}

// For each chunk where a segment starts and goes on into later chunks: its tail piece plus the head pieces of the
// following chunks, in chunk order, into the segment's grad_weight row.
template <int kVec>
__global__ void __launch_bounds__(256) embedding_merge_kernel(const EmbeddingBackwardParams p) {
  const int64_t chunk = blockIdx.x;
  const int64_t begin = chunk * kChunk;
  const int64_t end = begin + kChunk < p.count ? begin + kChunk : p.count;
  const uint32_t key = p.keys[end - 1];
  if (end == p.count || p.keys[end] != key) return;  // the last segment ends in this chunk
  if (begin > 0 && p.keys[begin - 1] == key) return;  // ... or started before it (a middle piece)
  const int64_t vector = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (vector >= p.hidden / kVec || key >= p.rows) return;
  const int64_t column = vector * kVec;
  float sum[kVec], piece[kVec];
  load_floats<kVec>(p.pieces + (chunk * 2 + 1) * p.hidden + column, sum);
  for (int64_t next = chunk + 1;; ++next) {
    load_floats<kVec>(p.pieces + (next * 2) * p.hidden + column, piece);
#pragma unroll
    for (int i = 0; i < kVec; ++i) sum[i] += piece[i];
    const int64_t next_end = (next + 1) * kChunk < p.count ? (next + 1) * kChunk : p.count;
    if (next_end == p.count || p.keys[next_end] != key) break;
  }
  add_into<kVec>(p.grad_weight + int64_t(key) * p.grad_weight_stride + column, sum);
}

std::optional<std::string> supports_embedding_forward(const EmbeddingForwardArgs& args) {
  if (auto reason = cuda_floating_reason("weight", args.weight)) return reason;
  if (auto reason = inner_contiguous_reason("weight", args.weight)) return reason;
  return inner_contiguous_reason("output", args.output);
}

void embedding_forward_fused(const EmbeddingForwardArgs& args) {
  const int64_t tokens = args.indices.size(0), rows = args.weight.size(0), hidden = args.weight.size(1);
  if (tokens == 0 || hidden == 0) return;
  LaunchScope scope("embedding_forward", args.weight.device(), args.stream);
  visit_floating(args.weight.dtype(), [&]<class T>(std::type_identity<T>) {
    constexpr int kVec = kVectorElements<T>;
    const bool vectorized = hidden % kVec == 0 && rows_aligned<T>(args.weight) && rows_aligned<T>(args.output);
    const EmbeddingForwardParams params{.indices = args.indices.data(),
                                        .index_stride = args.indices.stride(0),
                                        .int64_indices = args.indices.dtype() == DType::int64,
                                        .weight = args.weight.data(),
                                        .weight_stride = row_stride(args.weight),
                                        .rows = rows,
                                        .first_row = args.first_row.value_or(0),
                                        .output = args.output.data(),
                                        .output_stride = row_stride(args.output),
                                        .tokens = tokens,
                                        .hidden = hidden,
                                        .scale = float(args.scale),
                                        .accumulate = args.accumulate};
    const int64_t vectors = vectorized ? hidden / kVec : hidden;
    const int threads = row_threads(vectors);
    const dim3 grid = row_grid(ceil_div(vectors, threads), tokens, scope);
    if (vectorized)
      embedding_forward_kernel<T, kVec><<<grid, threads, 0, scope.stream()>>>(params);
    else
      embedding_forward_kernel<T, 1><<<grid, threads, 0, scope.stream()>>>(params);
    scope.check_launch();
  });
}

std::optional<std::string> supports_embedding_backward(const EmbeddingBackwardArgs& args) {
  if (auto reason = cuda_floating_reason("grad_output", args.grad_output)) return reason;
  if (auto reason = float32_reason("grad_weight", args.grad_weight)) return reason;
  if (auto reason = inner_contiguous_reason("grad_output", args.grad_output)) return reason;
  if (auto reason = inner_contiguous_reason("grad_weight", args.grad_weight)) return reason;
  if (args.indices.numel() >= (int64_t(1) << 31))
    return fmt::format("{} tokens; supported: fewer than 2^31", args.indices.numel());
  if (args.grad_weight.size(0) >= (int64_t(1) << 32) - 1)
    return fmt::format("{} rows; supported: fewer than 2^32 - 1", args.grad_weight.size(0));
  return std::nullopt;
}

void embedding_backward_fused(const EmbeddingBackwardArgs& args) {
  const int64_t tokens = args.indices.size(0), rows = args.grad_weight.size(0), hidden = args.grad_weight.size(1);
  if (tokens == 0 || hidden == 0) return;
  const Device device = args.grad_weight.device();
  LaunchScope scope("embedding_backward", device, args.stream);
  const Stream stream = scope.tensor_stream();

  // Sort (index, token) pairs by index; `rows` stands for an invalid index, so the keys need bit_width(rows) bits.
  Tensor keys = Tensor::empty(Shape{tokens}, DType::uint32, device, stream);
  Tensor token_order = Tensor::empty(Shape{tokens}, DType::int32, device, stream);
  Tensor sorted_keys = Tensor::empty(Shape{tokens}, DType::uint32, device, stream);
  Tensor sorted_tokens = Tensor::empty(Shape{tokens}, DType::int32, device, stream);
  embedding_prepare_kernel<<<unsigned(ceil_div(tokens, kPrepareThreads)), kPrepareThreads, 0, scope.stream()>>>(
      args.indices.data(), args.indices.stride(0), args.indices.dtype() == DType::int64, tokens, rows,
      args.first_row.value_or(0), keys.data_as<uint32_t>(), token_order.data_as<int32_t>());
  scope.check_launch();
  const int end_bit = std::max(1, int(std::bit_width(uint64_t(rows))));
  size_t sort_bytes = 0;
  FLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys.data_as<uint32_t>(),
                                                 sorted_keys.data_as<uint32_t>(), token_order.data_as<int32_t>(),
                                                 sorted_tokens.data_as<int32_t>(), int(tokens), 0, end_bit,
                                                 scope.stream()));
  Tensor sort_workspace = Tensor::empty(Shape{int64_t(sort_bytes > 0 ? sort_bytes : 1)}, DType::uint8, device, stream);
  FLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_workspace.data(), sort_bytes, keys.data_as<uint32_t>(),
                                                 sorted_keys.data_as<uint32_t>(), token_order.data_as<int32_t>(),
                                                 sorted_tokens.data_as<int32_t>(), int(tokens), 0, end_bit,
                                                 scope.stream()));

  const int64_t chunks = ceil_div(tokens, kChunk);
  Tensor pieces = Tensor::empty(Shape{chunks, 2, hidden}, DType::float32, device, stream);
  const EmbeddingBackwardParams params{.keys = sorted_keys.data_as<uint32_t>(),
                                       .tokens = sorted_tokens.data_as<int32_t>(),
                                       .count = tokens,
                                       .rows = rows,
                                       .grad_output = args.grad_output.data(),
                                       .grad_output_stride = row_stride(args.grad_output),
                                       .grad_weight = args.grad_weight.data_as<float>(),
                                       .grad_weight_stride = row_stride(args.grad_weight),
                                       .pieces = pieces.data_as<float>(),
                                       .hidden = hidden,
                                       .scale = float(args.scale)};
  visit_floating(args.grad_output.dtype(), [&]<class T>(std::type_identity<T>) {
    constexpr int kVec = kVectorElements<T>;
    const bool vectorized = hidden % kVec == 0 && rows_aligned<T>(args.grad_output) &&
                            is_aligned(args.grad_weight.data(), 16) && row_stride(args.grad_weight) % 4 == 0;
    const int64_t vectors = vectorized ? hidden / kVec : hidden;
    const int threads = row_threads(vectors);
    const dim3 grid(unsigned(chunks), unsigned(ceil_div(vectors, threads)));
    FLM_CHECK(grid.y <= 65535, "embedding_backward", "hidden size {} is too large for one launch", hidden);
    if (vectorized) {
      embedding_chunk_kernel<T, kVec><<<grid, threads, 0, scope.stream()>>>(params);
      scope.check_launch();
      embedding_merge_kernel<kVec><<<grid, threads, 0, scope.stream()>>>(params);
    } else {
      embedding_chunk_kernel<T, 1><<<grid, threads, 0, scope.stream()>>>(params);
      scope.check_launch();
      embedding_merge_kernel<1><<<grid, threads, 0, scope.stream()>>>(params);
    }
    scope.check_launch();
  });
}

}  // namespace

FLM_REGISTER_KERNEL(EmbeddingForward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_embedding_forward, &embedding_forward_fused, "row gather, 16-byte accesses");
FLM_REGISTER_KERNEL(EmbeddingBackward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_embedding_backward, &embedding_backward_fused,
                    "radix sort by index, chunked segmented sums in token order (deterministic, no atomics)");

}  // namespace fast_llm::kernels::cuda
