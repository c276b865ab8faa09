// Fused CUDA rms_norm / layer_norm (kernels/normalization.h), variant "fused": rows of float32, bfloat16 or float16
// (weight and bias of that dtype or float32; statistics and parameter gradients float32), the last dimension
// contiguous, row strides free; 16-byte accesses when every row start is aligned, single elements otherwise.
//
// Both directions are memory bound, so every activation is read from memory once: a row is dealt in 16-byte vectors to
// the smallest row group of threads whose registers hold it, and each thread issues all its loads before using any.
// Forward: one row per group. Backward: row groups over a single wave of blocks; each group adds its columns'
// parameter-gradient terms into its own slice of shared memory, and the slices, then the blocks' rows of a workspace,
// are added in a fixed order: no atomics, bitwise reproducible. Rows too long for the registers of kMaxThreadsPerRow
// threads are read once per pass. The residual form (kernels/normalization.h) is a template parameter of the
// register-cached kernels, so the plain form keeps its registers. Statistics in fp32; layer_norm takes the mean first,
// then the centred variance, as the reference.
#include "fast_llm/kernels/cuda/common.cuh"
#include "fast_llm/kernels/normalization.h"

namespace fast_llm::kernels::cuda {
namespace {

constexpr int kMaxVectorsPerThread = 4;  // vectors of a row a thread holds in registers
constexpr int kBlockThreads = 256;       // threads per block when several rows share one
// Row groups of several warps (64 threads or more) synchronise on named barriers 1 to 15, one each (group_sum2).
static_assert(kBlockThreads / 64 <= 15, "more row groups of several warps in a block than named barriers");
constexpr int kMaxThreadsPerRow = 512;   // longer rows are read once per pass
constexpr int kColumnSumThreads = 512;
constexpr int kColumnSumColumns = 8;  // columns per block of the reduction of the partial sums

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

// Makes the bits of a register pack opaque to the compiler, so that it cannot keep the floats it unpacked from them
// in the first pass over a row alive until the second: that would take two to three times the registers of the packs
// and cut the rows in flight per multiprocessor by as much. Unpacking again costs one instruction per element.
template <class T, int N>
__device__ __forceinline__ void forget_unpacked(Vector<T, N>& pack) {
  if constexpr (sizeof(pack) % 4 == 0) {
    uint32_t* words = reinterpret_cast<uint32_t*>(&pack);
#pragma unroll
    for (int i = 0; i < int(sizeof(pack) / 4); ++i) asm volatile("" : "+r"(words[i]));
  } else {
    static_assert(sizeof(pack) == 2, "packs are whole 32-bit words or a single 16-bit element");
    unsigned short* half = reinterpret_cast<unsigned short*>(&pack);
    asm volatile("" : "+h"(*half));
  }
}

// How the rows map onto threads (make_layout). What the kernels must move, for (rows, hidden) activations of b bytes
// per element: the forward reads x and writes y, 2 rows hidden b, plus 4 bytes of statistics per row; the backward
// reads x and grad_output and writes grad_input, 3 rows hidden b. The residual form adds a read of `residual` and a
// write of `sum` to the forward, 4 rows hidden b where an axpy and the norm would move 5, and a read of grad_residual
// to the backward, 4 rows hidden b against 6. Weight, bias and their fp32 gradients are hidden-sized, and the per-block
// partial sums of the parameter gradients add 8 bytes per column per block of the backward's single wave. The layout
// keeps enough bytes in flight on every multiprocessor to run at the HBM rate:
// a row is cut into 16-byte vectors (kVec elements; single elements on the scalar path) dealt round-robin to a row
// group of `threads_per_row` threads (a multiple of 32), each of which holds its up to kMaxVectorsPerThread vectors in
// registers between the passes over the row. The group is the smallest that fits: one warp per row up to 128 vectors
// (hidden 1024 in bf16; SmolLM2's 576 is 72 vectors, two or three per lane), whose row sums are warp butterflies
// without a barrier; longer rows take several warps (Llama-3.2's 2048 and 3072: 2 and 3 warps of 4 vectors a lane),
// whose warp sums meet in shared memory in a fixed order (in the backward behind a named barrier of the group's own
// warps, so that the block's other row groups, which walk rows of their own, do not wait). Short rows share blocks of
// 256 threads (8 rows of one warp). Rows longer than the registers of 512 threads (more than 2048 vectors: hidden >
// 16384 in bf16, > 8192 in fp32, > 2048 on the scalar path) are read once per pass instead (the later passes mostly
// hit L1 / L2), their gradient partial sums kept in a workspace row per group.
struct RowLayout {
  int64_t rows = 0;
  int64_t hidden = 0;
  int vectors = 0;              // kVec-element vectors per row
  int threads_per_row = 32;     // a multiple of 32
  int vectors_per_thread = 1;   // the most vectors a thread holds, 1 to kMaxVectorsPerThread; 0: rows read per pass
  int groups_per_block = 1;     // rows of a block (forward) or row groups of a block (backward)
};

struct NormForwardParams {
  const void* input;  // (rows, hidden) T
  int64_t input_stride;
  const void* residual;  // (rows, hidden) T or nullptr: the rows normalised are input + residual (the residual form)
  int64_t residual_stride;
  void* sum;  // (rows, hidden) T: input + residual, with `residual` (may be the input's own storage)
  int64_t sum_stride;
  void* output;  // (rows, hidden) T
  int64_t output_stride;
  NormParameters parameters;
  float* first_statistic;   // (rows): rms_norm inverse_rms, layer_norm mean
  float* second_statistic;  // (rows): layer_norm inverse_std
  RowLayout layout;
  float epsilon;
};

// input + residual, rounded to T (as an axpy of the residual into the input would store it).
template <class T, int kVec>
__device__ __forceinline__ Vector<T, kVec> add_packs(const Vector<T, kVec>& input, const Vector<T, kVec>& residual) {
  Vector<T, kVec> sum;
#pragma unroll
  for (int i = 0; i < kVec; ++i) sum.values[i] = store<T>(load(input.values[i]) + load(residual.values[i]));
  return sum;
}

template <int N, class T>
__device__ __forceinline__ void store_pack(T* pointer, const Vector<T, N>& pack) {
  *reinterpret_cast<Vector<T, N>*>(pointer) = pack;
}

// values += pack, in fp32.
template <class T, int N>
__device__ __forceinline__ void add_unpacked(const Vector<T, N>& pack, float (&values)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) values[i] += load(pack.values[i]);
}

// y = x r w (rms_norm, r = 1 / sqrt(mean(x^2) + eps)) or y = (x - mean) s w + b (layer_norm, s = 1 / sqrt(var + eps)),
// given the mean (0 for rms_norm) and r or s.
template <class T, int kVec, bool kLayerNorm>
__device__ __forceinline__ void write_normalized(const NormParameters& parameters, int v, const float (&x)[kVec],
                                                 float mean, float inverse, T* output) {
  float w[kVec], y[kVec];
  load_weight<T>(parameters, int64_t(v) * kVec, w);
  if constexpr (kLayerNorm) {
    float b[kVec];
    load_bias<T>(parameters, int64_t(v) * kVec, b);
#pragma unroll
    for (int i = 0; i < kVec; ++i) y[i] = (x[i] - mean) * inverse * w[i] + b[i];
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) y[i] = x[i] * inverse * w[i];
  }
  store_floats<kVec>(output + int64_t(v) * kVec, y);
}

