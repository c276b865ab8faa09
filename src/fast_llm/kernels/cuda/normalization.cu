// Fused CUDA rms_norm / layer_norm (kernels/normalization.h), variant "fused".
//
// Forward: one row group per row: `threads_per_row` threads (a multiple of 32, about two 16-byte vectors of the row
// each; several groups share a block when rows are short). Each thread keeps its vectors in registers between the
// statistics and the output (up to kForwardCache vectors; longer rows are read twice). Statistics in fp32, summed
// by warp butterflies and then across the group's warps in a fixed order; layer_norm takes the mean first, then the
// centred variance, as the reference.
// Backward: row group g of G (the grid is one full wave) walks rows g, g + G, ...; per row it recomputes the row
// sums from the saved statistics and writes grad_input, and it keeps its threads' columns of grad_weight / grad_bias
// in fp32 registers across all its rows. Each group then writes its partial sums to its own row of a workspace
// (G, hidden) from the caching allocator, and a second kernel adds the G rows of each column in a fixed order into
// the fp32 parameter gradients. No atomics anywhere: results are bitwise reproducible for a shape and a device.
//
// Input, output and gradients share one dtype (float32, bfloat16, float16); weight and bias are that dtype or
// float32; saved statistics and parameter gradients are float32. The last dimension is contiguous, row strides are
// free; the 16-byte path runs when every row start is 16-byte aligned, the scalar path otherwise.
#include "fast_llm/kernels/cuda/op_helpers.cuh"
#include "fast_llm/kernels/normalization.h"

