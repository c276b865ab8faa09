// Fused CUDA cross_entropy_forward_backward (kernels/cross_entropy.h), variant "fused": logits of float32, bfloat16 or
// float16 (last dimension contiguous, free row strides); the gradient may be the logits tensor itself. Each row is
// brought once into the shared memory of a thread block cluster by bulk copies (TMA), reduced there with an online
// (max, sum) combined in a fixed order, and its gradient of every loss (label, z-loss, the other losses' row weights,
// the distillation term over the teacher's fp32 slice staged beside it) written once; rows too long for the cluster are
// read twice ("direct"). Masked rows (label < 0 or >= vocab) are neither read nor counted. Math in fp32; bitwise
// reproducible. Layout and numerics: at the kernel and in docs/architecture.md ("Head loss data path").
#include "fast_llm/kernels/cuda/common.cuh"
#include "fast_llm/kernels/cuda/row_loss_sums.cuh"

#include <cooperative_groups.h>

#include <optional>
#include <string>
#include <type_traits>

#include "fast_llm/kernels/cross_entropy.h"

namespace fast_llm::kernels::cuda {
namespace {

namespace cg = cooperative_groups;

// 512 threads per block keep the special-function unit busy (two exp2 per logit): a thread has kGroupChunks loads and
// 32 exp2 in flight per group.
constexpr int kMaxThreads = 512;
constexpr int kMaxClusterBlocks = 8;  // the portable cluster size
constexpr int kStages = 2;            // this row's slice and the next row's
constexpr int kWavesPerSlot = 4;      // clusters launched per cluster that fits at once (see the launcher)
constexpr int kGroupChunks = 4;       // chunks a thread loads before it uses the first; one rescale per group
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// What the row kernel writes for each row: lse - z[label] (0 for a masked row), and lse^2 (0 for a masked row).
struct RowLosses {
  float* label;         // (rows)
  float* z;             // (rows), or nullptr without z-loss
  float* distillation;  // (rows) the distillation term's, or nullptr without it
};

struct FusedParams {
  const void* logits;  // (rows, vocab) T
  int64_t logits_stride;
  const int64_t* labels;  // (rows)
  int64_t label_stride;
  void* grad;  // (rows, vocab) T, or nullptr
  int64_t grad_stride;
  float* row_losses;    // (rows)
  float* row_z_losses;  // (rows), or nullptr
  const float* row_weights;  // (rows) added to label_weight, or nullptr
  int64_t row_weight_stride;
  // The distillation term (kDistillation kernels only):
  const float* teacher;  // (rows, vocab) fp32, last dimension contiguous
  int64_t teacher_stride;
  float* row_distillation_losses;  // (rows)
  int teacher_stage_floats;        // floats of a stage's teacher part (a multiple of 4), after the logits' part
  int distillation_type;           // DistillationLossType
  float teacher_scale_log2e;       // logits_scale / temperature log2(e)
  float distillation_weight;
  int64_t rows;
  int64_t vocab;
  int blocks_per_row;  // the cluster size
  int slice_chunks;    // 16-byte chunks of a block's slice (the last slice may be shorter); a stage holds this many
  bool vector_stores;  // the gradient's rows start at the same offsets from 16-byte boundaries as the logits'
  float label_weight;
  float z_loss_weight;
  float logits_scale;
  float scale_log2e;         // logits_scale log2(e)
  float scale_over_softcap;  // logits_scale / softcap (kSoftcap kernels)
  float softcap_log2e;       // softcap log2(e) (kSoftcap kernels)
};

// 2^x on the special-function unit, subnormal results flushed to zero: one instruction, where exp2f's subnormal
// handling adds a compare and two multiplies.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---------------------------------------------------------------------------------------------------------------------
// Bulk copies into shared memory, completed on a transaction barrier (mbarrier) per stage.

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return uint32_t(__cvta_generic_to_shared(pointer));
}

// A barrier whose phase completes once its one arrival (the copy's issuer) and the copy's bytes are in.
__device__ __forceinline__ void init_stage_barrier(uint64_t* barrier) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(shared_address(barrier)) : "memory");
}

// Makes initialised barriers visible to the bulk-copy unit (the async proxy); a __syncthreads must follow.
__device__ __forceinline__ void fence_stage_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Arrives on `barrier` (its one arrival) announcing that copies of `bytes` in all will complete its current phase.
__device__ __forceinline__ void expect_bytes(uint64_t* barrier, uint32_t bytes) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n"
               ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
}

// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from device to this block's shared memory,
// counted on `barrier` (announced by expect_bytes).
__device__ __forceinline__ void copy_bytes(void* destination, const void* source, uint32_t bytes, uint64_t* barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(shared_address(destination)), "l"(__cvta_generic_to_global(source)), "r"(bytes),
               "r"(shared_address(barrier))
               : "memory");
}

// Waits until the phase of `barrier` with parity `parity` has completed (the copy's bytes are visible).
__device__ __forceinline__ void wait_stage(uint64_t* barrier, uint32_t parity) {
  const uint32_t barrier_address = shared_address(barrier);
  uint32_t complete = 0;
  while (complete == 0)
    asm volatile("{\n.reg .pred complete;\nmbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, complete;\n}\n"
                 : "=r"(complete)
                 : "r"(barrier_address), "r"(parity)
                 : "memory");
}

// ---------------------------------------------------------------------------------------------------------------------
// Row statistics: (max, sum of 2^(y - max)) pairs of y = z log2(e).

// Adds kCount values to a running pair, with one rescale for all of them.
template <int kCount>
__device__ __forceinline__ void accumulate(float2& stats, const float (&y)[kCount]) {
  float group_max = y[0];
#pragma unroll
  for (int i = 1; i < kCount; ++i) group_max = fmaxf(group_max, y[i]);
  if (group_max > stats.x) {
    stats.y *= fast_exp2(stats.x - group_max);  // 0 while the running max is -inf
    stats.x = group_max;
  }
  if (stats.x == -INFINITY) return;  // every value so far is -inf: they add nothing (and -inf - -inf is NaN)
#pragma unroll
  for (int i = 0; i < kCount; ++i) stats.y += fast_exp2(y[i] - stats.x);
}

// The pair of the union of two sets. Symmetric to the bit (each product is rounded on its own before the addition),
// so a butterfly leaves the same pair in every lane.
__device__ __forceinline__ float2 combine(float2 a, float2 b) {
  const float m = fmaxf(a.x, b.x);
  if (m == -INFINITY) return make_float2(m, 0.0f);
  return make_float2(m, __fadd_rn(__fmul_rn(a.y, fast_exp2(a.x - m)), __fmul_rn(b.y, fast_exp2(b.x - m))));
}