// One row per row group; the thread's vectors member, member + threads_per_row, ... stay in registers. In the residual
// form (kResidual) they are the rounded sums, which the thread stores to `sum` once all its loads are issued (a store
// first could alias a later load, which would then wait for it).
template <class T, int kVec, int kVectors, bool kLayerNorm, bool kResidual>
__global__ void __launch_bounds__(kMaxThreadsPerRow) norm_forward_kernel(const NormForwardParams p) {
  __shared__ float scratch[32];
  const RowLayout& layout = p.layout;
  const int threads_per_row = layout.threads_per_row;
  const int warps_per_group = threads_per_row / 32;
  const int group = int(threadIdx.x) / threads_per_row, member = int(threadIdx.x) % threads_per_row;
  const int64_t row = int64_t(blockIdx.x) * layout.groups_per_block + group;
  const bool active = row < layout.rows;
  const float hidden = float(layout.hidden);
  const T* input = static_cast<const T*>(p.input) + (active ? row * p.input_stride : 0);
  const T* residual = kResidual ? static_cast<const T*>(p.residual) + (active ? row * p.residual_stride : 0) : nullptr;
  T* sum = kResidual ? static_cast<T*>(p.sum) + (active ? row * p.sum_stride : 0) : nullptr;
  T* output = static_cast<T*>(p.output) + (active ? row * p.output_stride : 0);

  Vector<T, kVec> cache[kVectors] = {}, residual_cache[kVectors] = {};
  bool owned[kVectors];
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const int v = member + k * threads_per_row;
    owned[k] = active && v < layout.vectors;
    if (!owned[k]) continue;
    cache[k] = load_pack<kVec>(input + int64_t(v) * kVec);
    if constexpr (kResidual) residual_cache[k] = load_pack<kVec>(residual + int64_t(v) * kVec);
  }
  if constexpr (kResidual) {
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      if (!owned[k]) continue;
      cache[k] = add_packs(cache[k], residual_cache[k]);
      store_pack(sum + int64_t(member + k * threads_per_row) * kVec, cache[k]);
    }
  }
  float mean = 0.0f;
  if constexpr (kLayerNorm) {
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      if (!owned[k]) continue;
      float x[kVec];
      unpack_floats(cache[k], x);
#pragma unroll
      for (int i = 0; i < kVec; ++i) total += x[i];
    }
    mean = group_sum(total, scratch, warps_per_group) / hidden;
  }
  float sum_squares = 0.0f;
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    if (!owned[k]) continue;
    float x[kVec];
    unpack_floats(cache[k], x);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float centered = x[i] - mean;
      sum_squares += centered * centered;
    }
  }
  const float inverse = 1.0f / sqrtf(group_sum(sum_squares, scratch, warps_per_group) / hidden + p.epsilon);
#pragma unroll
  for (int k = 0; k < kVectors; ++k) forget_unpacked(cache[k]);
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    if (!owned[k]) continue;
    float x[kVec];
    unpack_floats(cache[k], x);
    write_normalized<T, kVec, kLayerNorm>(p.parameters, member + k * threads_per_row, x, mean, inverse, output);
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