namespace fast_llm::kernels::cuda {
namespace {

constexpr int kForwardCache = 4;   // 16-byte vectors per thread held in registers by the forward
constexpr int kBackwardCache = 2;  // the same for the backward (which also holds two tensors and the partial sums)
constexpr int kBlockThreads = 256;  // threads per block when several rows share one
constexpr int kMaxThreadsPerRow = 512;  // longer rows loop (and leave the register cache for reading twice)
constexpr int kReduceWarps = 16;

// The multiplier of each column (w, 1 + w with zero_centered, 1 without a weight) and the bias, as floats.
struct NormParameters {
  const void* weight = nullptr;  // (hidden) T or float, or nullptr
  const void* bias = nullptr;    // (hidden) T or float, or nullptr
  bool weight_is_float = false;
  bool bias_is_float = false;
  bool zero_centered = false;
};

template <class T, int N>
__device__ __forceinline__ void load_parameter(const void* pointer, bool is_float, int64_t column, float (&values)[N]) {
  if (is_float)
    load_floats<N>(static_cast<const float*>(pointer) + column, values);
  else
    load_floats<N>(static_cast<const T*>(pointer) + column, values);
}

template <class T, int N>
__device__ __forceinline__ void load_weight(const NormParameters& parameters, int64_t column, float (&values)[N]) {
  if (parameters.weight == nullptr) {
#pragma unroll
    for (int i = 0; i < N; ++i) values[i] = 1.0f;
    return;
  }
  load_parameter<T, N>(parameters.weight, parameters.weight_is_float, column, values);
  if (parameters.zero_centered) {
#pragma unroll
    for (int i = 0; i < N; ++i) values[i] += 1.0f;
  }
}

template <class T, int N>
__device__ __forceinline__ void load_bias(const NormParameters& parameters, int64_t column, float (&values)[N]) {
  if (parameters.bias == nullptr) {
#pragma unroll
    for (int i = 0; i < N; ++i) values[i] = 0.0f;
    return;
  }
  load_parameter<T, N>(parameters.bias, parameters.bias_is_float, column, values);
}

// How the rows map onto threads.
struct RowLayout {
  int64_t rows = 0;
  int64_t hidden = 0;
  int threads_per_row = 32;  // a multiple of 32
  bool cached = true;        // every vector of a row fits in the threads' registers
};

struct NormForwardParams {
  const void* input;  // (rows, hidden) T
  int64_t input_stride;
  void* output;  // (rows, hidden) T
  int64_t output_stride;
  NormParameters parameters;
  float* first_statistic;   // (rows): rms_norm inverse_rms, layer_norm mean
  float* second_statistic;  // (rows): layer_norm inverse_std
  RowLayout layout;
  float epsilon;
};

// y = x r w (rms_norm, r = 1 / sqrt(mean(x^2) + eps)) or y = (x - mean) s w + b (layer_norm, s = 1 / sqrt(var + eps)).
template <class T, int kVec, bool kLayerNorm>
__global__ void __launch_bounds__(kMaxThreadsPerRow) norm_forward_kernel(const NormForwardParams p) {
  __shared__ float scratch[32];
  const RowLayout& layout = p.layout;
  const int threads_per_row = layout.threads_per_row;
  const int warps_per_group = threads_per_row / 32;
  const int group = int(threadIdx.x) / threads_per_row, member = int(threadIdx.x) % threads_per_row;
  const int64_t row = int64_t(blockIdx.x) * (int(blockDim.x) / threads_per_row) + group;
  const bool active = row < layout.rows;
  const int vectors = int(layout.hidden / kVec);
  const float hidden = float(layout.hidden);
  const T* input = static_cast<const T*>(p.input) + (active ? row * p.input_stride : 0);
  T* output = static_cast<T*>(p.output) + (active ? row * p.output_stride : 0);

  float mean = 0.0f, inverse = 0.0f;
  if (layout.cached) {
    Vector<T, kVec> cache[kForwardCache];
#pragma unroll
    for (int k = 0; k < kForwardCache; ++k) {
      const int v = member + k * threads_per_row;
      if (active && v < vectors) cache[k] = load_pack<kVec>(input + v * kVec);
    }
    if constexpr (kLayerNorm) {
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < kForwardCache; ++k) {
        const int v = member + k * threads_per_row;
        if (!(active && v < vectors)) continue;
        float x[kVec];
        unpack_floats(cache[k], x);
#pragma unroll
        for (int i = 0; i < kVec; ++i) sum += x[i];
      }
      mean = group_sum(sum, scratch, warps_per_group) / hidden;
    }
    float sum_squares = 0.0f;
#pragma unroll
    for (int k = 0; k < kForwardCache; ++k) {
      const int v = member + k * threads_per_row;
      if (!(active && v < vectors)) continue;
      float x[kVec];
      unpack_floats(cache[k], x);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float centered = x[i] - mean;
        sum_squares += centered * centered;
      }
    }
    inverse = 1.0f / sqrtf(group_sum(sum_squares, scratch, warps_per_group) / hidden + p.epsilon);
#pragma unroll
    for (int k = 0; k < kForwardCache; ++k) {
      const int v = member + k * threads_per_row;
      if (!(active && v < vectors)) continue;
      float x[kVec], w[kVec], y[kVec];
      unpack_floats(cache[k], x);
      load_weight<T>(p.parameters, v * kVec, w);
      if constexpr (kLayerNorm) {
        float b[kVec];
        load_bias<T>(p.parameters, v * kVec, b);
#pragma unroll
        for (int i = 0; i < kVec; ++i) y[i] = (x[i] - mean) * inverse * w[i] + b[i];
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i) y[i] = x[i] * inverse * w[i];
      }
      store_floats<kVec>(output + v * kVec, y);
    }
  } else {
    // The row does not fit in registers: read it once per pass (the later passes mostly hit L1 / L2).
    if constexpr (kLayerNorm) {
      float sum = 0.0f;
      if (active)
        for (int v = member; v < vectors; v += threads_per_row) {
          float x[kVec];
          load_floats<kVec>(input + v * kVec, x);
#pragma unroll
          for (int i = 0; i < kVec; ++i) sum += x[i];
        }
      mean = group_sum(sum, scratch, warps_per_group) / hidden;
    }
    float sum_squares = 0.0f;
    if (active)
      for (int v = member; v < vectors; v += threads_per_row) {
        float x[kVec];
        load_floats<kVec>(input + v * kVec, x);
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          const float centered = x[i] - mean;
          sum_squares += centered * centered;
        }
      }
    inverse = 1.0f / sqrtf(group_sum(sum_squares, scratch, warps_per_group) / hidden + p.epsilon);
    if (active)
      for (int v = member; v < vectors; v += threads_per_row) {
        float x[kVec], w[kVec], y[kVec];
        load_floats<kVec>(input + v * kVec, x);
        load_weight<T>(p.parameters, v * kVec, w);
        if constexpr (kLayerNorm) {
          float b[kVec];
          load_bias<T>(p.parameters, v * kVec, b);
#pragma unroll
          for (int i = 0; i < kVec; ++i) y[i] = (x[i] - mean) * inverse * w[i] + b[i];
        } else {
#pragma unroll
          for (int i = 0; i < kVec; ++i) y[i] = x[i] * inverse * w[i];
        }
        store_floats<kVec>(output + v * kVec, y);
      }
  }
  if (active && member == 0) {
    if constexpr (kLayerNorm) {
      p.first_statistic[row] = mean;
      p.second_statistic[row] = inverse;
    } else {
      p.first_statistic[row] = inverse;
    }
  }
}

struct NormBackwardParams {
  const void* grad_output;  // (rows, hidden) T
  int64_t grad_output_stride;
  const void* input;  // (rows, hidden) T
  int64_t input_stride;
  void* grad_input;  // (rows, hidden) T
  int64_t grad_input_stride;
  NormParameters parameters;      // the bias is unused
  const float* first_statistic;   // (rows): rms_norm inverse_rms, layer_norm mean
  const float* second_statistic;  // (rows): layer_norm inverse_std
  float* weight_partials;         // (groups, hidden) or nullptr: per row group sums for grad_weight
  float* bias_partials;           // (groups, hidden) or nullptr: the same for grad_bias (layer_norm)
  RowLayout layout;
};

