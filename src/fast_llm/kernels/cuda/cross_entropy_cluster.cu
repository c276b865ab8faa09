// CUDA cross_entropy_forward_backward (kernels/cross_entropy.h), variant "cluster": the row held in registers.
//
// One row of logits is split into `slices` contiguous parts, one block each, and the blocks of a row form a thread
// block cluster (Hopper), so the row's statistics meet in distributed shared memory instead of device memory:
//   1. each thread loads its part of the slice into registers (up to kCacheElements elements; 16-byte accesses when
//      the rows allow) and keeps an online (max, sum of exp(z - max)) in fp32;
//   2. the pairs are combined across the warp, the block and then the cluster, always in the same order (every
//      block reads the cluster's slices in rank order, so all of them hold the same bits);
//   3. lse = max + log(sum); the block holding the first slice writes the row's losses to the per-row buffers of
//      cross_entropy.cuh, and every thread writes its gradient elements from the registers.
// A row is thus read once and the gradient written once (rows too long for the registers of a cluster of kMaxSlices
// blocks are read twice). The gradient may overwrite the logits (every read of an element happens before any write to
// the row: the label's logit is read before the first cluster barrier). Conventions (masking, z-loss, scale, softcap,
// dtypes): cross_entropy.cuh.
//
// Each block has one slice of one row in flight and then reduces with nothing in flight, at up to 64 registers per
// thread (two blocks of 512 per SM): the "fused" variant (cross_entropy.cu) keeps the next row loading meanwhile.
#include "fast_llm/kernels/cuda/cross_entropy.cuh"

#include <cooperative_groups.h>

namespace fast_llm::kernels::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kMaxThreads = 512;
constexpr int kMaxSlices = 8;        // the portable limit of a cluster
constexpr int kCacheElements = 32;   // logits per thread held in registers between the two passes
constexpr float kLog2e = 1.4426950408889634f;

struct CrossEntropyParams {
  const void* logits;  // (rows, vocab) T
  int64_t logits_stride;
  const int64_t* labels;  // (rows)
  int64_t label_stride;
  void* grad;  // (rows, vocab) T, or nullptr
  int64_t grad_stride;
  float* row_losses;    // (rows): lse - z[label], 0 for masked rows
  float* row_z_losses;  // (rows): lse^2, or nullptr
  int64_t rows;
  int64_t vocab;
  int slices;
  bool cached;
  float label_weight;
  float z_loss_weight;
  float logits_scale;
  float softcap;  // 0: none
};

__device__ __forceinline__ float transform(const CrossEntropyParams& p, float x) {
  const float z = x * p.logits_scale;
  return p.softcap > 0.0f ? p.softcap * tanhf(z / p.softcap) : z;
}

// (max, sum of exp(z - max)) of the union of two sets. Symmetric to the bit (the products are rounded on their own
// before the addition), so a butterfly leaves the same pair in every lane.
__device__ __forceinline__ float2 combine(float2 a, float2 b) {
  const float m = fmaxf(a.x, b.x);
  if (m == -INFINITY) return make_float2(m, 0.0f);
  return make_float2(m, __fadd_rn(__fmul_rn(a.y, exp2f((a.x - m) * kLog2e)), __fmul_rn(b.y, exp2f((b.x - m) * kLog2e))));
}

// Adds kVec values to a running (max, sum) pair.
template <int kVec>
__device__ __forceinline__ void accumulate(float2& stats, const float (&z)[kVec]) {
  float vector_max = z[0];
#pragma unroll
  for (int i = 1; i < kVec; ++i) vector_max = fmaxf(vector_max, z[i]);
  if (vector_max == -INFINITY) return;  // adds nothing (and -inf - -inf would be NaN)
  const float m = fmaxf(stats.x, vector_max);
  float sum = stats.y * exp2f((stats.x - m) * kLog2e);
#pragma unroll
  for (int i = 0; i < kVec; ++i) sum += exp2f((z[i] - m) * kLog2e);
  stats = make_float2(m, sum);
}

// d/dlogit of label_weight (lse - z[label]) + z_loss_weight lse^2 for kVec logits starting at `column`.
template <int kVec>
__device__ __forceinline__ void gradient(const CrossEntropyParams& p, const float (&x)[kVec], int64_t column,
                                         int64_t label, float max, float inverse_sum, float coefficient,
                                         float (&result)[kVec]) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const float scaled = x[i] * p.logits_scale;
    float z = scaled, chain = p.logits_scale;
    if (p.softcap > 0.0f) {
      const float t = tanhf(scaled / p.softcap);
      z = p.softcap * t;
      chain *= 1.0f - t * t;
    }
    const float probability = exp2f((z - max) * kLog2e) * inverse_sum;
    float dz = coefficient * probability;
    if (column + i == label) dz -= p.label_weight;
    result[i] = dz * chain;
  }
}