// The same for rows too long for the registers of a group: the row is read once per pass (the later passes mostly
// hit L1 / L2). In the residual form the first pass adds the residual and stores the sums, which the later passes
// read back (each thread its own elements: `sum` may be the input's storage).
template <class T, int kVec, bool kLayerNorm>
__global__ void __launch_bounds__(kMaxThreadsPerRow) norm_forward_long_row_kernel(const NormForwardParams p) {
  __shared__ float scratch[32];
  const RowLayout& layout = p.layout;
  const int threads_per_row = layout.threads_per_row;
  const int warps_per_group = threads_per_row / 32;
  const int group = int(threadIdx.x) / threads_per_row, member = int(threadIdx.x) % threads_per_row;
  const int64_t row = int64_t(blockIdx.x) * layout.groups_per_block + group;
  const bool active = row < layout.rows;
  const int vectors = active ? layout.vectors : 0;
  const float hidden = float(layout.hidden);
  const T* input = static_cast<const T*>(p.input) + (active ? row * p.input_stride : 0);
  const T* residual = p.residual != nullptr ? static_cast<const T*>(p.residual) + (active ? row * p.residual_stride : 0)
                                            : nullptr;
  T* sum = p.residual != nullptr ? static_cast<T*>(p.sum) + (active ? row * p.sum_stride : 0) : nullptr;
  T* output = static_cast<T*>(p.output) + (active ? row * p.output_stride : 0);
  const T* normalized = residual != nullptr ? sum : input;  // what the passes after the first read

  // Vector v of the row the norm sees, on the first pass.
  auto first_pass_load = [&](int v, float (&x)[kVec]) {
    if (residual == nullptr) {
      load_floats<kVec>(input + int64_t(v) * kVec, x);
      return;
    }
    const Vector<T, kVec> pack =
        add_packs(load_pack<kVec>(input + int64_t(v) * kVec), load_pack<kVec>(residual + int64_t(v) * kVec));
    store_pack(sum + int64_t(v) * kVec, pack);
    unpack_floats(pack, x);
  };
  float mean = 0.0f, sum_squares = 0.0f;
  if constexpr (kLayerNorm) {
    float total = 0.0f;
    for (int v = member; v < vectors; v += threads_per_row) {
      float x[kVec];
      first_pass_load(v, x);
#pragma unroll
      for (int i = 0; i < kVec; ++i) total += x[i];
    }
    mean = group_sum(total, scratch, warps_per_group) / hidden;
    for (int v = member; v < vectors; v += threads_per_row) {
      float x[kVec];
      load_floats<kVec>(normalized + int64_t(v) * kVec, x);
#pragma unroll
      for (int i = 0; i < kVec; ++i) sum_squares += (x[i] - mean) * (x[i] - mean);
    }
  } else {
    for (int v = member; v < vectors; v += threads_per_row) {
      float x[kVec];
      first_pass_load(v, x);
#pragma unroll
      for (int i = 0; i < kVec; ++i) sum_squares += x[i] * x[i];
    }
  }
  const float inverse = 1.0f / sqrtf(group_sum(sum_squares, scratch, warps_per_group) / hidden + p.epsilon);
  for (int v = member; v < vectors; v += threads_per_row) {
    float x[kVec];
    load_floats<kVec>(normalized + int64_t(v) * kVec, x);
    write_normalized<T, kVec, kLayerNorm>(p.parameters, v, x, mean, inverse, output);
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
  const void* grad_residual;  // (rows, hidden) T or nullptr: added to grad_input (the residual form)
  int64_t grad_residual_stride;
  NormParameters parameters;      // the bias is unused
  const float* first_statistic;   // (rows): rms_norm inverse_rms, layer_norm mean
  const float* second_statistic;  // (rows): layer_norm inverse_std
  // Partial sums of grad_weight / grad_bias, or nullptr: (blocks, hidden), one row per block, or (row groups, hidden)
  // for long rows.
  float* weight_partials;
  float* bias_partials;
  RowLayout layout;
};

// One row of the backward: the row sums (with the statistics), the input gradient, and the row's terms of the
// parameter gradients, for one vector of the row.
//   rms_norm:   grad_x = r (g w - x r^2 mean(g w x)),         grad_w += g x r
//   layer_norm: grad_x = s (h - mean(h) - xhat mean(h xhat)),  grad_w += g xhat, grad_b += g
//               with h = g w, xhat = (x - mean) s
template <int kVec, bool kLayerNorm>
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
                                            float2 means, float (&grad_input)[kVec], float (&weight_term)[kVec],
                                            float (&bias_term)[kVec]) const {
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      if constexpr (kLayerNorm) {
        const float normalized = (x[i] - first) * second, h = g[i] * w[i];
        grad_input[i] = second * (h - means.x - normalized * means.y);
        weight_term[i] = g[i] * normalized;
        bias_term[i] = g[i];
      } else {
        grad_input[i] = first * (g[i] * w[i] - x[i] * first * first * means.x);
        weight_term[i] = g[i] * x[i] * first;
        bias_term[i] = 0.0f;
      }
    }
  }
};

// A row group's column sums of one parameter gradient in shared memory (`hidden` floats). Element i of vector v lives
// at ((i / kPiece) vectors + v) kPiece + i % kPiece: the 16-byte pieces of consecutive vectors are consecutive, so
// the lanes of a warp (which own consecutive vectors) read and write without bank conflicts.
template <int kVec>
struct ColumnSums {
  static constexpr int kPiece = kVec < 4 ? kVec : 4;
  float* base;  // nullptr: the gradient is not wanted
  int vectors;

  __device__ __forceinline__ Vector<float, kPiece>* piece(int v, int index) const {
    return reinterpret_cast<Vector<float, kPiece>*>(base + (int64_t(index) * vectors + v) * kPiece);
  }

  __device__ __forceinline__ void zero(int v) const {
#pragma unroll
    for (int index = 0; index < kVec / kPiece; ++index) *piece(v, index) = Vector<float, kPiece>{};
  }

  __device__ __forceinline__ void add(int v, const float (&terms)[kVec]) const {
#pragma unroll
    for (int index = 0; index < kVec / kPiece; ++index) {
      Vector<float, kPiece> sums = *piece(v, index);
#pragma unroll
      for (int i = 0; i < kPiece; ++i) sums.values[i] += terms[index * kPiece + i];
      *piece(v, index) = sums;
    }
  }

  // Where column `column` lives, relative to `base`.
  __device__ __forceinline__ static int64_t offset(int64_t column, int vectors) {
    const int64_t v = column / kVec, i = column % kVec;
    return ((i / kPiece) * vectors + v) * kPiece + i % kPiece;
  }
};