// One row of the backward: the row sums (with the statistics), the input gradient, and the contributions to the
// parameter gradients, for the vectors a thread owns.
//   rms_norm:   grad_x = r (g w - x r^2 mean(g w x)),         grad_w += g x r
//   layer_norm: grad_x = s (h - mean(h) - xhat mean(h xhat)),  h = g w, xhat = (x - mean) s;  grad_w += g xhat, grad_b += g
template <class T, int kVec, bool kLayerNorm>
struct RowBackward {
  float first, second;  // r (rms_norm) or mean, s (layer_norm)

  __device__ __forceinline__ void add_sums(const float (&x)[kVec], const float (&g)[kVec], const float (&w)[kVec],
                                           float2& sums) const {
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      if constexpr (kLayerNorm) {
        const float normalized = (x[i] - first) * second, h = g[i] * w[i];
        sums.x += h;
        sums.y += h * normalized;
      } else {
        sums.x += g[i] * w[i] * x[i];
      }
    }
  }

  // `means` are the row sums divided by hidden.
  __device__ __forceinline__ void gradients(const float (&x)[kVec], const float (&g)[kVec], const float (&w)[kVec],
                                            float2 means, float (&grad_input)[kVec], float (&weight_partial)[kVec],
                                            float (&bias_partial)[kVec]) const {
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      if constexpr (kLayerNorm) {
        const float normalized = (x[i] - first) * second, h = g[i] * w[i];
        grad_input[i] = second * (h - means.x - normalized * means.y);
        weight_partial[i] += g[i] * normalized;
        bias_partial[i] += g[i];
      } else {
        grad_input[i] = first * (g[i] * w[i] - x[i] * first * first * means.x);
        weight_partial[i] += g[i] * x[i] * first;
      }
    }
  }
};