// With the distillation term a thread keeps, over the same values, the model's pair (max, sum of 2^(y - max)), the
// teacher's pair over u = t log2(e) (t = teacher logit * s / temperature), and one weighted sum of d (the loss type's
// per-logit value, below) whose weights are the teacher's 2^(u - teacher max) for cross_entropy and forward_kl (so
// weighted / teacher sum = E_p[d]) and the model's 2^(y - max) for reverse_kl (weighted / sum = E_q[d]):
//   cross_entropy  d = y       loss = lse_z - ln2 E_p[y]
//   forward_kl     d = u - y   loss = ln2 E_p[u - y] - lse_t + lse_z
//   reverse_kl     d = y - u   loss = ln2 E_q[y - u] - lse_z + lse_t
// Values outside the row are -inf in y and u and 0 in d: they add nothing.
struct DistillationStats {
  float max, sum;                  // the model's pair
  float teacher_max, teacher_sum;  // the teacher's pair
  float weighted;                  // sum of d, weighted as above
};

__device__ __forceinline__ float2 empty_stats(float2) { return make_float2(-INFINITY, 0.0f); }
__device__ __forceinline__ DistillationStats empty_stats(DistillationStats) {
  return DistillationStats{-INFINITY, 0.0f, -INFINITY, 0.0f, 0.0f};
}

// The union of two sets of the distillation statistics; symmetric to the bit, as combine.
__device__ __forceinline__ DistillationStats combine(const DistillationStats& a, const DistillationStats& b,
                                                     bool reverse) {
  const float m = fmaxf(a.max, b.max), tm = fmaxf(a.teacher_max, b.teacher_max);
  if (m == -INFINITY) return empty_stats(a);  // both empty (the model's and the teacher's values come together)
  const float a_scale = fast_exp2(a.max - m), b_scale = fast_exp2(b.max - m);
  const float a_teacher = fast_exp2(a.teacher_max - tm), b_teacher = fast_exp2(b.teacher_max - tm);
  const float a_weight = reverse ? a_scale : a_teacher, b_weight = reverse ? b_scale : b_teacher;
  return DistillationStats{m, __fadd_rn(__fmul_rn(a.sum, a_scale), __fmul_rn(b.sum, b_scale)), tm,
                           __fadd_rn(__fmul_rn(a.teacher_sum, a_teacher), __fmul_rn(b.teacher_sum, b_teacher)),
                           __fadd_rn(__fmul_rn(a.weighted, a_weight), __fmul_rn(b.weighted, b_weight))};
}

// Adds kCount logits to a running set, with one rescale of each pair for all of them: y the model's values, u the
// teacher's, d = d_y y + d_u u (the loss type's coefficients).
template <int kCount>
__device__ __forceinline__ void accumulate(DistillationStats& stats, const float (&y)[kCount], const float (&u)[kCount],
                                           float d_y, float d_u, bool reverse) {
  float group_max = y[0], group_teacher_max = u[0];
#pragma unroll
  for (int i = 1; i < kCount; ++i) {
    group_max = fmaxf(group_max, y[i]);
    group_teacher_max = fmaxf(group_teacher_max, u[i]);
  }
  if (group_max > stats.max) {
    const float rescale = fast_exp2(stats.max - group_max);  // 0 while the running max is -inf
    stats.sum *= rescale;
    if (reverse) stats.weighted *= rescale;
    stats.max = group_max;
  }
  if (group_teacher_max > stats.teacher_max) {
    const float rescale = fast_exp2(stats.teacher_max - group_teacher_max);
    stats.teacher_sum *= rescale;
    if (!reverse) stats.weighted *= rescale;
    stats.teacher_max = group_teacher_max;
  }
  if (stats.max == -INFINITY) return;  // every value so far is outside the row (and -inf - -inf is NaN)
#pragma unroll
  for (int i = 0; i < kCount; ++i) {
    const float d = y[i] == -INFINITY ? 0.0f : fmaf(d_u, u[i], d_y * y[i]);
    const float model_weight = fast_exp2(y[i] - stats.max), teacher_weight = fast_exp2(u[i] - stats.teacher_max);
    stats.sum += model_weight;
    stats.teacher_sum += teacher_weight;
    stats.weighted = fmaf(reverse ? model_weight : teacher_weight, d, stats.weighted);
  }
}

__device__ __forceinline__ float2 shuffle_xor(float2 stats, int offset) {
  return make_float2(__shfl_xor_sync(0xffffffffu, stats.x, offset), __shfl_xor_sync(0xffffffffu, stats.y, offset));
}
__device__ __forceinline__ DistillationStats shuffle_xor(const DistillationStats& stats, int offset) {
  return DistillationStats{__shfl_xor_sync(0xffffffffu, stats.max, offset),
                           __shfl_xor_sync(0xffffffffu, stats.sum, offset),
                           __shfl_xor_sync(0xffffffffu, stats.teacher_max, offset),
                           __shfl_xor_sync(0xffffffffu, stats.teacher_sum, offset),
                           __shfl_xor_sync(0xffffffffu, stats.weighted, offset)};
}
__device__ __forceinline__ float2 shuffle(float2 stats, int lane) {
  return make_float2(__shfl_sync(0xffffffffu, stats.x, lane), __shfl_sync(0xffffffffu, stats.y, lane));
}
__device__ __forceinline__ DistillationStats shuffle(const DistillationStats& stats, int lane) {
  return DistillationStats{__shfl_sync(0xffffffffu, stats.max, lane), __shfl_sync(0xffffffffu, stats.sum, lane),
                           __shfl_sync(0xffffffffu, stats.teacher_max, lane),
                           __shfl_sync(0xffffffffu, stats.teacher_sum, lane),
                           __shfl_sync(0xffffffffu, stats.weighted, lane)};
}

// The reductions below take the statistics (float2 pairs, or DistillationStats) and their union, `unite`.
template <class Stats, class Unite>
__device__ __forceinline__ Stats warp_combine(Stats stats, const Unite& unite) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) stats = unite(stats, shuffle_xor(stats, offset));
  return stats;
}

// The block's statistics, the same bits in every thread: a butterfly across each warp, then one across the warps'.
// `warp_stats` (one per warp) must not be written again before the block synchronises.
template <class Stats, class Unite>
__device__ __forceinline__ Stats block_combine(Stats stats, Stats* warp_stats, const Unite& unite) {
  stats = warp_combine(stats, unite);
  const int warps = int(blockDim.x) / 32, lane = int(threadIdx.x) % 32;
  if (warps == 1) return stats;
  if (lane == 0) warp_stats[threadIdx.x / 32] = stats;
  __syncthreads();
  return warp_combine(lane < warps ? warp_stats[lane] : empty_stats(stats), unite);
}