// Row groups over a single wave of blocks; the thread's vectors of a row (member, member + threads_per_row, ...) of
// x and grad_output stay in registers between the row sums and the gradients. In the residual form those of
// grad_residual are loaded with them, so that one memory latency covers the row. Dynamic shared memory: the column
// sums of grad_weight, then those of grad_bias, one `hidden` slice per row group, for the gradients that are wanted;
// each column of a slice belongs to one thread, so no barrier or atomic is needed, and the slices are laid out so that
// a warp's 16-byte accesses are consecutive. At the end the block adds its groups' slices in a fixed order into one
// row of a (blocks, hidden) fp32 workspace, which column_sum_kernel adds into the parameter gradients.
// rms_norm's kernels are held to 80 registers (ptxas chose 86 and 104, the residual form spills 4 bytes at 80): three
// blocks of 256 threads then fit on a multiprocessor instead of two (docs/benchmarks.md). layer_norm keeps 128, what
// 512-thread blocks allow.
template <class T, int kVec, int kVectors, bool kLayerNorm, bool kResidual>
__global__ void __maxnreg__(kLayerNorm ? 128 : 80) norm_backward_kernel(const NormBackwardParams p) {
  __shared__ float2 scratch[2][32];
  extern __shared__ float4 dynamic_shared[];
  const RowLayout& layout = p.layout;
  const int threads_per_row = layout.threads_per_row;
  const int warps_per_group = threads_per_row / 32;
  const int groups_per_block = layout.groups_per_block;
  const int group = int(threadIdx.x) / threads_per_row, member = int(threadIdx.x) % threads_per_row;
  const int64_t group_count = int64_t(gridDim.x) * groups_per_block;
  const float hidden = float(layout.hidden);

  float* const shared = reinterpret_cast<float*>(dynamic_shared);
  const int64_t block_sums = int64_t(groups_per_block) * layout.hidden;  // floats of one gradient's slices
  float* const weight_slices = p.weight_partials != nullptr ? shared : nullptr;
  float* const bias_slices =
      kLayerNorm && p.bias_partials != nullptr ? shared + (weight_slices != nullptr ? block_sums : 0) : nullptr;
  const ColumnSums<kVec> weight_sums{weight_slices != nullptr ? weight_slices + group * layout.hidden : nullptr,
                                     layout.vectors};
  const ColumnSums<kVec> bias_sums{bias_slices != nullptr ? bias_slices + group * layout.hidden : nullptr,
                                   layout.vectors};
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const int v = member + k * threads_per_row;
    if (v >= layout.vectors) continue;
    if (weight_sums.base != nullptr) weight_sums.zero(v);
    if (bias_sums.base != nullptr) bias_sums.zero(v);
  }

  // Every thread of a group runs the same number of iterations (the row sums synchronise the group).
  int parity = 0;  // of the row sums' scratch half (group_sum2)
  for (int64_t first_row = int64_t(blockIdx.x) * groups_per_block; first_row < layout.rows;
       first_row += group_count, parity ^= 1) {
    const int64_t row = first_row + group;
    const bool active = row < layout.rows;
    const T* input = static_cast<const T*>(p.input) + (active ? row * p.input_stride : 0);
    const T* grad_output = static_cast<const T*>(p.grad_output) + (active ? row * p.grad_output_stride : 0);
    T* grad_input = static_cast<T*>(p.grad_input) + (active ? row * p.grad_input_stride : 0);
    const T* grad_residual =
        kResidual ? static_cast<const T*>(p.grad_residual) + (active ? row * p.grad_residual_stride : 0) : nullptr;
    Vector<T, kVec> x_cache[kVectors] = {}, g_cache[kVectors] = {}, residual_cache[kVectors] = {};
    bool owned[kVectors];
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int v = member + k * threads_per_row;
      owned[k] = active && v < layout.vectors;
      if (!owned[k]) continue;
      x_cache[k] = load_pack<kVec>(input + int64_t(v) * kVec);
      g_cache[k] = load_pack<kVec>(grad_output + int64_t(v) * kVec);
      if constexpr (kResidual) residual_cache[k] = load_pack<kVec>(grad_residual + int64_t(v) * kVec);
    }
    const RowBackward<kVec, kLayerNorm> math{active ? p.first_statistic[row] : 0.0f,
                                             kLayerNorm && active ? p.second_statistic[row] : 0.0f};
    float2 sums = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      if (!owned[k]) continue;
      float x[kVec], g[kVec], w[kVec];
      unpack_floats(x_cache[k], x);
      unpack_floats(g_cache[k], g);
      load_weight<T>(p.parameters, int64_t(member + k * threads_per_row) * kVec, w);
      math.add_sums(x, g, w, sums);
    }
    sums = group_sum2(sums, scratch, warps_per_group, parity);
    const float2 means = make_float2(sums.x / hidden, sums.y / hidden);
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      forget_unpacked(x_cache[k]);
      forget_unpacked(g_cache[k]);
      if constexpr (kResidual) forget_unpacked(residual_cache[k]);
    }
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      if (!owned[k]) continue;
      const int v = member + k * threads_per_row;
      float x[kVec], g[kVec], w[kVec], result[kVec], weight_term[kVec], bias_term[kVec];
      unpack_floats(x_cache[k], x);
      unpack_floats(g_cache[k], g);
      load_weight<T>(p.parameters, int64_t(v) * kVec, w);
      math.gradients(x, g, w, means, result, weight_term, bias_term);
      if constexpr (kResidual) add_unpacked(residual_cache[k], result);
      store_floats<kVec>(grad_input + int64_t(v) * kVec, result);
      if (weight_sums.base != nullptr) weight_sums.add(v, weight_term);
      if (bias_sums.base != nullptr) bias_sums.add(v, bias_term);
    }
  }

  // The block's row of partial sums: its groups' slices added in order.
  if (weight_slices == nullptr && bias_slices == nullptr) return;
  __syncthreads();
  for (int64_t column = threadIdx.x; column < layout.hidden; column += blockDim.x) {
    const int64_t offset = ColumnSums<kVec>::offset(column, layout.vectors);
    if (weight_slices != nullptr) {
      float total = 0.0f;
      for (int slice = 0; slice < groups_per_block; ++slice) total += weight_slices[slice * layout.hidden + offset];
      p.weight_partials[int64_t(blockIdx.x) * layout.hidden + column] = total;
    }
    if (bias_slices != nullptr) {
      float total = 0.0f;
      for (int slice = 0; slice < groups_per_block; ++slice) total += bias_slices[slice * layout.hidden + offset];
      p.bias_partials[int64_t(blockIdx.x) * layout.hidden + column] = total;
    }
  }
}

