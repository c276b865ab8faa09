// Fused CUDA cross_entropy_forward_backward (kernels/cross_entropy.h), variant "fused".
//
// One row of logits is split into `slices` contiguous parts, one block each, and the blocks of a row form a thread
// block cluster (Hopper), so the row's statistics meet in distributed shared memory instead of device memory:
//   1. each thread loads its part of the slice into registers (up to kCacheElements elements; 16-byte accesses when
//      the rows allow) and keeps an online (max, sum of exp(z - max)) in fp32;
//   2. the pairs are combined across the warp, the block and then the cluster, always in the same order (every
//      block reads the cluster's slices in rank order, so all of them hold the same bits);
//   3. lse = max + log(sum); the block holding the first slice writes the row's losses to a per-row buffer, and every
//      thread writes its gradient elements from the registers.
// A row is thus read once and the gradient written once (rows too long for the registers of a cluster of kMaxSlices
// blocks are read twice). The per-row losses are summed by a single block in a fixed order, in fp64, and added to
// the loss sums: no atomics, bitwise reproducible. The gradient may overwrite the logits (every read of an element
// happens before any write to the row: the label's logit is read before the first cluster barrier).
//
// z = logits * logits_scale_factor, then softcap * tanh(z / softcap) when a softcap is set. Rows whose label is
// negative are masked: no loss, zero gradient. A label not below vocab (an error the CPU reference reports; checking it
// here would need the labels on the host) is treated as masked rather than read out of bounds. The z-loss is on
// exactly when z_loss_sum is given. Logits and gradient share a floating dtype;
// labels are int64 with any stride; loss sums are float32 or float64 tensors of one element.
#include "fast_llm/kernels/cuda/op_helpers.cuh"

#include <cooperative_groups.h>

#include "fast_llm/kernels/cross_entropy.h"

namespace fast_llm::kernels::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kMaxThreads = 512;
constexpr int kMaxSlices = 8;        // the portable limit of a cluster
constexpr int kCacheElements = 32;   // logits per thread held in registers between the two passes
constexpr int kSumThreads = 1024;
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

// label_loss_sum += sum of row_losses, z_loss_sum += sum of row_z_losses: one block, fixed order, fp64.
template <class R>
__global__ void __launch_bounds__(kSumThreads)
    loss_sum_kernel(const float* row_losses, const float* row_z_losses, int64_t rows, R* label_loss_sum,
                    R* z_loss_sum) {
  __shared__ double scratch[32];
  double sum = 0.0;
  for (int64_t row = threadIdx.x; row < rows; row += blockDim.x) sum += double(row_losses[row]);
  sum = block_sum_to_thread0(sum, scratch);
  if (threadIdx.x == 0) *label_loss_sum += R(sum);
  if (row_z_losses == nullptr) return;
  __syncthreads();  // scratch is reused
  double z_sum = 0.0;
  for (int64_t row = threadIdx.x; row < rows; row += blockDim.x) z_sum += double(row_z_losses[row]);
  z_sum = block_sum_to_thread0(z_sum, scratch);
  if (threadIdx.x == 0) *z_loss_sum += R(z_sum);
}

std::optional<std::string> loss_sum_reason(std::string_view name, const Tensor& tensor) {
  if (auto reason = on_cuda_reason(name, tensor)) return reason;
  if (tensor.dtype() != DType::float32 && tensor.dtype() != DType::float64)
    return fmt::format("{} has dtype {}; supported: float32, float64", name, dtype_name(tensor.dtype()));
  return std::nullopt;
}

std::optional<std::string> supports_cross_entropy(const CrossEntropyArgs& args) {
  if (auto reason = on_cuda_reason("logits", args.logits)) return reason;
  if (auto reason = cuda_floating_reason("logits", args.logits)) return reason;
  if (auto reason = inner_contiguous_reason("logits", args.logits)) return reason;
  if (args.labels.dtype() != DType::int64)
    return fmt::format("labels has dtype {}; supported: int64", dtype_name(args.labels.dtype()));
  if (auto reason = loss_sum_reason("label_loss_sum", args.label_loss_sum)) return reason;
  if (args.z_loss_sum != nullptr) {
    if (auto reason = loss_sum_reason("z_loss_sum", *args.z_loss_sum)) return reason;
    if (args.z_loss_sum->dtype() != args.label_loss_sum.dtype())
      return fmt::format("z_loss_sum has dtype {}, label_loss_sum {}; they must match",
                         dtype_name(args.z_loss_sum->dtype()), dtype_name(args.label_loss_sum.dtype()));
  }
  if (args.grad_logits != nullptr) {
    if (auto reason = same_dtype_reason("grad_logits", *args.grad_logits, "logits", args.logits)) return reason;
    if (auto reason = inner_contiguous_reason("grad_logits", *args.grad_logits)) return reason;
  }
  if (args.logits.rank() == 2 && args.logits.size(1) >= (int64_t(1) << 31))
    return fmt::format("vocab {}; supported: below 2^31", args.logits.size(1));
  return std::nullopt;
}