template <class T, int kVec, bool kLayerNorm>
__global__ void __launch_bounds__(kMaxThreadsPerRow) norm_backward_kernel(const NormBackwardParams p) {
  __shared__ float2 scratch[32];
  const RowLayout& layout = p.layout;
  const int threads_per_row = layout.threads_per_row;
  const int warps_per_group = threads_per_row / 32;
  const int groups_per_block = int(blockDim.x) / threads_per_row;
  const int group = int(threadIdx.x) / threads_per_row, member = int(threadIdx.x) % threads_per_row;
  const int64_t group_index = int64_t(blockIdx.x) * groups_per_block + group;
  const int64_t group_count = int64_t(gridDim.x) * groups_per_block;
  const int vectors = int(layout.hidden / kVec);
  const float hidden = float(layout.hidden);
  const bool partials = p.weight_partials != nullptr || p.bias_partials != nullptr;

  // Every thread of a block runs the same number of iterations (the row sums synchronise the block).
  if (layout.cached) {
    float weight_partial[kBackwardCache][kVec] = {}, bias_partial[kBackwardCache][kVec] = {};
    for (int64_t first_row = int64_t(blockIdx.x) * groups_per_block; first_row < layout.rows;
         first_row += group_count) {
      const int64_t row = first_row + group;
      const bool active = row < layout.rows;
      const T* input = static_cast<const T*>(p.input) + (active ? row * p.input_stride : 0);
      const T* grad_output = static_cast<const T*>(p.grad_output) + (active ? row * p.grad_output_stride : 0);
      T* grad_input = static_cast<T*>(p.grad_input) + (active ? row * p.grad_input_stride : 0);
      Vector<T, kVec> x_cache[kBackwardCache], g_cache[kBackwardCache];
#pragma unroll
      for (int k = 0; k < kBackwardCache; ++k) {
        const int v = member + k * threads_per_row;
        if (active && v < vectors) {
          x_cache[k] = load_pack<kVec>(input + v * kVec);
          g_cache[k] = load_pack<kVec>(grad_output + v * kVec);
        }
      }
      const RowBackward<T, kVec, kLayerNorm> math{active ? p.first_statistic[row] : 0.0f,
                                                  kLayerNorm && active ? p.second_statistic[row] : 0.0f};
      float2 sums = make_float2(0.0f, 0.0f);
#pragma unroll
      for (int k = 0; k < kBackwardCache; ++k) {
        const int v = member + k * threads_per_row;
        if (!(active && v < vectors)) continue;
        float x[kVec], g[kVec], w[kVec];
        unpack_floats(x_cache[k], x);
        unpack_floats(g_cache[k], g);
        load_weight<T>(p.parameters, v * kVec, w);
        math.add_sums(x, g, w, sums);
      }
      sums = group_sum2(sums, scratch, warps_per_group);
      const float2 means = make_float2(sums.x / hidden, sums.y / hidden);
#pragma unroll
      for (int k = 0; k < kBackwardCache; ++k) {
        const int v = member + k * threads_per_row;
        if (!(active && v < vectors)) continue;
        float x[kVec], g[kVec], w[kVec], result[kVec];
        unpack_floats(x_cache[k], x);
        unpack_floats(g_cache[k], g);
        load_weight<T>(p.parameters, v * kVec, w);
        math.gradients(x, g, w, means, result, weight_partial[k], bias_partial[k]);
        store_floats<kVec>(grad_input + v * kVec, result);
      }
    }
    if (partials) {
#pragma unroll
      for (int k = 0; k < kBackwardCache; ++k) {
        const int v = member + k * threads_per_row;
        if (v >= vectors) continue;
        if (p.weight_partials != nullptr)
          store_floats<kVec>(p.weight_partials + group_index * layout.hidden + v * kVec, weight_partial[k]);
        if (kLayerNorm && p.bias_partials != nullptr)
          store_floats<kVec>(p.bias_partials + group_index * layout.hidden + v * kVec, bias_partial[k]);
      }
    }
  } else {
    // Rows too long for registers: read them twice, and keep the partial sums in the group's (zeroed) workspace row,
    // whose columns each belong to one thread.
    float* weight_row = p.weight_partials != nullptr ? p.weight_partials + group_index * layout.hidden : nullptr;
    float* bias_row = p.bias_partials != nullptr ? p.bias_partials + group_index * layout.hidden : nullptr;
    for (int64_t first_row = int64_t(blockIdx.x) * groups_per_block; first_row < layout.rows;
         first_row += group_count) {
      const int64_t row = first_row + group;
      const bool active = row < layout.rows;
      const T* input = static_cast<const T*>(p.input) + (active ? row * p.input_stride : 0);
      const T* grad_output = static_cast<const T*>(p.grad_output) + (active ? row * p.grad_output_stride : 0);
      T* grad_input = static_cast<T*>(p.grad_input) + (active ? row * p.grad_input_stride : 0);
      const RowBackward<T, kVec, kLayerNorm> math{active ? p.first_statistic[row] : 0.0f,
                                                  kLayerNorm && active ? p.second_statistic[row] : 0.0f};
      float2 sums = make_float2(0.0f, 0.0f);
      if (active)
        for (int v = member; v < vectors; v += threads_per_row) {
          float x[kVec], g[kVec], w[kVec];
          load_floats<kVec>(input + v * kVec, x);
          load_floats<kVec>(grad_output + v * kVec, g);
          load_weight<T>(p.parameters, v * kVec, w);
          math.add_sums(x, g, w, sums);
        }
      sums = group_sum2(sums, scratch, warps_per_group);
      const float2 means = make_float2(sums.x / hidden, sums.y / hidden);
      if (active)
        for (int v = member; v < vectors; v += threads_per_row) {
          float x[kVec], g[kVec], w[kVec], result[kVec], weight_partial[kVec], bias_partial[kVec];
          load_floats<kVec>(input + v * kVec, x);
          load_floats<kVec>(grad_output + v * kVec, g);
          load_weight<T>(p.parameters, v * kVec, w);
#pragma unroll
          for (int i = 0; i < kVec; ++i) weight_partial[i] = bias_partial[i] = 0.0f;
          if (partials) {
            if (weight_row != nullptr) load_floats<kVec>(weight_row + v * kVec, weight_partial);
            if (kLayerNorm && bias_row != nullptr) load_floats<kVec>(bias_row + v * kVec, bias_partial);
          }
          math.gradients(x, g, w, means, result, weight_partial, bias_partial);
          store_floats<kVec>(grad_input + v * kVec, result);
          if (weight_row != nullptr) store_floats<kVec>(weight_row + v * kVec, weight_partial);
          if (kLayerNorm && bias_row != nullptr) store_floats<kVec>(bias_row + v * kVec, bias_partial);
        }
    }
  }
}