template <class T, int kVec>
__global__ void __launch_bounds__(kMaxThreads) cross_entropy_kernel(const CrossEntropyParams p) {
  constexpr int kCache = kCacheElements / kVec;  // vectors per thread
  __shared__ float2 warp_stats[kMaxThreads / 32];
  __shared__ float2 slice_stats;
  cg::cluster_group cluster = cg::this_cluster();
  const int slice = int(cluster.block_rank());
  const int64_t row = int64_t(blockIdx.x) / p.slices;
  const int threads = int(blockDim.x), thread = int(threadIdx.x);
  const int vectors = int(p.vocab / kVec);
  const int per_slice = (vectors + p.slices - 1) / p.slices;
  const int begin = slice * per_slice, end = begin + per_slice < vectors ? begin + per_slice : vectors;
  const T* logits = static_cast<const T*>(p.logits) + row * p.logits_stride;
  T* grad = p.grad != nullptr ? static_cast<T*>(p.grad) + row * p.grad_stride : nullptr;
  const int64_t label = p.labels[row * p.label_stride];

  if (label < 0 || label >= p.vocab) {
    // Masked: every block of the cluster sees the same label, so none of them reaches a cluster barrier.
    if (grad != nullptr) {
      float zeros[kVec];
#pragma unroll
      for (int i = 0; i < kVec; ++i) zeros[i] = 0.0f;
      for (int v = begin + thread; v < end; v += threads) store_floats<kVec>(grad + int64_t(v) * kVec, zeros);
    }
    if (slice == 0 && thread == 0) {
      p.row_losses[row] = 0.0f;
      if (p.row_z_losses != nullptr) p.row_z_losses[row] = 0.0f;
    }
    return;
  }
  // Read before the first cluster barrier: no block writes the gradient (possibly over the logits) before it.
  const float label_logit = slice == 0 && thread == 0 ? transform(p, load(logits[label])) : 0.0f;

  // 1. Per-thread statistics.
  Vector<T, kVec> cache[kCache];
  float2 stats = make_float2(-INFINITY, 0.0f);
  if (p.cached) {
#pragma unroll
    for (int k = 0; k < kCache; ++k) {
      const int v = begin + thread + k * threads;
      if (v < end) cache[k] = load_pack<kVec>(logits + int64_t(v) * kVec);
    }
#pragma unroll
    for (int k = 0; k < kCache; ++k) {
      const int v = begin + thread + k * threads;
      if (v >= end) continue;
      float z[kVec];
      unpack_floats(cache[k], z);
#pragma unroll
      for (int i = 0; i < kVec; ++i) z[i] = transform(p, z[i]);
      accumulate(stats, z);
    }
  } else {
    for (int v = begin + thread; v < end; v += threads) {
      float z[kVec];
      load_floats<kVec>(logits + int64_t(v) * kVec, z);
#pragma unroll
      for (int i = 0; i < kVec; ++i) z[i] = transform(p, z[i]);
      accumulate(stats, z);
    }
  }

  // 2. Warp, block, cluster, each in a fixed order.
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float2 other = make_float2(__shfl_xor_sync(0xffffffffu, stats.x, offset),
                                     __shfl_xor_sync(0xffffffffu, stats.y, offset));
    stats = combine(stats, other);
  }
  if (thread % 32 == 0) warp_stats[thread / 32] = stats;
  __syncthreads();
  float2 block_stats = make_float2(-INFINITY, 0.0f);
  for (int w = 0; w < threads / 32; ++w) block_stats = combine(block_stats, warp_stats[w]);
  if (thread == 0) slice_stats = block_stats;
  cluster.sync();
  float2 row_stats = make_float2(-INFINITY, 0.0f);
  for (int r = 0; r < p.slices; ++r) row_stats = combine(row_stats, *cluster.map_shared_rank(&slice_stats, r));
  cluster.sync();  // no block leaves (or reuses its shared memory) while another still reads it

  // 3. Losses and gradient.
  const float lse = row_stats.x + logf(row_stats.y);
  if (slice == 0 && thread == 0) {
    p.row_losses[row] = lse - label_logit;
    if (p.row_z_losses != nullptr) p.row_z_losses[row] = lse * lse;
  }
  if (grad == nullptr) return;
  const float inverse_sum = 1.0f / row_stats.y;
  const float coefficient = p.label_weight + 2.0f * p.z_loss_weight * lse;
  if (p.cached) {
#pragma unroll
    for (int k = 0; k < kCache; ++k) {
      const int v = begin + thread + k * threads;
      if (v >= end) continue;
      float x[kVec], result[kVec];
      unpack_floats(cache[k], x);
      gradient(p, x, int64_t(v) * kVec, label, row_stats.x, inverse_sum, coefficient, result);
      store_floats<kVec>(grad + int64_t(v) * kVec, result);
    }
  } else {
    for (int v = begin + thread; v < end; v += threads) {
      float x[kVec], result[kVec];
      load_floats<kVec>(logits + int64_t(v) * kVec, x);
      gradient(p, x, int64_t(v) * kVec, label, row_stats.x, inverse_sum, coefficient, result);
      store_floats<kVec>(grad + int64_t(v) * kVec, result);
    }
  }
}