// The same for rows too long for registers: each pass reads the row, and the partial sums are kept in the group's
// (zeroed) workspace row, whose columns each belong to one thread.
template <class T, int kVec, bool kLayerNorm>
__global__ void __launch_bounds__(kMaxThreadsPerRow) norm_backward_long_row_kernel(const NormBackwardParams p) {
  __shared__ float2 scratch[2][32];
  const RowLayout& layout = p.layout;
  const int threads_per_row = layout.threads_per_row;
  const int warps_per_group = threads_per_row / 32;
  const int groups_per_block = layout.groups_per_block;
  const int group = int(threadIdx.x) / threads_per_row, member = int(threadIdx.x) % threads_per_row;
  const int64_t group_index = int64_t(blockIdx.x) * groups_per_block + group;
  const int64_t group_count = int64_t(gridDim.x) * groups_per_block;
  const float hidden = float(layout.hidden);
  float* weight_row = p.weight_partials != nullptr ? p.weight_partials + group_index * layout.hidden : nullptr;
  float* bias_row = kLayerNorm && p.bias_partials != nullptr ? p.bias_partials + group_index * layout.hidden : nullptr;

  int parity = 0;  // of the row sums' scratch half (group_sum2)
  for (int64_t first_row = int64_t(blockIdx.x) * groups_per_block; first_row < layout.rows;
       first_row += group_count, parity ^= 1) {
    const int64_t row = first_row + group;
    const bool active = row < layout.rows;
    const int vectors = active ? layout.vectors : 0;
    const T* input = static_cast<const T*>(p.input) + (active ? row * p.input_stride : 0);
    const T* grad_output = static_cast<const T*>(p.grad_output) + (active ? row * p.grad_output_stride : 0);
    T* grad_input = static_cast<T*>(p.grad_input) + (active ? row * p.grad_input_stride : 0);
    const T* grad_residual =
        p.grad_residual != nullptr
            ? static_cast<const T*>(p.grad_residual) + (active ? row * p.grad_residual_stride : 0)
            : nullptr;
    const RowBackward<kVec, kLayerNorm> math{active ? p.first_statistic[row] : 0.0f,
                                             kLayerNorm && active ? p.second_statistic[row] : 0.0f};
    float2 sums = make_float2(0.0f, 0.0f);
    for (int v = member; v < vectors; v += threads_per_row) {
      float x[kVec], g[kVec], w[kVec];
      load_floats<kVec>(input + int64_t(v) * kVec, x);
      load_floats<kVec>(grad_output + int64_t(v) * kVec, g);
      load_weight<T>(p.parameters, int64_t(v) * kVec, w);
      math.add_sums(x, g, w, sums);
    }
    sums = group_sum2(sums, scratch, warps_per_group, parity);
    const float2 means = make_float2(sums.x / hidden, sums.y / hidden);
    for (int v = member; v < vectors; v += threads_per_row) {
      float x[kVec], g[kVec], w[kVec], result[kVec], weight_term[kVec], bias_term[kVec];
      load_floats<kVec>(input + int64_t(v) * kVec, x);
      load_floats<kVec>(grad_output + int64_t(v) * kVec, g);
      load_weight<T>(p.parameters, int64_t(v) * kVec, w);
      math.gradients(x, g, w, means, result, weight_term, bias_term);
      if (grad_residual != nullptr) add_unpacked(load_pack<kVec>(grad_residual + int64_t(v) * kVec), result);
      store_floats<kVec>(grad_input + int64_t(v) * kVec, result);
      if (weight_row != nullptr) {
        float partial[kVec];
        load_floats<kVec>(weight_row + int64_t(v) * kVec, partial);
#pragma unroll
        for (int i = 0; i < kVec; ++i) partial[i] += weight_term[i];
        store_floats<kVec>(weight_row + int64_t(v) * kVec, partial);
      }
      if (bias_row != nullptr) {
        float partial[kVec];
        load_floats<kVec>(bias_row + int64_t(v) * kVec, partial);
#pragma unroll
        for (int i = 0; i < kVec; ++i) partial[i] += bias_term[i];
        store_floats<kVec>(bias_row + int64_t(v) * kVec, partial);
      }
    }
  }
}