// target[c] += sum over r of partials[r, c], r in a fixed order: warp w of the block sums rows w, w + kReduceWarps,
// ... for 32 consecutive columns, then warp 0 adds the kReduceWarps sums in order.
__global__ void __launch_bounds__(32 * kReduceWarps)
    column_sum_kernel(const float* partials, int64_t partial_rows, int64_t columns, float* target) {
  __shared__ float sums[kReduceWarps][33];
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int64_t column = int64_t(blockIdx.x) * 32 + lane;
  float sum = 0.0f;
  if (column < columns)
    for (int64_t r = warp; r < partial_rows; r += kReduceWarps) sum += partials[r * columns + column];
  sums[warp][lane] = sum;
  __syncthreads();
  if (warp == 0 && column < columns) {
    float total = 0.0f;
    for (int w = 0; w < kReduceWarps; ++w) total += sums[w][lane];
    target[column] += total;
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Host side.

// Threads per row: about `vectors_per_thread` vectors each, a multiple of 32, at most kMaxThreadsPerRow.
RowLayout make_layout(int64_t rows, int64_t vectors, int64_t hidden, int vectors_per_thread, int cache) {
  RowLayout layout;
  layout.rows = rows;
  layout.hidden = hidden;
  const int64_t threads = round_up(ceil_div(vectors, vectors_per_thread), 32);
  layout.threads_per_row = int(threads < 32 ? 32 : threads > kMaxThreadsPerRow ? kMaxThreadsPerRow : threads);
  layout.cached = vectors <= int64_t(layout.threads_per_row) * cache;
  return layout;
}

int groups_per_block(const RowLayout& layout) {
  return layout.threads_per_row >= kBlockThreads ? 1 : kBlockThreads / layout.threads_per_row;
}

std::optional<std::string> parameter_dtype_reason(std::string_view name, const Tensor* parameter,
                                                  const Tensor& input) {
  if (parameter == nullptr || parameter->dtype() == input.dtype() || parameter->dtype() == DType::float32)
    return std::nullopt;
  return fmt::format("{} has dtype {}; supported: the input's ({}) or float32", name, dtype_name(parameter->dtype()),
                     dtype_name(input.dtype()));
}

std::optional<std::string> optional_reason(std::string_view name, const Tensor* tensor,
                                           std::optional<std::string> (*reason)(std::string_view, const Tensor&)) {
  return tensor != nullptr ? reason(name, *tensor) : std::nullopt;
}

// What every variant here needs of a (rows, hidden) tensor.
std::optional<std::string> row_tensor_reason(std::string_view name, const Tensor& tensor) {
  if (auto reason = on_cuda_reason(name, tensor)) return reason;
  return inner_contiguous_reason(name, tensor);
}

bool parameter_aligned(const Tensor* parameter) { return parameter == nullptr || is_aligned(parameter->data(), 16); }

NormParameters make_parameters(const Tensor* weight, const Tensor* bias, bool zero_centered) {
  return NormParameters{.weight = weight != nullptr ? weight->data() : nullptr,
                        .bias = bias != nullptr ? bias->data() : nullptr,
                        .weight_is_float = weight != nullptr && weight->dtype() == DType::float32,
                        .bias_is_float = bias != nullptr && bias->dtype() == DType::float32,
                        .zero_centered = zero_centered};
}

void check_rows(std::string_view op, const Tensor& input, Device device) {
  check_rank(op, "input", input, 2, "(rows, hidden)", device);
  FLM_CHECK(input.size(1) > 0, op, "input has shape {}: hidden size must be positive", input.shape().str());
}

void check_parameter(std::string_view op, std::string_view name, const Tensor* parameter, int64_t hidden,
                     Device device) {
  if (parameter != nullptr) check_shape(op, name, *parameter, Shape{hidden}, device);
}

template <class T, bool kLayerNorm>
void launch_forward(NormForwardParams params, bool vectorized, const LaunchScope& scope) {
  constexpr int kVec = kVectorElements<T>;
  const int64_t hidden = params.layout.hidden;
  const int64_t vectors = vectorized ? hidden / kVec : hidden;
  params.layout = make_layout(params.layout.rows, vectors, hidden, 2, kForwardCache);
  const int groups = groups_per_block(params.layout);
  const dim3 grid(unsigned(ceil_div(params.layout.rows, groups)));
  const dim3 block(unsigned(groups * params.layout.threads_per_row));
  if (vectorized)
    norm_forward_kernel<T, kVec, kLayerNorm><<<grid, block, 0, scope.stream()>>>(params);
  else
    norm_forward_kernel<T, 1, kLayerNorm><<<grid, block, 0, scope.stream()>>>(params);
  scope.check_launch();
}

// Runs the backward kernel on a full wave of row groups, then adds the per-group partial sums into grad_weight /
// grad_bias.
template <class T, bool kLayerNorm>
void launch_backward(NormBackwardParams params, bool vectorized, Tensor* grad_weight, Tensor* grad_bias,
                     const LaunchScope& scope) {
  constexpr int kVec = kVectorElements<T>;
  const int64_t hidden = params.layout.hidden;
  const int64_t vectors = vectorized ? hidden / kVec : hidden;
  params.layout = make_layout(params.layout.rows, vectors, hidden, 2, kBackwardCache);
  const int groups = groups_per_block(params.layout);
  const int threads = groups * params.layout.threads_per_row;
  auto kernel = vectorized ? &norm_backward_kernel<T, kVec, kLayerNorm> : &norm_backward_kernel<T, 1, kLayerNorm>;
  int blocks_per_multiprocessor = 0;
  FLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_multiprocessor, kernel, threads, 0));
  const int64_t wave = int64_t(scope.multiprocessors()) * (blocks_per_multiprocessor > 0 ? blocks_per_multiprocessor : 1);
  const int64_t needed = ceil_div(params.layout.rows, groups);
  const int64_t blocks = needed < wave ? needed : wave;
  const int64_t partial_rows = blocks * groups;

  // Workspaces from the caching allocator, ordered on the launch stream and freed when this function returns.
  Tensor weight_partials, bias_partials;
  if (grad_weight != nullptr) {
    weight_partials = Tensor::empty(Shape{partial_rows, hidden}, DType::float32, scope.device(), scope.tensor_stream());
    params.weight_partials = weight_partials.data_as<float>();
  }
  if (grad_bias != nullptr) {
    bias_partials = Tensor::empty(Shape{partial_rows, hidden}, DType::float32, scope.device(), scope.tensor_stream());
    params.bias_partials = bias_partials.data_as<float>();
  }
  if (!params.layout.cached) {
    // The long-row path adds into the workspace rows instead of writing them once.
    if (params.weight_partials != nullptr)
      FLM_CUDA_CHECK(cudaMemsetAsync(params.weight_partials, 0, weight_partials.nbytes(), scope.stream()));
    if (params.bias_partials != nullptr)
      FLM_CUDA_CHECK(cudaMemsetAsync(params.bias_partials, 0, bias_partials.nbytes(), scope.stream()));
  }
  kernel<<<dim3(unsigned(blocks)), dim3(unsigned(threads)), 0, scope.stream()>>>(params);
  scope.check_launch();

  const dim3 reduce_grid(unsigned(ceil_div(hidden, 32))), reduce_block(32 * kReduceWarps);
  if (grad_weight != nullptr) {
    column_sum_kernel<<<reduce_grid, reduce_block, 0, scope.stream()>>>(params.weight_partials, partial_rows, hidden,
                                                                       grad_weight->data_as<float>());
    scope.check_launch();
  }
  if (grad_bias != nullptr) {
    column_sum_kernel<<<reduce_grid, reduce_block, 0, scope.stream()>>>(params.bias_partials, partial_rows, hidden,
                                                                       grad_bias->data_as<float>());
    scope.check_launch();
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// rms_norm

std::optional<std::string> supports_rms_norm_forward(const RmsNormForwardArgs& args) {
  if (auto reason = row_tensor_reason("input", args.input)) return reason;
  if (auto reason = cuda_floating_reason("input", args.input)) return reason;
  if (auto reason = same_dtype_reason("output", args.output, "input", args.input)) return reason;
  if (auto reason = row_tensor_reason("output", args.output)) return reason;
  if (auto reason = parameter_dtype_reason("weight", args.weight, args.input)) return reason;
  if (auto reason = optional_reason("weight", args.weight, &inner_contiguous_reason)) return reason;
  if (auto reason = float32_reason("inverse_rms", args.inverse_rms)) return reason;
  return inner_contiguous_reason("inverse_rms", args.inverse_rms);
}

void rms_norm_forward_fused(const RmsNormForwardArgs& args) {
  constexpr const char* op = "rms_norm_forward";
  const Device device = args.input.device();
  check_rows(op, args.input, device);
  const int64_t rows = args.input.size(0), hidden = args.input.size(1);
  check_parameter(op, "weight", args.weight, hidden, device);
  check_shape(op, "output", args.output, args.input.shape(), device);
  check_shape(op, "inverse_rms", args.inverse_rms, Shape{rows}, device);
  if (rows == 0) return;
  LaunchScope scope(op, device, args.stream);
  visit_cuda_floating(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    const bool vectorized = hidden % kVectorElements<T> == 0 && rows_aligned<T>(args.input) &&
                            rows_aligned<T>(args.output) && parameter_aligned(args.weight);
    launch_forward<T, false>(
        NormForwardParams{.input = args.input.data(),
                          .input_stride = row_stride(args.input),
                          .output = args.output.data(),
                          .output_stride = row_stride(args.output),
                          .parameters = make_parameters(args.weight, nullptr, args.zero_centered),
                          .first_statistic = args.inverse_rms.data_as<float>(),
                          .second_statistic = nullptr,
                          .layout = RowLayout{.rows = rows, .hidden = hidden},
                          .epsilon = float(args.epsilon)},
        vectorized, scope);
  });
}

std::optional<std::string> supports_rms_norm_backward(const RmsNormBackwardArgs& args) {
  if (auto reason = row_tensor_reason("input", args.input)) return reason;
  if (auto reason = cuda_floating_reason("input", args.input)) return reason;
  if (auto reason = same_dtype_reason("grad_output", args.grad_output, "input", args.input)) return reason;
  if (auto reason = same_dtype_reason("grad_input", args.grad_input, "input", args.input)) return reason;
  if (auto reason = row_tensor_reason("grad_output", args.grad_output)) return reason;
  if (auto reason = row_tensor_reason("grad_input", args.grad_input)) return reason;
  if (auto reason = parameter_dtype_reason("weight", args.weight, args.input)) return reason;
  if (auto reason = optional_reason("weight", args.weight, &inner_contiguous_reason)) return reason;
  if (auto reason = float32_reason("inverse_rms", args.inverse_rms)) return reason;
  if (auto reason = inner_contiguous_reason("inverse_rms", args.inverse_rms)) return reason;
  if (auto reason = optional_reason("grad_weight", args.grad_weight, &float32_reason)) return reason;
  return optional_reason("grad_weight", args.grad_weight, &inner_contiguous_reason);
}

void rms_norm_backward_fused(const RmsNormBackwardArgs& args) {
  constexpr const char* op = "rms_norm_backward";
  const Device device = args.input.device();
  check_rows(op, args.input, device);
  const int64_t rows = args.input.size(0), hidden = args.input.size(1);
  check_shape(op, "grad_output", args.grad_output, args.input.shape(), device);
  check_parameter(op, "weight", args.weight, hidden, device);
  check_shape(op, "inverse_rms", args.inverse_rms, Shape{rows}, device);
  check_shape(op, "grad_input", args.grad_input, args.input.shape(), device);
  check_parameter(op, "grad_weight", args.grad_weight, hidden, device);
  FLM_CHECK(args.grad_weight == nullptr || args.weight != nullptr, op, "grad_weight is given without a weight");
  if (rows == 0) return;
  LaunchScope scope(op, device, args.stream);
  visit_cuda_floating(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    const bool vectorized = hidden % kVectorElements<T> == 0 && rows_aligned<T>(args.input) &&
                            rows_aligned<T>(args.grad_output) && rows_aligned<T>(args.grad_input) &&
                            parameter_aligned(args.weight);
    launch_backward<T, false>(
        NormBackwardParams{.grad_output = args.grad_output.data(),
                           .grad_output_stride = row_stride(args.grad_output),
                           .input = args.input.data(),
                           .input_stride = row_stride(args.input),
                           .grad_input = args.grad_input.data(),
                           .grad_input_stride = row_stride(args.grad_input),
                           .parameters = make_parameters(args.weight, nullptr, args.zero_centered),
                           .first_statistic = args.inverse_rms.data_as<float>(),
                           .second_statistic = nullptr,
                           .weight_partials = nullptr,
                           .bias_partials = nullptr,
                           .layout = RowLayout{.rows = rows, .hidden = hidden}},
        vectorized, args.grad_weight, nullptr, scope);
  });
}