// The row's statistics from the cluster's blocks', combined in rank order by every warp (the same bits in every
// block). `slot` is this block's statistics in shared memory, read by the other blocks after the cluster barrier: a
// slot is written again only after a later cluster barrier, which every block reaches after its reads, so callers
// alternate two.
template <class Stats, class Unite>
__device__ __forceinline__ Stats cluster_combine(Stats block_stats, Stats* slot, int blocks, const Unite& unite) {
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) *slot = block_stats;
  cluster.sync();
  const int lane = int(threadIdx.x) % 32;
  const Stats remote = lane < blocks ? *cluster.map_shared_rank(slot, lane) : empty_stats(block_stats);
  Stats row = empty_stats(block_stats);
  for (int rank = 0; rank < blocks; ++rank) row = unite(row, shuffle(remote, rank));
  return row;
}

// ---------------------------------------------------------------------------------------------------------------------
// A logit x in the units of the statistics, y = z log2(e), and the gradient of the row's loss with respect to x.

template <bool kSoftcap>
struct LogitMath {
  float logits_scale, scale_log2e, scale_over_softcap, softcap_log2e, label_weight, z_loss_weight;
  float teacher_scale_log2e, distillation_weight;
  bool reverse;  // reverse_kl distillation
  // Of the current row (start_row):
  float lse_log2 = 0.0f;     // log2 of sum 2^y
  float coefficient = 0.0f;  // d loss / d lse = row_label_weight + 2 z_loss_weight lse
  float row_label_weight = 0.0f;  // label_weight + the row's gradient weight
  float coefficient_scale = 0.0f, label_weight_scale = 0.0f;
  // Of the current row's distillation term (start_distillation):
  float teacher_lse_log2 = 0.0f;
  float distilled_coefficient = 0.0f;  // coefficient + distillation_weight (cross_entropy, forward_kl)
  float reverse_offset = 0.0f;         // lse_t - lse_z - the row's loss (reverse_kl)

  __device__ explicit LogitMath(const FusedParams& p)
      : logits_scale(p.logits_scale),
        scale_log2e(p.scale_log2e),
        scale_over_softcap(p.scale_over_softcap),
        softcap_log2e(p.softcap_log2e),
        label_weight(p.label_weight),
        z_loss_weight(p.z_loss_weight),
        teacher_scale_log2e(p.teacher_scale_log2e),
        distillation_weight(p.distillation_weight),
        reverse(p.distillation_type == int(DistillationLossType::reverse_kl)) {}

  // A teacher logit in the units of the statistics: u = t log2(e), t = teacher * logits_scale / temperature.
  __device__ __forceinline__ float u(float teacher) const { return teacher * teacher_scale_log2e; }

  __device__ __forceinline__ float y(float x) const {
    if constexpr (kSoftcap)
      return softcap_log2e * tanhf(x * scale_over_softcap);
    else
      return x * scale_log2e;
  }

  // `row_weight`: the row's gradient weight added to label_weight (0 without row weights).
  __device__ __forceinline__ void start_row(float row_lse_log2, float row_weight) {
    lse_log2 = row_lse_log2;
    row_label_weight = label_weight + row_weight;
    coefficient = row_label_weight + 2.0f * z_loss_weight * (row_lse_log2 * kLn2);
    coefficient_scale = coefficient * logits_scale;
    label_weight_scale = row_label_weight * logits_scale;
  }

  // d/dx [w (lse - z[label]) + z_loss_weight lse^2] = (coefficient softmax - w [label]) dz/dx, w = row_label_weight,
  // softmax = 2^(y - lse_log2), dz/dx = logits_scale, times 1 - tanh^2 with a softcap.
  __device__ __forceinline__ float gradient(float x, bool is_label) const {
    if constexpr (kSoftcap) {
      const float t = tanhf(x * scale_over_softcap);
      const float softmax = fast_exp2(fmaf(softcap_log2e, t, -lse_log2));
      return (coefficient * softmax - (is_label ? row_label_weight : 0.0f)) * (logits_scale * (1.0f - t * t));
    } else {
      const float softmax = fast_exp2(fmaf(x, scale_log2e, -lse_log2));
      return fmaf(softmax, coefficient_scale, is_label ? -label_weight_scale : 0.0f);
    }
  }

  // After start_row, for the distillation term: the teacher's log2 of sum 2^u and the row's distillation loss.
  __device__ __forceinline__ void start_distillation(float row_teacher_lse_log2, float row_loss) {
    teacher_lse_log2 = row_teacher_lse_log2;
    distilled_coefficient = coefficient + distillation_weight;
    reverse_offset = (row_teacher_lse_log2 - lse_log2) * kLn2 - row_loss;
  }

  // The gradient above plus distillation_weight times the distillation's d/dz (q = softmax, p = the teacher's):
  //   cross_entropy, forward_kl   q - p
  //   reverse_kl                  q (log q - log p - loss) = q ((y - u) ln 2 + lse_t - lse_z - loss)
  // times dz/dx. `teacher` is the teacher's logit of the same column.
  __device__ __forceinline__ float distillation_gradient(float x, float teacher, bool is_label) const {
    float y, dz_dx;
    if constexpr (kSoftcap) {
      const float t = tanhf(x * scale_over_softcap);
      y = softcap_log2e * t;
      dz_dx = logits_scale * (1.0f - t * t);
    } else {
      y = x * scale_log2e;
      dz_dx = logits_scale;
    }
    const float softmax = fast_exp2(y - lse_log2), u_value = u(teacher);
    float gradient_z;
    if (reverse)
      gradient_z = softmax * fmaf(distillation_weight, fmaf(y - u_value, kLn2, reverse_offset), coefficient);
    else
      gradient_z = fmaf(distilled_coefficient, softmax, -distillation_weight * fast_exp2(u_value - teacher_lse_log2));
    if (is_label) gradient_z -= row_label_weight;
    return gradient_z * dz_dx;
  }
};

// ---------------------------------------------------------------------------------------------------------------------
// A block's slice of a row: its chunks thread, thread + blockDim.x, ... of `source` (shared or device memory).

// Where a row's window lies and which of its chunks are this block's.
struct RowSlice {
  int lead;                  // elements of the window before the row's first logit
  int first;                 // this block's first chunk, counted from the window's start
  int count;                 // this block's chunks
  int full_begin, full_end;  // this block's chunks [full_begin, full_end) (counted from `first`) hold only logits
};