// target[c] += sum over r of partials[r, c], r in a fixed order: thread (phase, lane) of a block sums rows phase,
// phase + kPhases, ... of column blockIdx.x * kColumnSumColumns + lane, then one thread per column adds the kPhases
// sums in order. Narrow column tiles (32-byte segments of a row) give the reduction many blocks, so reading the
// workspace, a few hundred rows, takes a few round trips to L2 rather than hundreds.
__global__ void __launch_bounds__(kColumnSumThreads)
    column_sum_kernel(const float* partials, int64_t partial_rows, int64_t columns, float* target) {
  constexpr int kPhases = kColumnSumThreads / kColumnSumColumns;
  __shared__ float sums[kPhases][kColumnSumColumns];
  const int lane = int(threadIdx.x) % kColumnSumColumns, phase = int(threadIdx.x) / kColumnSumColumns;
  const int64_t column = int64_t(blockIdx.x) * kColumnSumColumns + lane;
  float sum = 0.0f;
  if (column < columns) {
#pragma unroll 4
    for (int64_t r = phase; r < partial_rows; r += kPhases) sum += partials[r * columns + column];
  }
  sums[phase][lane] = sum;
  __syncthreads();
  if (threadIdx.x < kColumnSumColumns && column < columns) {
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kPhases; ++i) total += sums[i][lane];
    target[column] += total;
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Host side.

// The smallest row group whose registers hold the row (kMaxVectorsPerThread vectors a thread), at most
// kMaxThreadsPerRow threads; rows it cannot hold are read per pass by kMaxThreadsPerRow threads.
RowLayout make_layout(int64_t rows, int64_t hidden, int vector_elements) {
  RowLayout layout;
  layout.rows = rows;
  layout.hidden = hidden;
  layout.vectors = int(hidden / vector_elements);
  const int64_t threads = round_up(ceil_div(layout.vectors, kMaxVectorsPerThread), 32);
  layout.threads_per_row = int(threads > kMaxThreadsPerRow ? kMaxThreadsPerRow : threads);
  const int64_t per_thread = ceil_div(layout.vectors, layout.threads_per_row);
  layout.vectors_per_thread = per_thread <= kMaxVectorsPerThread ? int(per_thread) : 0;
  layout.groups_per_block = layout.threads_per_row >= kBlockThreads ? 1 : kBlockThreads / layout.threads_per_row;
  return layout;
}

// Calls `function(vectors, residual)` with the template arguments of a register-cached kernel, as
// std::integral_constant<int, kVectors> and std::bool_constant<kResidual>. The register cache is sized at compile time:
// kVectors = vectors_per_thread (1 to kMaxVectorsPerThread) on the 16-byte path; the scalar path always takes
// kMaxVectorsPerThread, whose registers cost little there, so that fewer kernels are compiled.
template <int kVec, class Function>
decltype(auto) visit_cached_kernel(int vectors_per_thread, bool residual, Function&& function) {
  auto with_residual = [&](auto vectors) -> decltype(auto) {
    return residual ? function(vectors, std::true_type{}) : function(vectors, std::false_type{});
  };
  static_assert(kMaxVectorsPerThread == 4, "one case per register cache size");
  if constexpr (kVec == 1) {
    return with_residual(std::integral_constant<int, kMaxVectorsPerThread>{});
  } else {
    switch (vectors_per_thread) {
      case 1: return with_residual(std::integral_constant<int, 1>{});
      case 2: return with_residual(std::integral_constant<int, 2>{});
      case 3: return with_residual(std::integral_constant<int, 3>{});
      case 4: return with_residual(std::integral_constant<int, 4>{});
      default: break;
    }
    throw InternalError("kernels", fmt::format("normalization: {} vectors per thread", vectors_per_thread));
  }
}

bool parameter_aligned(const Tensor* parameter) { return parameter == nullptr || is_aligned(parameter->data(), 16); }

template <class T>
bool optional_rows_aligned(const Tensor* tensor) {
  return tensor == nullptr || rows_aligned<T>(*tensor);
}

const void* optional_data(const Tensor* tensor) { return tensor != nullptr ? tensor->data() : nullptr; }
int64_t optional_row_stride(const Tensor* tensor) { return tensor != nullptr ? row_stride(*tensor) : 0; }

NormParameters make_parameters(const Tensor* weight, const Tensor* bias, bool zero_centered) {
  return NormParameters{.weight = weight != nullptr ? weight->data() : nullptr,
                        .bias = bias != nullptr ? bias->data() : nullptr,
                        .weight_is_float = weight != nullptr && weight->dtype() == DType::float32,
                        .bias_is_float = bias != nullptr && bias->dtype() == DType::float32,
                        .zero_centered = zero_centered};
}

template <class T, int kVec, bool kLayerNorm>
void launch_forward_with(NormForwardParams params, const LaunchScope& scope) {
  params.layout = make_layout(params.layout.rows, params.layout.hidden, kVec);
  const RowLayout& layout = params.layout;
  const dim3 grid(unsigned(ceil_div(layout.rows, layout.groups_per_block)));
  const dim3 block(unsigned(layout.groups_per_block * layout.threads_per_row));
  void (*kernel)(NormForwardParams) = nullptr;
  if (layout.vectors_per_thread == 0)
    kernel = &norm_forward_long_row_kernel<T, kVec, kLayerNorm>;
  else
    kernel = visit_cached_kernel<kVec>(layout.vectors_per_thread, params.residual != nullptr,
                                       []<int kVectors, bool kResidual>(std::integral_constant<int, kVectors>,
                                                                        std::bool_constant<kResidual>) {
                                         return &norm_forward_kernel<T, kVec, kVectors, kLayerNorm, kResidual>;
                                       });
  kernel<<<grid, block, 0, scope.stream()>>>(params);
  scope.check_launch();
}

template <class T, bool kLayerNorm>
void launch_forward(const NormForwardParams& params, bool vectorized, const LaunchScope& scope) {
  if (vectorized)
    launch_forward_with<T, kVectorElements<T>, kLayerNorm>(params, scope);
  else
    launch_forward_with<T, 1, kLayerNorm>(params, scope);
}

// Runs the backward kernel on a single wave of blocks, then adds the partial sums into grad_weight / grad_bias.
template <class T, int kVec, bool kLayerNorm>
void launch_backward_with(NormBackwardParams params, Tensor* grad_weight, Tensor* grad_bias,
                          const LaunchScope& scope) {
  params.layout = make_layout(params.layout.rows, params.layout.hidden, kVec);
  const RowLayout& layout = params.layout;
  const int64_t hidden = layout.hidden;
  const int threads = layout.groups_per_block * layout.threads_per_row;
  const bool long_rows = layout.vectors_per_thread == 0;
  void (*kernel)(NormBackwardParams) = nullptr;
  if (long_rows)
    kernel = &norm_backward_long_row_kernel<T, kVec, kLayerNorm>;
  else
    kernel = visit_cached_kernel<kVec>(layout.vectors_per_thread, params.grad_residual != nullptr,
                                       []<int kVectors, bool kResidual>(std::integral_constant<int, kVectors>,
                                                                        std::bool_constant<kResidual>) {
                                         return &norm_backward_kernel<T, kVec, kVectors, kLayerNorm, kResidual>;
                                       });
  // The column sums of each wanted gradient, one slice of `hidden` floats per row group of a block. Opted in whenever
  // there are any: the kernel's own static shared memory counts against the 48 KiB a launch gets without opting in
  // (exactly 48 KiB of column sums, layer_norm at hidden 3072 with two rows a block, failed to launch on the H200).
  const int gradients = (grad_weight != nullptr ? 1 : 0) + (grad_bias != nullptr ? 1 : 0);
  const size_t shared_bytes = long_rows ? 0 : size_t(gradients) * layout.groups_per_block * hidden * sizeof(float);
  if (shared_bytes > 0)
    FLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes)));
  int blocks_per_multiprocessor = 0;
  FLM_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_multiprocessor, kernel, threads, shared_bytes));
  const int64_t wave =
      int64_t(scope.multiprocessors()) * (blocks_per_multiprocessor > 0 ? blocks_per_multiprocessor : 1);
  const int64_t needed = ceil_div(layout.rows, layout.groups_per_block);
  const int64_t blocks = needed < wave ? needed : wave;
  const int64_t partial_rows = long_rows ? blocks * layout.groups_per_block : blocks;

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
  if (long_rows) {
    // The long-row kernel adds into its workspace rows instead of writing them once.
    if (params.weight_partials != nullptr)
      FLM_CUDA_CHECK(cudaMemsetAsync(params.weight_partials, 0, weight_partials.nbytes(), scope.stream()));
    if (params.bias_partials != nullptr)
      FLM_CUDA_CHECK(cudaMemsetAsync(params.bias_partials, 0, bias_partials.nbytes(), scope.stream()));
  }
  kernel<<<dim3(unsigned(blocks)), dim3(unsigned(threads)), shared_bytes, scope.stream()>>>(params);
  scope.check_launch();

  const dim3 reduce_grid(unsigned(ceil_div(hidden, kColumnSumColumns))), reduce_block(kColumnSumThreads);
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