// ---------------------------------------------------------------------------------------------------------------------
// layer_norm

std::optional<std::string> supports_layer_norm_forward(const LayerNormForwardArgs& args) {
  if (auto reason = row_tensor_reason("input", args.input)) return reason;
  if (auto reason = cuda_floating_reason("input", args.input)) return reason;
  if (auto reason = same_dtype_reason("output", args.output, "input", args.input)) return reason;
  if (auto reason = row_tensor_reason("output", args.output)) return reason;
  if (auto reason = parameter_dtype_reason("weight", args.weight, args.input)) return reason;
  if (auto reason = optional_reason("weight", args.weight, &inner_contiguous_reason)) return reason;
  if (auto reason = parameter_dtype_reason("bias", args.bias, args.input)) return reason;
  if (auto reason = optional_reason("bias", args.bias, &inner_contiguous_reason)) return reason;
  if (auto reason = float32_reason("mean", args.mean)) return reason;
  if (auto reason = inner_contiguous_reason("mean", args.mean)) return reason;
  if (auto reason = float32_reason("inverse_std", args.inverse_std)) return reason;
  return inner_contiguous_reason("inverse_std", args.inverse_std);
}

void layer_norm_forward_fused(const LayerNormForwardArgs& args) {
  constexpr const char* op = "layer_norm_forward";
  const Device device = args.input.device();
  check_rows(op, args.input, device);
  const int64_t rows = args.input.size(0), hidden = args.input.size(1);
  check_parameter(op, "weight", args.weight, hidden, device);
  check_parameter(op, "bias", args.bias, hidden, device);
  check_shape(op, "output", args.output, args.input.shape(), device);
  check_shape(op, "mean", args.mean, Shape{rows}, device);
  check_shape(op, "inverse_std", args.inverse_std, Shape{rows}, device);
  if (rows == 0) return;
  LaunchScope scope(op, device, args.stream);
  visit_cuda_floating(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    const bool vectorized = hidden % kVectorElements<T> == 0 && rows_aligned<T>(args.input) &&
                            rows_aligned<T>(args.output) && parameter_aligned(args.weight) &&
                            parameter_aligned(args.bias);
    launch_forward<T, true>(NormForwardParams{.input = args.input.data(),
                                              .input_stride = row_stride(args.input),
                                              .output = args.output.data(),
                                              .output_stride = row_stride(args.output),
                                              .parameters = make_parameters(args.weight, args.bias, args.zero_centered),
                                              .first_statistic = args.mean.data_as<float>(),
                                              .second_statistic = args.inverse_std.data_as<float>(),
                                              .layout = RowLayout{.rows = rows, .hidden = hidden},
                                              .epsilon = float(args.epsilon)},
                            vectorized, scope);
  });
}