template <class T>
__device__ __forceinline__ RowSlice row_slice(const FusedParams& p, int64_t row, int rank) {
  constexpr int kVec = int(16 / sizeof(T));
  const T* start = static_cast<const T*>(p.logits) + row * p.logits_stride;
  RowSlice slice;
  slice.lead = int(reinterpret_cast<uintptr_t>(start) % 16 / sizeof(T));
  const int64_t end = slice.lead + p.vocab;  // the window's position one past the row's last logit
  const int chunks = int((end + kVec - 1) / kVec);
  slice.first = min(rank * p.slice_chunks, chunks);
  slice.count = min(p.slice_chunks, chunks - slice.first);
  slice.full_begin = (slice.lead > 0 ? 1 : 0) - slice.first;
  slice.full_end = int(end / kVec) - slice.first;
  return slice;
}

// The row's element index of element i of chunk j of the slice (outside [0, vocab): not the row's).
template <int kVec>
__device__ __forceinline__ int64_t element_of(const RowSlice& slice, int j, int i) {
  return int64_t(slice.first + j) * kVec + i - slice.lead;
}

__device__ __forceinline__ bool full_chunk(const RowSlice& slice, int j) {
  return j >= slice.full_begin && j < slice.full_end;
}

// This thread's pair over its chunks of the slice.
template <class T, class Math>
__device__ __forceinline__ float2 slice_stats(const T* source, const RowSlice& slice, int64_t vocab,
                                              const Math& math) {
  constexpr int kVec = int(16 / sizeof(T));
  using Chunk = Vector<T, kVec>;
  const Chunk* chunks = reinterpret_cast<const Chunk*>(source);
  const int stride = int(blockDim.x);
  float2 stats = make_float2(-INFINITY, 0.0f);
  const auto chunk_y = [&](const Chunk& chunk, int j, float* y) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) y[i] = math.y(load(chunk.values[i]));
    if (!full_chunk(slice, j)) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const int64_t element = element_of<kVec>(slice, j, i);
        if (element < 0 || element >= vocab) y[i] = -INFINITY;  // adds nothing
      }
    }
  };
  int j = int(threadIdx.x);
  for (; j + (kGroupChunks - 1) * stride < slice.count; j += kGroupChunks * stride) {
    Chunk group[kGroupChunks];
#pragma unroll
    for (int g = 0; g < kGroupChunks; ++g) group[g] = chunks[j + g * stride];
    float y[kGroupChunks * kVec];
#pragma unroll
    for (int g = 0; g < kGroupChunks; ++g) chunk_y(group[g], j + g * stride, y + g * kVec);
    accumulate(stats, y);
  }
  for (; j < slice.count; j += stride) {
    float y[kVec];
    chunk_y(chunks[j], j, y);
    accumulate(stats, y);
  }
  return stats;
}

// Where the teacher's values of a block's slice lie: element e of the row (a row element of the slice) at
// source[e + offset]. In shared memory the block's part of the teacher's row is copied from the 16-byte boundary at
// or before its first element to the one at or after its last (`bytes`), so `offset` places the first element after
// the copy's lead; in device memory (the direct path) source is the row itself.
struct TeacherWindow {
  const float* start;  // the copy's first value in device memory
  int offset;
  uint32_t bytes;
};

template <class T>
__device__ __forceinline__ TeacherWindow teacher_window(const FusedParams& p, int64_t row, const RowSlice& slice) {
  constexpr int kVec = int(16 / sizeof(T));
  const int64_t begin = max(int64_t(0), int64_t(slice.first) * kVec - slice.lead);
  const int64_t end = min(p.vocab, int64_t(slice.first + slice.count) * kVec - slice.lead);
  const float* row_start = p.teacher + row * p.teacher_stride;
  const int lead = int(reinterpret_cast<uintptr_t>(row_start + begin) % 16 / sizeof(float));
  return TeacherWindow{row_start + begin - lead, lead - int(begin),
                       uint32_t((int64_t(lead) + end - begin + 3) / 4 * 16)};
}

// The teacher's values of chunk j's elements into `values` (0 for elements outside the row, which are not read):
// 16-byte loads when they are 16-byte aligned (the teacher's rows and the logits' at the same offsets from 16-byte
// boundaries, e.g. contiguous rows of a vocabulary that is a multiple of 8), element loads otherwise (which shared
// memory serves with bank conflicts: a warp's lanes read floats kVec apart).
template <int kVec>
__device__ __forceinline__ void teacher_chunk(const float* teacher, int offset, const RowSlice& slice, int j,
                                              int64_t vocab, float (&values)[kVec]) {
  const int64_t first = element_of<kVec>(slice, j, 0);
  const bool full = full_chunk(slice, j);
  const float* chunk = teacher + first + offset;
  if (full && reinterpret_cast<uintptr_t>(chunk) % 16 == 0) {
#pragma unroll
    for (int quad = 0; quad < kVec / 4; ++quad) {
      const float4 four = reinterpret_cast<const float4*>(chunk)[quad];
      values[4 * quad] = four.x;
      values[4 * quad + 1] = four.y;
      values[4 * quad + 2] = four.z;
      values[4 * quad + 3] = four.w;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) values[i] = full || (first + i >= 0 && first + i < vocab) ? chunk[i] : 0.0f;
}

// This thread's distillation statistics over its chunks of the slice (`teacher`, `offset`: its TeacherWindow's).
template <class T, class Math>
__device__ __forceinline__ DistillationStats slice_distillation_stats(const T* source, const float* teacher, int offset,
                                                                      const RowSlice& slice, int64_t vocab,
                                                                      const Math& math, int loss_type) {
  constexpr int kVec = int(16 / sizeof(T));
  using Chunk = Vector<T, kVec>;
  const Chunk* chunks = reinterpret_cast<const Chunk*>(source);
  const int stride = int(blockDim.x);
  // d = d_y y + d_u u (DistillationStats).
  const float d_y = loss_type == int(DistillationLossType::forward_kl) ? -1.0f : 1.0f;
  const float d_u = loss_type == int(DistillationLossType::forward_kl)   ? 1.0f
                    : loss_type == int(DistillationLossType::reverse_kl) ? -1.0f
                                                                          : 0.0f;
  const bool reverse = math.reverse;
  DistillationStats stats = empty_stats(DistillationStats{});
  const auto chunk_values = [&](const Chunk& chunk, int j, float* y, float* u) {
    float teacher_values[kVec];
    teacher_chunk<kVec>(teacher, offset, slice, j, vocab, teacher_values);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      y[i] = math.y(load(chunk.values[i]));
      u[i] = math.u(teacher_values[i]);
    }
    if (!full_chunk(slice, j)) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const int64_t element = element_of<kVec>(slice, j, i);
        if (element < 0 || element >= vocab) y[i] = u[i] = -INFINITY;  // adds nothing
      }
    }
  };
  int j = int(threadIdx.x);
  for (; j + (kGroupChunks - 1) * stride < slice.count; j += kGroupChunks * stride) {
    Chunk group[kGroupChunks];
#pragma unroll
    for (int g = 0; g < kGroupChunks; ++g) group[g] = chunks[j + g * stride];
    float y[kGroupChunks * kVec], u[kGroupChunks * kVec];
#pragma unroll
    for (int g = 0; g < kGroupChunks; ++g) chunk_values(group[g], j + g * stride, y + g * kVec, u + g * kVec);
    accumulate(stats, y, u, d_y, d_u, reverse);
  }
  for (; j < slice.count; j += stride) {
    float y[kVec], u[kVec];
    chunk_values(chunks[j], j, y, u);
    accumulate(stats, y, u, d_y, d_u, reverse);
  }
  return stats;
}