void cross_entropy_fused(const CrossEntropyArgs& args) {
  constexpr const char* op = "cross_entropy_forward_backward";
  const Device device = args.logits.device();
  check_rank(op, "logits", args.logits, 2, "(tokens, vocab)", device);
  const int64_t rows = args.logits.size(0), vocab = args.logits.size(1);
  FLM_CHECK(vocab > 0, op, "logits has shape {}: vocab must be positive", args.logits.shape().str());
  check_shape(op, "labels", args.labels, Shape{rows}, device);
  check_on_device(op, "label_loss_sum", args.label_loss_sum, device);
  FLM_CHECK(args.label_loss_sum.numel() == 1, op, "label_loss_sum has shape {}, expected one element",
            args.label_loss_sum.shape().str());
  if (args.z_loss_sum != nullptr) {
    check_on_device(op, "z_loss_sum", *args.z_loss_sum, device);
    FLM_CHECK(args.z_loss_sum->numel() == 1, op, "z_loss_sum has shape {}, expected one element",
              args.z_loss_sum->shape().str());
  }
  if (args.grad_logits != nullptr) check_shape(op, "grad_logits", *args.grad_logits, args.logits.shape(), device);
  FLM_CHECK(args.z_loss_sum != nullptr || args.z_loss_weight == 0.0, op,
            "z_loss_weight is {} but no z_loss_sum is given", args.z_loss_weight);
  FLM_CHECK(!args.softcap || *args.softcap > 0.0, op, "softcap is {}, expected a positive number",
            args.softcap.value_or(0.0));
  if (rows == 0) return;

  LaunchScope scope(op, device, args.stream);
  Tensor row_losses = Tensor::empty(Shape{rows}, DType::float32, device, scope.tensor_stream());
  Tensor row_z_losses;
  if (args.z_loss_sum != nullptr)
    row_z_losses = Tensor::empty(Shape{rows}, DType::float32, device, scope.tensor_stream());

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
    FLM_CHECK(rows * slices < (int64_t(1) << 31), op, "{} rows are too many for one launch", rows);
    const CrossEntropyParams params{
        .logits = args.logits.data(),
        .logits_stride = row_stride(args.logits),
        .labels = args.labels.data_as<int64_t>(),
        .label_stride = args.labels.stride(0),
        .grad = args.grad_logits != nullptr ? args.grad_logits->data() : nullptr,
        .grad_stride = args.grad_logits != nullptr ? row_stride(*args.grad_logits) : 0,
        .row_losses = row_losses.data_as<float>(),
        .row_z_losses = args.z_loss_sum != nullptr ? row_z_losses.data_as<float>() : nullptr,
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
    scope.check_launch();
  });

  const float* z_losses = args.z_loss_sum != nullptr ? row_z_losses.data_as<float>() : nullptr;
  if (args.label_loss_sum.dtype() == DType::float64)
    loss_sum_kernel<double><<<1, kSumThreads, 0, scope.stream()>>>(
        row_losses.data_as<float>(), z_losses, rows, args.label_loss_sum.data_as<double>(),
        args.z_loss_sum != nullptr ? args.z_loss_sum->data_as<double>() : nullptr);
  else
    loss_sum_kernel<float><<<1, kSumThreads, 0, scope.stream()>>>(
        row_losses.data_as<float>(), z_losses, rows, args.label_loss_sum.data_as<float>(),
        args.z_loss_sum != nullptr ? args.z_loss_sum->data_as<float>() : nullptr);
  scope.check_launch();
}

}  // namespace

FLM_REGISTER_KERNEL(CrossEntropyForwardBackward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_cross_entropy, &cross_entropy_fused,
                    "one pass per row: a cluster of blocks holds the row in registers, online fp32 max / sum; "
                    "per-row losses summed in a fixed order");

}  // namespace fast_llm::kernels::cuda