std::optional<std::string> supports_layer_norm_backward(const LayerNormBackwardArgs& args) {
  if (auto reason = row_tensor_reason("input", args.input)) return reason;
  if (auto reason = cuda_floating_reason("input", args.input)) return reason;
  if (auto reason = same_dtype_reason("grad_output", args.grad_output, "input", args.input)) return reason;
  if (auto reason = same_dtype_reason("grad_input", args.grad_input, "input", args.input)) return reason;
  if (auto reason = row_tensor_reason("grad_output", args.grad_output)) return reason;
  if (auto reason = row_tensor_reason("grad_input", args.grad_input)) return reason;
  if (auto reason = parameter_dtype_reason("weight", args.weight, args.input)) return reason;
  if (auto reason = optional_reason("weight", args.weight, &inner_contiguous_reason)) return reason;
  if (auto reason = float32_reason("mean", args.mean)) return reason;
  if (auto reason = inner_contiguous_reason("mean", args.mean)) return reason;
  if (auto reason = float32_reason("inverse_std", args.inverse_std)) return reason;
  if (auto reason = inner_contiguous_reason("inverse_std", args.inverse_std)) return reason;
  if (auto reason = optional_reason("grad_weight", args.grad_weight, &float32_reason)) return reason;
  if (auto reason = optional_reason("grad_weight", args.grad_weight, &inner_contiguous_reason)) return reason;
  if (auto reason = optional_reason("grad_bias", args.grad_bias, &float32_reason)) return reason;
  return optional_reason("grad_bias", args.grad_bias, &inner_contiguous_reason);
}