// Writes chunk j's gradient values: one 16-byte store, or element stores of the row's elements only.
template <class T>
__device__ __forceinline__ void store_chunk(T* grad_row, const RowSlice& slice, int j, bool vector_store,
                                            int64_t vocab, const float (&values)[16 / sizeof(T)]) {
  constexpr int kVec = int(16 / sizeof(T));
  if (vector_store && full_chunk(slice, j)) {
    store_floats<kVec>(grad_row + element_of<kVec>(slice, j, 0), values);
    return;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int64_t element = element_of<kVec>(slice, j, i);
    if (element >= 0 && element < vocab) grad_row[element] = store<T>(values[i]);
  }
}

// The gradient of chunk j; `label` is the label's element index in the row. kDistillation: with the distillation
// term, the teacher's values at `teacher`, `offset` (a TeacherWindow's).
template <class T, bool kDistillation, class Math>
__device__ __forceinline__ void chunk_gradient(T* grad_row, const float* teacher, int offset, const RowSlice& slice,
                                               int j, const Vector<T, 16 / sizeof(T)>& chunk, int64_t label,
                                               bool vector_store, int64_t vocab, const Math& math) {
  constexpr int kVec = int(16 / sizeof(T));
  float result[kVec];
  const int64_t label_in_chunk = label - element_of<kVec>(slice, j, 0);
  if constexpr (kDistillation) {
    float teacher_values[kVec];
    teacher_chunk<kVec>(teacher, offset, slice, j, vocab, teacher_values);
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      result[i] = math.distillation_gradient(load(chunk.values[i]), teacher_values[i], i == label_in_chunk);
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) result[i] = math.gradient(load(chunk.values[i]), false);
    if (label_in_chunk >= 0 && label_in_chunk < kVec) {
#pragma unroll
      for (int i = 0; i < kVec; ++i)
        if (i == label_in_chunk) result[i] = math.gradient(load(chunk.values[i]), true);
    }
  }
  store_chunk(grad_row, slice, j, vector_store, vocab, result);
}

// The gradient of this thread's chunks of the slice. A group's loads come before its stores: in the direct path the
// gradient may overwrite `source` (never the teacher's logits).
template <class T, bool kDistillation, class Math>
__device__ __forceinline__ void slice_gradient(const T* source, const float* teacher, int offset, T* grad_row,
                                               const RowSlice& slice, int64_t label, bool vector_store, int64_t vocab,
                                               const Math& math) {
  using Chunk = Vector<T, int(16 / sizeof(T))>;
  const Chunk* chunks = reinterpret_cast<const Chunk*>(source);
  const int stride = int(blockDim.x);
  int j = int(threadIdx.x);
  for (; j + (kGroupChunks - 1) * stride < slice.count; j += kGroupChunks * stride) {
    Chunk group[kGroupChunks];
#pragma unroll
    for (int g = 0; g < kGroupChunks; ++g) group[g] = chunks[j + g * stride];
#pragma unroll
    for (int g = 0; g < kGroupChunks; ++g)
      chunk_gradient<T, kDistillation>(grad_row, teacher, offset, slice, j + g * stride, group[g], label,
                                       vector_store, vocab, math);
  }
  for (; j < slice.count; j += stride)
    chunk_gradient<T, kDistillation>(grad_row, teacher, offset, slice, j, chunks[j], label, vector_store, vocab, math);
}

template <class T>
__device__ __forceinline__ void slice_zeros(T* grad_row, const RowSlice& slice, bool vector_store, int64_t vocab) {
  float zeros[16 / sizeof(T)];
#pragma unroll
  for (int i = 0; i < int(16 / sizeof(T)); ++i) zeros[i] = 0.0f;
  for (int j = int(threadIdx.x); j < slice.count; j += int(blockDim.x))
    store_chunk(grad_row, slice, j, vector_store, vocab, zeros);
}

// ---------------------------------------------------------------------------------------------------------------------
// The kernel. kResident: slices staged in shared memory by bulk copies; otherwise read twice from device memory.
//
// Layout. A row is read as the 16-byte chunks of its window: from the aligned chunk holding its first logit to the one
// holding its last, so that any row stride works; the window's first `lead` elements and those past lead + vocab belong
// to the neighbouring rows or lie just outside the tensor, and are masked out, never written. Reading them cannot
// fault, whoever allocated the tensor: an aligned 16-byte chunk that holds one byte of the tensor lies in the same
// memory page as that byte (device pages are 64 KiB or more, and 16-byte aligned chunks never straddle them). The
// chunks are split into `blocks_per_row` slices, one per block of a thread block cluster. Each block has two stages of
// shared memory of one slice each and walks rows cluster, cluster + clusters, ...: at the top of a row it issues the
// bulk copy of its next row into the other stage, then waits for this row's. Per row every thread keeps an online (max,
// sum of 2^(y - max)), y = z log2(e), over its chunks (chunk thread, thread + blockDim.x, ...: a warp reads 512
// contiguous bytes), with one rescale per kGroupChunks chunks; the pairs are combined by butterflies across the warp
// and the block, then across the cluster in rank order through distributed shared memory, so every block holds the same
// bits; lse = (max + log2(sum)) ln 2; the thread whose chunk holds the label writes the row's losses; every thread
// writes the gradient of its chunks, read again from shared memory (16-byte stores when the gradient's rows are aligned
// as the logits', element stores otherwise). Rows whose label is masked are neither copied nor read: their gradient is
// zeros.
//
// Rows longer than kMaxClusterBlocks stages (bf16 vocab above ~464000, fp32 above ~232000) are read twice straight
// from device memory ("direct"), with the same chunks and arithmetic.
//
// kDistillation: a stage also holds the block's part of the teacher's fp32 row (TeacherWindow: from the 16-byte
// boundary before its first logit to the one after its last, copied on the same barrier as the logits' slice), so a
// stage takes 16 + 4 kVec bytes per chunk and the cluster is sized for both (bf16 rows resident up to ~154000 logits,
// three blocks at 49152; fp32 up to ~116000). Each thread reads the teacher's values of its chunk's elements beside
// them and keeps DistillationStats instead of the pair, combined in the same order; once the row's statistics are
// known every thread has the row's distillation loss, and the gradient pass writes the label losses' and the
// distillation's gradient together. The direct path reads the teacher's row from device memory at the same places.
//
// Numerics: fp32; exp2 on the special-function unit (ex2.approx.ftz: ~2 ulp, probabilities below 2^-126 flushed to
// zero, negligible next to the row's largest, which is 1 or close); the reductions' order depends only on the shape
// and the device, so results are bitwise reproducible. The gradient may overwrite the logits: a row's copy has landed
// before any of its gradient is written, and in the direct path an element is read only by the thread that later
// writes it, before the cluster barrier after which the other blocks write theirs.