template <class T, bool kLayerNorm>
void launch_backward(const NormBackwardParams& params, bool vectorized, Tensor* grad_weight, Tensor* grad_bias,
                     const LaunchScope& scope) {
  if (vectorized)
    launch_backward_with<T, kVectorElements<T>, kLayerNorm>(params, grad_weight, grad_bias, scope);
  else
    launch_backward_with<T, 1, kLayerNorm>(params, grad_weight, grad_bias, scope);
}

// ---------------------------------------------------------------------------------------------------------------------
// The variants: rms_norm and layer_norm differ only in the tensors they pass (layer_norm has a bias and a second
// statistic) and in the kernels' kLayerNorm.

// An argument and its name; `tensor` is null for an optional argument that is not given.
struct NamedTensor {
  std::string_view name;
  const Tensor* tensor = nullptr;
};

// Either norm's forward arguments.
struct ForwardTensors {
  const char* op;
  const Tensor& input;
  const Tensor* weight;
  const Tensor* bias;
  Tensor& output;
  const Tensor* residual;
  Tensor* sum;
  NamedTensor first_statistic;   // inverse_rms, or layer_norm's mean
  NamedTensor second_statistic;  // layer_norm's inverse_std
  double epsilon;
  bool zero_centered;
  Stream stream;
};

ForwardTensors forward_tensors(const RmsNormForwardArgs& args) {
  return {.op = "rms_norm_forward",
          .input = args.input,
          .weight = args.weight,
          .bias = nullptr,
          .output = args.output,
          .residual = args.residual,
          .sum = args.sum,
          .first_statistic = {"inverse_rms", &args.inverse_rms},
          .second_statistic = {},
          .epsilon = args.epsilon,
          .zero_centered = args.zero_centered,
          .stream = args.stream};
}

ForwardTensors forward_tensors(const LayerNormForwardArgs& args) {
  return {.op = "layer_norm_forward",
          .input = args.input,
          .weight = args.weight,
          .bias = args.bias,
          .output = args.output,
          .residual = args.residual,
          .sum = args.sum,
          .first_statistic = {"mean", &args.mean},
          .second_statistic = {"inverse_std", &args.inverse_std},
          .epsilon = args.epsilon,
          .zero_centered = args.zero_centered,
          .stream = args.stream};
}

// Either norm's backward arguments.
struct BackwardTensors {
  const char* op;
  const Tensor& grad_output;
  const Tensor& input;
  const Tensor* weight;
  NamedTensor first_statistic;   // inverse_rms, or layer_norm's mean
  NamedTensor second_statistic;  // layer_norm's inverse_std
  Tensor& grad_input;
  Tensor* grad_weight;
  Tensor* grad_bias;
  const Tensor* grad_residual;
  bool zero_centered;
  Stream stream;
};

BackwardTensors backward_tensors(const RmsNormBackwardArgs& args) {
  return {.op = "rms_norm_backward",
          .grad_output = args.grad_output,
          .input = args.input,
          .weight = args.weight,
          .first_statistic = {"inverse_rms", &args.inverse_rms},
          .second_statistic = {},
          .grad_input = args.grad_input,
          .grad_weight = args.grad_weight,
          .grad_bias = nullptr,
          .grad_residual = args.grad_residual,
          .zero_centered = args.zero_centered,
          .stream = args.stream};
}

BackwardTensors backward_tensors(const LayerNormBackwardArgs& args) {
  return {.op = "layer_norm_backward",
          .grad_output = args.grad_output,
          .input = args.input,
          .weight = args.weight,
          .first_statistic = {"mean", &args.mean},
          .second_statistic = {"inverse_std", &args.inverse_std},
          .grad_input = args.grad_input,
          .grad_weight = args.grad_weight,
          .grad_bias = args.grad_bias,
          .grad_residual = args.grad_residual,
          .zero_centered = args.zero_centered,
          .stream = args.stream};
}

// What the kernels take beyond the op's contract: rows of float32, bfloat16 or float16 (`input`'s dtype, which the
// contract gives every row tensor) and parameters of that dtype or float32, float32 statistics and parameter
// gradients, the last dimension of every tensor contiguous.
std::optional<std::string> fused_reason(const Tensor& input, std::initializer_list<NamedTensor> rows,
                                        std::initializer_list<NamedTensor> parameters,
                                        std::initializer_list<NamedTensor> float32_vectors) {
  if (auto reason = cuda_floating_reason("input", input)) return reason;
  for (const auto& [name, tensor] : rows)
    if (tensor != nullptr)
      if (auto reason = inner_contiguous_reason(name, *tensor)) return reason;
  for (const auto& [name, parameter] : parameters) {
    if (parameter == nullptr) continue;
    if (parameter->dtype() != input.dtype() && parameter->dtype() != DType::float32)
      return fmt::format("{} has dtype {}; supported: the input's ({}) or float32", name,
                         dtype_name(parameter->dtype()), dtype_name(input.dtype()));
    if (auto reason = inner_contiguous_reason(name, *parameter)) return reason;
  }
  for (const auto& [name, vector] : float32_vectors) {
    if (vector == nullptr) continue;
    if (auto reason = float32_reason(name, *vector)) return reason;
    if (auto reason = inner_contiguous_reason(name, *vector)) return reason;
  }
  return std::nullopt;
}