void layer_norm_backward_fused(const LayerNormBackwardArgs& args) {
  constexpr const char* op = "layer_norm_backward";
  const Device device = args.input.device();
  check_rows(op, args.input, device);
  const int64_t rows = args.input.size(0), hidden = args.input.size(1);
  check_shape(op, "grad_output", args.grad_output, args.input.shape(), device);
  check_parameter(op, "weight", args.weight, hidden, device);
  check_shape(op, "mean", args.mean, Shape{rows}, device);
  check_shape(op, "inverse_std", args.inverse_std, Shape{rows}, device);
  check_shape(op, "grad_input", args.grad_input, args.input.shape(), device);
  check_parameter(op, "grad_weight", args.grad_weight, hidden, device);
  check_parameter(op, "grad_bias", args.grad_bias, hidden, device);
  FLM_CHECK(args.grad_weight == nullptr || args.weight != nullptr, op, "grad_weight is given without a weight");
  if (rows == 0) return;
  LaunchScope scope(op, device, args.stream);
  visit_cuda_floating(args.input.dtype(), [&]<class T>(std::type_identity<T>) {
    const bool vectorized = hidden % kVectorElements<T> == 0 && rows_aligned<T>(args.input) &&
                            rows_aligned<T>(args.grad_output) && rows_aligned<T>(args.grad_input) &&
                            parameter_aligned(args.weight);
    launch_backward<T, true>(NormBackwardParams{.grad_output = args.grad_output.data(),
                                                .grad_output_stride = row_stride(args.grad_output),
                                                .input = args.input.data(),
                                                .input_stride = row_stride(args.input),
                                                .grad_input = args.grad_input.data(),
                                                .grad_input_stride = row_stride(args.grad_input),
                                                .parameters = make_parameters(args.weight, nullptr, args.zero_centered),
                                                .first_statistic = args.mean.data_as<float>(),
                                                .second_statistic = args.inverse_std.data_as<float>(),
                                                .weight_partials = nullptr,
                                                .bias_partials = nullptr,
                                                .layout = RowLayout{.rows = rows, .hidden = hidden}},
                             vectorized, args.grad_weight, args.grad_bias, scope);
  });
}

}  // namespace

FLM_REGISTER_KERNEL(RmsNormForward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_rms_norm_forward, &rms_norm_forward_fused,
                    "row group per row, row held in registers, 16-byte accesses; fp32 statistics");
FLM_REGISTER_KERNEL(RmsNormBackward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_rms_norm_backward, &rms_norm_backward_fused,
                    "row groups over a full wave; grad_weight from per-group partials reduced in a fixed order");
FLM_REGISTER_KERNEL(LayerNormForward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_layer_norm_forward, &layer_norm_forward_fused,
                    "row group per row, row held in registers, 16-byte accesses; two-pass fp32 mean and variance");
FLM_REGISTER_KERNEL(LayerNormBackward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_layer_norm_backward, &layer_norm_backward_fused,
                    "row groups over a full wave; grad_weight / grad_bias from per-group partials in a fixed order");

}  // namespace fast_llm::kernels::cuda