template <class T, bool kResident, bool kSoftcap, bool kDistillation>
__global__ void __launch_bounds__(kMaxThreads, 1) cross_entropy_kernel(const FusedParams p) {
  // The statistics of a row: the (max, sum) pair, or with the distillation term DistillationStats.
  using Stats = std::conditional_t<kDistillation, DistillationStats, float2>;
  constexpr int kVec = int(16 / sizeof(T));
  // kResident: (kStages, slice_chunks * 16 bytes of logits [, teacher_stage_floats fp32 teacher logits])
  extern __shared__ __align__(16) unsigned char stage_memory[];
  __shared__ uint64_t stage_copied[kStages];  // the stages' transaction barriers
  __shared__ Stats block_slots[2];            // this block's statistics of a row, read by the cluster
  __shared__ Stats warp_stats[kMaxThreads / 32];

  const int blocks = p.blocks_per_row, thread = int(threadIdx.x);
  const int rank = int(blockIdx.x) % blocks;  // a cluster is `blocks` consecutive blocks
  const int64_t first_row = int64_t(blockIdx.x) / blocks, row_step = int64_t(gridDim.x) / blocks;
  const T* logits = static_cast<const T*>(p.logits);
  T* grad = static_cast<T*>(p.grad);
  const uint32_t logits_stage_bytes = uint32_t(p.slice_chunks) * 16u;
  const uint32_t stage_bytes = logits_stage_bytes + (kDistillation ? uint32_t(p.teacher_stage_floats) * 4u : 0u);
  LogitMath<kSoftcap> math(p);
  const auto unite = [&](const Stats& a, const Stats& b) {
    if constexpr (kDistillation)
      return combine(a, b, math.reverse);
    else
      return combine(a, b);
  };

  if (kResident && thread == 0) {
    for (int stage = 0; stage < kStages; ++stage) init_stage_barrier(&stage_copied[stage]);
    fence_stage_barrier_init();
  }
  __syncthreads();

  const auto label_of = [&](int64_t row) { return row < p.rows ? p.labels[row * p.label_stride] : int64_t(-1); };
  const auto unmasked = [&](int64_t label) { return label >= 0 && label < p.vocab; };
  // The start of this block's part of a row's window in device memory (16-byte aligned).
  const auto window_of = [&](int64_t row, const RowSlice& slice) {
    return logits + row * p.logits_stride - slice.lead + int64_t(slice.first) * kVec;
  };
  // A stage receives a copy when its row is unmasked and this block has chunks of it (then also of the teacher's row).
  const auto copy_row = [&](int64_t row, int stage) {
    const RowSlice slice = row_slice<T>(p, row, rank);
    if (slice.count == 0) return;
    unsigned char* destination = stage_memory + stage * stage_bytes;
    const uint32_t bytes = uint32_t(slice.count) * 16u;
    if constexpr (kDistillation) {
      const TeacherWindow teacher = teacher_window<T>(p, row, slice);
      expect_bytes(&stage_copied[stage], bytes + teacher.bytes);
      copy_bytes(destination, window_of(row, slice), bytes, &stage_copied[stage]);
      copy_bytes(destination + logits_stage_bytes, teacher.start, teacher.bytes, &stage_copied[stage]);
    } else {
      expect_bytes(&stage_copied[stage], bytes);
      copy_bytes(destination, window_of(row, slice), bytes, &stage_copied[stage]);
    }
  };

  // The label of the row after next is loaded a row ahead of its use: it decides the next iteration's copy.
  int64_t label = label_of(first_row), next_label = label_of(first_row + row_step);
  if (kResident && thread == 0 && unmasked(label)) copy_row(first_row, 0);
  uint32_t stage_parities = 0;  // bit s: the parity of stage s's next completion
  int slot = 0;
  int64_t iteration = 0;
  for (int64_t row = first_row; row < p.rows; row += row_step, ++iteration) {
    const int stage = int(iteration % kStages);
    const int64_t next_row = row + row_step;
    const int64_t label_after_next = label_of(next_row + row_step);
    __syncthreads();  // every thread is done with the other stage (the previous row) and with warp_stats
    if (kResident && thread == 0 && next_row < p.rows && unmasked(next_label)) copy_row(next_row, 1 - stage);
    const RowSlice slice = row_slice<T>(p, row, rank);
    T* grad_row = grad != nullptr ? grad + row * p.grad_stride : nullptr;

    if (!unmasked(label)) {
      if (grad != nullptr) slice_zeros(grad_row, slice, p.vector_stores, p.vocab);
      if (rank == 0 && thread == 0) {
        p.row_losses[row] = 0.0f;
        if (p.row_z_losses != nullptr) p.row_z_losses[row] = 0.0f;
        if constexpr (kDistillation) p.row_distillation_losses[row] = 0.0f;
      }
    } else {
      if (kResident && slice.count > 0) {
        wait_stage(&stage_copied[stage], (stage_parities >> stage) & 1u);
        stage_parities ^= 1u << stage;
      }
      const T* source =
          kResident ? reinterpret_cast<const T*>(stage_memory + stage * stage_bytes) : window_of(row, slice);
      // The teacher's values of the slice: element e of the row at teacher[e + teacher_offset].
      const float* teacher = nullptr;
      int teacher_offset = 0;
      if constexpr (kDistillation) {
        if (kResident) {
          teacher = reinterpret_cast<const float*>(stage_memory + stage * stage_bytes + logits_stage_bytes);
          teacher_offset = teacher_window<T>(p, row, slice).offset;
        } else {
          teacher = p.teacher + row * p.teacher_stride;
        }
      }
      // The label's y, read by the thread whose chunk holds it (the one that overwrites it in the direct path).
      const int64_t label_position = label + slice.lead - int64_t(slice.first) * kVec;  // in the slice's chunks
      const int64_t label_chunk = label_position / kVec;
      const bool owner = label_position >= 0 && label_chunk < slice.count && int(label_chunk % blockDim.x) == thread;
      const float label_y = owner ? math.y(load(source[label_position])) : 0.0f;

      Stats stats;
      if constexpr (kDistillation)
        stats = slice_distillation_stats(source, teacher, teacher_offset, slice, p.vocab, math, p.distillation_type);
      else
        stats = slice_stats(source, slice, p.vocab, math);
      stats = block_combine(stats, warp_stats, unite);
      if (blocks > 1) {
        stats = cluster_combine(stats, &block_slots[slot], blocks, unite);
        slot ^= 1;
      }
      float lse_log2, teacher_lse_log2 = 0.0f, distillation_loss = 0.0f;
      if constexpr (kDistillation) {
        lse_log2 = stats.max + log2f(stats.sum);
        teacher_lse_log2 = stats.teacher_max + log2f(stats.teacher_sum);
        const float lse = lse_log2 * kLn2, teacher_lse = teacher_lse_log2 * kLn2;
        switch (p.distillation_type) {
          case int(DistillationLossType::cross_entropy):
            distillation_loss = lse - kLn2 * (stats.weighted / stats.teacher_sum);
            break;
          case int(DistillationLossType::forward_kl):
            distillation_loss = kLn2 * (stats.weighted / stats.teacher_sum) - teacher_lse + lse;
            break;
          default: distillation_loss = kLn2 * (stats.weighted / stats.sum) - lse + teacher_lse; break;
        }
        if (rank == 0 && thread == 0) p.row_distillation_losses[row] = distillation_loss;
      } else {
        lse_log2 = stats.x + log2f(stats.y);
      }
      if (owner) {
        p.row_losses[row] = (lse_log2 - label_y) * kLn2;
        if (p.row_z_losses != nullptr) p.row_z_losses[row] = (lse_log2 * kLn2) * (lse_log2 * kLn2);
      }
      if (grad != nullptr) {
        math.start_row(lse_log2, p.row_weights != nullptr ? p.row_weights[row * p.row_weight_stride] : 0.0f);
        if constexpr (kDistillation) math.start_distillation(teacher_lse_log2, distillation_loss);
        slice_gradient<T, kDistillation>(source, teacher, teacher_offset, grad_row, slice, label, p.vector_stores,
                                         p.vocab, math);
      }
    }
    label = next_label;
    next_label = label_after_next;
  }
  if (blocks > 1) cg::this_cluster().sync();  // no block leaves while another may still read its slots
}