void launch_cluster(const CrossEntropyArgs& args, const cross_entropy::RowLosses& losses,
                    const LaunchScope& scope) {
  const int64_t rows = args.logits.size(0), vocab = args.logits.size(1);
  visit_cuda_floating(args.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    constexpr int kVec = kVectorElements<T>;
    const bool vectorized = vocab % kVec == 0 && rows_aligned<T>(args.logits) &&
                            (args.grad_logits == nullptr || rows_aligned<T>(*args.grad_logits));
    const int64_t vectors = vectorized ? vocab / kVec : vocab;
    const int64_t cache = kCacheElements / (vectorized ? kVec : 1);
    const int64_t threads_needed = round_up(ceil_div(vectors, cache), 32);
    const int threads = int(threads_needed < 32 ? 32 : threads_needed > kMaxThreads ? kMaxThreads : threads_needed);
    int64_t slices = ceil_div(vectors, threads * cache);
    const bool cached = slices <= kMaxSlices;
    if (!cached) slices = kMaxSlices;
    FLM_CHECK(rows * slices < (int64_t(1) << 31), "cross_entropy_forward_backward",
              "{} rows are too many for one launch", rows);
    const CrossEntropyParams params{
        .logits = args.logits.data(),
        .logits_stride = row_stride(args.logits),
        .labels = args.labels.data_as<int64_t>(),
        .label_stride = args.labels.stride(0),
        .grad = args.grad_logits != nullptr ? args.grad_logits->data() : nullptr,
        .grad_stride = args.grad_logits != nullptr ? row_stride(*args.grad_logits) : 0,
        .row_losses = losses.label,
        .row_z_losses = losses.z,
        .rows = rows,
        .vocab = vocab,
        .slices = int(slices),
        .cached = cached,
        .label_weight = float(args.label_weight),
        .z_loss_weight = float(args.z_loss_weight),
        .logits_scale = float(args.logits_scale_factor),
        .softcap = args.softcap ? float(*args.softcap) : 0.0f};

    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(rows * slices));
    config.blockDim = dim3(unsigned(threads));
    config.dynamicSmemBytes = 0;
    config.stream = scope.stream();
    cudaLaunchAttribute attributes[1];
    attributes[0].id = cudaLaunchAttributeClusterDimension;
    attributes[0].val.clusterDim.x = unsigned(slices);
    attributes[0].val.clusterDim.y = 1;
    attributes[0].val.clusterDim.z = 1;
    config.attrs = attributes;
    config.numAttrs = 1;
    if (vectorized)
      FLM_CUDA_CHECK(cudaLaunchKernelEx(&config, cross_entropy_kernel<T, kVec>, params));
    else
      FLM_CUDA_CHECK(cudaLaunchKernelEx(&config, cross_entropy_kernel<T, 1>, params));
  });
}

void cross_entropy_cluster(const CrossEntropyArgs& args) { cross_entropy::cross_entropy_steps(args, &launch_cluster); }

}  // namespace

FLM_REGISTER_KERNEL(CrossEntropyForwardBackward, DeviceType::cuda, "cluster", /*priority=*/50, KernelKind::optimized,
                    &cross_entropy::arguments_reason, &cross_entropy_cluster,
                    "one pass per row: a cluster of blocks holds the row in registers, online fp32 max / sum; "
                    "per-row losses summed in a fixed order");

}  // namespace fast_llm::kernels::cuda