template <class Args>
std::optional<std::string> supports_forward(const Args& args) {
  const ForwardTensors t = forward_tensors(args);
  return fused_reason(t.input, {{"input", &t.input}, {"output", &t.output}, {"residual", t.residual}, {"sum", t.sum}},
                      {{"weight", t.weight}, {"bias", t.bias}}, {t.first_statistic, t.second_statistic});
}

template <class Args>
std::optional<std::string> supports_backward(const Args& args) {
  const BackwardTensors t = backward_tensors(args);
  return fused_reason(
      t.input,
      {{"input", &t.input},
       {"grad_output", &t.grad_output},
       {"grad_input", &t.grad_input},
       {"grad_residual", t.grad_residual}},
      {{"weight", t.weight}},
      {t.first_statistic, t.second_statistic, {"grad_weight", t.grad_weight}, {"grad_bias", t.grad_bias}});
}

template <class Args>
void run_forward(const Args& args) {
  constexpr bool kLayerNorm = std::is_same_v<Args, LayerNormForwardArgs>;
  const ForwardTensors t = forward_tensors(args);
  const int64_t rows = t.input.size(0), hidden = t.input.size(1);
  if (rows == 0) return;
  LaunchScope scope(t.op, t.input.device(), t.stream);
  visit_floating(t.input.dtype(), [&]<class T>(std::type_identity<T>) {
    const bool vectorized = hidden % kVectorElements<T> == 0 && rows_aligned<T>(t.input) && rows_aligned<T>(t.output) &&
                            optional_rows_aligned<T>(t.residual) && optional_rows_aligned<T>(t.sum) &&
                            parameter_aligned(t.weight) && parameter_aligned(t.bias);
    launch_forward<T, kLayerNorm>(
        NormForwardParams{.input = t.input.data(),
                          .input_stride = row_stride(t.input),
                          .residual = optional_data(t.residual),
                          .residual_stride = optional_row_stride(t.residual),
                          .sum = t.sum != nullptr ? t.sum->data() : nullptr,
                          .sum_stride = optional_row_stride(t.sum),
                          .output = t.output.data(),
                          .output_stride = row_stride(t.output),
                          .parameters = make_parameters(t.weight, t.bias, t.zero_centered),
                          .first_statistic = t.first_statistic.tensor->data_as<float>(),
                          .second_statistic = kLayerNorm ? t.second_statistic.tensor->data_as<float>() : nullptr,
                          .layout = RowLayout{.rows = rows, .hidden = hidden},
                          .epsilon = float(t.epsilon)},
        vectorized, scope);
  });
}

template <class Args>
void run_backward(const Args& args) {
  constexpr bool kLayerNorm = std::is_same_v<Args, LayerNormBackwardArgs>;
  const BackwardTensors t = backward_tensors(args);
  const int64_t rows = t.input.size(0), hidden = t.input.size(1);
  if (rows == 0) return;
  LaunchScope scope(t.op, t.input.device(), t.stream);
  visit_floating(t.input.dtype(), [&]<class T>(std::type_identity<T>) {
    const bool vectorized = hidden % kVectorElements<T> == 0 && rows_aligned<T>(t.input) &&
                            rows_aligned<T>(t.grad_output) && rows_aligned<T>(t.grad_input) &&
                            optional_rows_aligned<T>(t.grad_residual) && parameter_aligned(t.weight);
    launch_backward<T, kLayerNorm>(
        NormBackwardParams{.grad_output = t.grad_output.data(),
                           .grad_output_stride = row_stride(t.grad_output),
                           .input = t.input.data(),
                           .input_stride = row_stride(t.input),
                           .grad_input = t.grad_input.data(),
                           .grad_input_stride = row_stride(t.grad_input),
                           .grad_residual = optional_data(t.grad_residual),
                           .grad_residual_stride = optional_row_stride(t.grad_residual),
                           .parameters = make_parameters(t.weight, nullptr, t.zero_centered),
                           .first_statistic = t.first_statistic.tensor->data_as<float>(),
                           .second_statistic = kLayerNorm ? t.second_statistic.tensor->data_as<float>() : nullptr,
                           .weight_partials = nullptr,
                           .bias_partials = nullptr,
                           .layout = RowLayout{.rows = rows, .hidden = hidden}},
        vectorized, t.grad_weight, t.grad_bias, scope);
  });
}

}  // namespace

FLM_REGISTER_KERNEL(RmsNormForward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_forward<RmsNormForwardArgs>, &run_forward<RmsNormForwardArgs>,
                    "row group per row, row held in registers, 16-byte accesses; fp32 statistics");
FLM_REGISTER_KERNEL(RmsNormBackward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_backward<RmsNormBackwardArgs>, &run_backward<RmsNormBackwardArgs>,
                    "row groups over one wave, rows in registers; grad_weight from per-block partial sums");
FLM_REGISTER_KERNEL(LayerNormForward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_forward<LayerNormForwardArgs>, &run_forward<LayerNormForwardArgs>,
                    "row group per row, row held in registers, 16-byte accesses; two-pass fp32 mean and variance");
FLM_REGISTER_KERNEL(LayerNormBackward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_backward<LayerNormBackwardArgs>, &run_backward<LayerNormBackwardArgs>,
                    "row groups over one wave, rows in registers; grad_weight / grad_bias from per-block partial sums");

}  // namespace fast_llm::kernels::cuda