template <class T, bool kResident, bool kDistillation>
auto fused_kernel(bool softcap) {
  return softcap ? &cross_entropy_kernel<T, kResident, true, kDistillation>
                 : &cross_entropy_kernel<T, kResident, false, kDistillation>;
}

// Queues the row kernel on `scope`'s stream, for at least one row; kDistillation: with the distillation term.
template <class T, bool kDistillation>
void launch_typed(const CrossEntropyArgs& args, const RowLosses& losses, const LaunchScope& scope) {
  constexpr const char* op = "cross_entropy_forward_backward";
  const int64_t rows = args.logits.size(0), vocab = args.logits.size(1);
  const bool softcap = args.softcap.has_value();
  const CrossEntropyDistillation* distillation = args.distillation;
  constexpr int kVec = kVectorElements<T>;
  // Chunks of a row's window, whatever the offset of its first logit from a 16-byte boundary.
  const int64_t row_chunks = ceil_div(vocab + kVec - 1, kVec);
  // A stage may take half of the shared memory a block can have besides its static shared memory: per chunk 16 bytes
  // of logits and, with the distillation term, their kVec fp32 teacher logits, plus 16 bytes for the teacher copy's
  // alignment (TeacherWindow).
  cudaFuncAttributes attributes;
  FLM_CUDA_CHECK(cudaFuncGetAttributes(&attributes, cross_entropy_kernel<T, true, false, kDistillation>));
  constexpr int64_t kChunkBytes = 16 + (kDistillation ? kVec * int64_t(sizeof(float)) : 0);
  constexpr int64_t kTeacherPadding = kDistillation ? 16 : 0;
  const int64_t stage_chunks =
      ((int64_t(device_info(scope.device()).shared_memory_per_block_optin) - int64_t(attributes.sharedSizeBytes)) /
           kStages -
       kTeacherPadding) /
      kChunkBytes;
  const bool resident = row_chunks <= kMaxClusterBlocks * stage_chunks;
  const int64_t blocks_per_row = resident ? ceil_div(row_chunks, stage_chunks) : kMaxClusterBlocks;
  const int64_t slice_chunks = ceil_div(row_chunks, blocks_per_row);
  const int threads =
      int(std::clamp<int64_t>(round_up(ceil_div(slice_chunks, kGroupChunks), 32), 32, kMaxThreads));
  // A stage's teacher part holds a slice's logits and the copy's lead and tail (TeacherWindow): at most 4 floats more.
  const int64_t teacher_stage_floats = kDistillation ? slice_chunks * kVec + 4 : 0;
  const size_t shared_bytes =
      resident ? size_t(kStages * (slice_chunks * 16 + teacher_stage_floats * int64_t(sizeof(float)))) : 0;
  const auto kernel =
      resident ? fused_kernel<T, true, kDistillation>(softcap) : fused_kernel<T, false, kDistillation>(softcap);
  FLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes)));

  const Tensor* grad = args.grad_logits;
  const bool vector_stores =
      grad == nullptr ||
      ((static_cast<const char*>(grad->data()) - static_cast<const char*>(args.logits.data())) % 16 == 0 &&
       (row_stride(*grad) - row_stride(args.logits)) % kVec == 0);
  const double scale = args.logits_scale_factor, cap = args.softcap.value_or(1.0);
  const FusedParams params{
      .logits = args.logits.data(),
      .logits_stride = row_stride(args.logits),
      .labels = args.labels.data_as<int64_t>(),
      .label_stride = args.labels.stride(0),
      .grad = grad != nullptr ? grad->data() : nullptr,
      .grad_stride = grad != nullptr ? row_stride(*grad) : 0,
      .row_losses = losses.label,
      .row_z_losses = losses.z,
      .row_weights = args.row_gradient_weights != nullptr ? args.row_gradient_weights->data_as<float>() : nullptr,
      .row_weight_stride = args.row_gradient_weights != nullptr ? args.row_gradient_weights->stride(0) : 0,
      .teacher = distillation != nullptr ? distillation->target_logits.data_as<float>() : nullptr,
      .teacher_stride = distillation != nullptr ? row_stride(distillation->target_logits) : 0,
      .row_distillation_losses = losses.distillation,
      .teacher_stage_floats = int(teacher_stage_floats),
      .distillation_type = distillation != nullptr ? int(distillation->loss_type) : 0,
      .teacher_scale_log2e =
          distillation != nullptr ? float(args.logits_scale_factor / distillation->temperature * double(kLog2e)) : 0.0f,
      .distillation_weight = distillation != nullptr ? float(distillation->weight) : 0.0f,
      .rows = rows,
      .vocab = vocab,
      .blocks_per_row = int(blocks_per_row),
      .slice_chunks = int(slice_chunks),
      .vector_stores = vector_stores,
      .label_weight = float(args.label_weight),
      .z_loss_weight = float(args.z_loss_weight),
      .logits_scale = float(scale),
      .scale_log2e = float(scale * double(kLog2e)),
      .scale_over_softcap = float(scale / cap),
      .softcap_log2e = float(cap * double(kLog2e))};

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(blocks_per_row));
  config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = shared_bytes;
  config.stream = scope.stream();
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = unsigned(blocks_per_row);
  cluster[0].val.clusterDim.y = 1;
  cluster[0].val.clusterDim.z = 1;
  config.attrs = cluster;
  config.numAttrs = 1;
  // Persistent clusters, kWavesPerSlot times as many as fit at once: with another stream's kernel (NCCL) holding some
  // SMs, the clusters that cannot start run after the others, and a quarter of a slot's rows is then the most that
  // can trail. Each cluster's first copy is not overlapped: ~3 us in a cluster's ~600 us at the Llama shape.
  int fitting_clusters = 0;
  if (blocks_per_row == 1) {
    int blocks_per_multiprocessor = 0;
    FLM_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_multiprocessor, kernel, threads, shared_bytes));
    fitting_clusters = blocks_per_multiprocessor * scope.multiprocessors();
    config.numAttrs = 0;  // a block per row: no cluster
  } else {
    FLM_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&fitting_clusters, kernel, &config));
  }
  FLM_CHECK(fitting_clusters > 0, op,
            "no cluster of {} blocks of {} threads with {} bytes of shared memory fits on {}", blocks_per_row,
            threads, shared_bytes, scope.device().str());
  const int64_t clusters = std::min<int64_t>(rows, int64_t(fitting_clusters) * kWavesPerSlot);
  config.gridDim = dim3(unsigned(clusters * blocks_per_row));
  FLM_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, params));
}

void launch_rows(const CrossEntropyArgs& args, const RowLosses& losses, const LaunchScope& scope) {
  visit_floating(args.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    if (args.distillation != nullptr)
      launch_typed<T, true>(args, losses, scope);
    else
      launch_typed<T, false>(args, losses, scope);
  });
}

// The op's contract holds; what the kernel adds: logits of float32, bfloat16 or float16 whose last dimension is
// contiguous (the gradient's too), label and z-loss sums of one dtype, fp32 row gradient weights, fp32 teacher logits
// (what reference models give on the GPU) whose last dimension is contiguous, a vocabulary below 2^31.
std::optional<std::string> supports_fused(const CrossEntropyArgs& args) {
  if (auto reason = cuda_floating_reason("logits", args.logits)) return reason;
  if (auto reason = inner_contiguous_reason("logits", args.logits)) return reason;
  if (args.z_loss_sum != nullptr && args.z_loss_sum->dtype() != args.label_loss_sum.dtype())
    return fmt::format("z_loss_sum has dtype {}, label_loss_sum {}; they must match",
                       dtype_name(args.z_loss_sum->dtype()), dtype_name(args.label_loss_sum.dtype()));
  if (args.grad_logits != nullptr)
    if (auto reason = inner_contiguous_reason("grad_logits", *args.grad_logits)) return reason;
  if (args.distillation != nullptr) {
    const Tensor& teacher = args.distillation->target_logits;
    if (auto reason = float32_reason("distillation.target_logits", teacher)) return reason;
    if (auto reason = inner_contiguous_reason("distillation.target_logits", teacher)) return reason;
  }
  if (args.row_gradient_weights != nullptr && args.row_gradient_weights->dtype() != DType::float32)
    return fmt::format("row_gradient_weights has dtype {}; supported: float32",
                       dtype_name(args.row_gradient_weights->dtype()));
  if (args.logits.size(1) >= (int64_t(1) << 31))
    return fmt::format("vocab {}; supported: below 2^31", args.logits.size(1));
  return std::nullopt;
}

// The row kernel fills per-row loss buffers, which one block then adds to the loss sums in a fixed order.
void cross_entropy_fused(const CrossEntropyArgs& args) {
  constexpr const char* op = "cross_entropy_forward_backward";
  const Device device = args.logits.device();
  const int64_t rows = args.logits.size(0);
  if (rows == 0) return;

  LaunchScope scope(op, device, args.stream);
  Tensor row_losses = Tensor::empty(Shape{rows}, DType::float32, device, scope.tensor_stream());
  Tensor row_z_losses;
  if (args.z_loss_sum != nullptr)
    row_z_losses = Tensor::empty(Shape{rows}, DType::float32, device, scope.tensor_stream());
  Tensor row_distillation_losses;
  if (args.distillation != nullptr)
    row_distillation_losses = Tensor::empty(Shape{rows}, DType::float32, device, scope.tensor_stream());
  const RowLosses losses{
      .label = row_losses.data_as<float>(),
      .z = args.z_loss_sum != nullptr ? row_z_losses.data_as<float>() : nullptr,
      .distillation = args.distillation != nullptr ? row_distillation_losses.data_as<float>() : nullptr};
  launch_rows(args, losses, scope);
  scope.check_launch();

  add_row_loss_sums(losses.label, losses.z, rows, args.label_loss_sum, args.z_loss_sum, scope);
  if (args.distillation != nullptr)
    add_row_loss_sums(losses.distillation, nullptr, rows, args.distillation->loss_sum, nullptr, scope);
}

}  // namespace

FLM_REGISTER_KERNEL(CrossEntropyForwardBackward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_fused, &cross_entropy_fused,
                    "rows staged in shared memory by bulk copies, the next row's copy in flight while the current one "
                    "reduces: one read and one write per logit; per-row losses summed in a fixed order");

}  // namespace fast_llm::kernels::cuda
