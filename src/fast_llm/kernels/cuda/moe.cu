// CUDA variants ("fused") of the seven mixture-of-experts ops, with kernels/moe.h's contract and row order; the CPU
// reference (kernels/cpu/moe.cpp) is what tests/kernels/moe_consistency_test.cpp compares them with. Routing holds a
// token's logits in one warp (at most 256 routed experts); Sinkhorn runs on the device and the host reads its
// convergence flag every kSinkhornCheck iterations; the dispatch map needs no host round trip; row kernels use 16-byte
// accesses. No float atomics: every result is reproducible run to run. Out-of-range indices are skipped, never
// accessed. Per-kernel design and syncs: docs/gpu.md, "Mixture-of-experts kernels".
#include "fast_llm/kernels/cuda/common.cuh"

#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <climits>

#include "fast_llm/kernels/moe.h"

namespace fast_llm::kernels::cuda {
namespace {

constexpr int kMaxRouted = 256;          // routed experts a routing warp holds (8 per lane)
constexpr int kRouteWarps = 8;           // warps of a routing block
constexpr int kTokensPerRouteWarp = 8;   // consecutive tokens each warp of the forward routing block takes
constexpr int kRouteTokensPerBlock = kRouteWarps * kTokensPerRouteWarp;
constexpr int kSinkhornChunk = 256;      // tokens per block of the column partial sums
constexpr int kSinkhornCheck = 8;        // Sinkhorn iterations queued between two reads of the convergence flag
constexpr int kSinkhornMaxIterations = 1000;
constexpr float kSinkhornTolerance = 1e-5f;
constexpr float kSinkhornEpsilon = 1e-9f;
constexpr int kMapChunks = 256;          // dispatch map: about this many chunks of consecutive slots
constexpr int kMapMinChunk = 256;        // ... of at least this many slots (a multiple of 32)
constexpr int kScanBatch = 8;            // chunk counts the scan loads at once
constexpr int kMapMaxExperts = 8192;     // dispatch map: one int per expert in shared memory (32 KiB)
constexpr int kScanThreads = 1024;

// Element (row, column) of a 2-d tensor given by pointer and strides.
template <class E>
__device__ __forceinline__ E& at(E* data, int64_t stride0, int64_t stride1, int64_t row, int64_t column) {
  return data[row * stride0 + column * stride1];
}

__device__ __forceinline__ float warp_max(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Sum over the block (blockDim.x a multiple of 32) in a fixed order, valid in every thread; `scratch` holds 32 floats.
__device__ __forceinline__ float block_sum(float value, float* scratch) {
  value = warp_sum(value);
  const int warp = int(threadIdx.x) / 32, warps = int(blockDim.x) / 32;
  __syncthreads();  // the previous call's readers are done with scratch
  if (threadIdx.x % 32 == 0) scratch[warp] = value;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < warps; ++i) total += scratch[i];
  return total;
}

__device__ __forceinline__ float sigmoid(float value) { return 1.0f / (1.0f + expf(-value)); }

// ---------------------------------------------------------------------------------------------------------------------
// Routing.

// A candidate of the top-k arg-max: the key decides, ties go to the lower expert; `expert == INT_MAX` is no candidate.
// Keys are never NaN: a NaN key enters as -inf (ranks last, as the reference's).
struct Candidate {
  float key;
  int expert;
  float logit;
  float probability;
};

__device__ __forceinline__ bool better(const Candidate& a, const Candidate& b) {
  if (a.expert == INT_MAX) return false;
  if (b.expert == INT_MAX) return true;
  return a.key > b.key || (a.key == b.key && a.expert < b.expert);
}

__device__ __forceinline__ Candidate warp_best(Candidate value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    Candidate other;
    other.key = __shfl_xor_sync(0xffffffffu, value.key, offset);
    other.expert = __shfl_xor_sync(0xffffffffu, value.expert, offset);
    other.logit = __shfl_xor_sync(0xffffffffu, value.logit, offset);
    other.probability = __shfl_xor_sync(0xffffffffu, value.probability, offset);
    if (better(other, value)) value = other;
  }
  return value;
}

// One token's logits in a warp: lane l holds experts l, l + 32, ... (kPerLane of them), -inf past `routed`; the
// softmax probabilities and logsumexp, as the reference computes them (exp(l - max) / sum).
template <int kPerLane>
struct TokenSoftmax {
  float logit[kPerLane];
  float probability[kPerLane];
  float logsumexp;
};

template <int kPerLane>
__device__ __forceinline__ void token_softmax(const float* logits, int64_t stride0, int64_t stride1, int64_t token,
                                              int routed, TokenSoftmax<kPerLane>& out) {
  const int lane = int(threadIdx.x) % 32;
  float maximum = -INFINITY;
#pragma unroll
  for (int s = 0; s < kPerLane; ++s) {
    const int expert = lane + 32 * s;
    out.logit[s] = expert < routed ? at(logits, stride0, stride1, token, expert) : -INFINITY;
    maximum = fmaxf(maximum, out.logit[s]);
  }
  maximum = warp_max(maximum);
  float sum = 0.0f;
#pragma unroll
  for (int s = 0; s < kPerLane; ++s) {
    out.probability[s] = lane + 32 * s < routed ? expf(out.logit[s] - maximum) : 0.0f;
    sum += out.probability[s];
  }
  sum = warp_sum(sum);
#pragma unroll
  for (int s = 0; s < kPerLane; ++s) out.probability[s] /= sum;
  out.logsumexp = maximum + logf(sum);
}

struct RouteForwardParams {
  const float* logits;
  int64_t logits_stride0, logits_stride1;
  // Sinkhorn keys cost[t, e] * (column_factor[e] * row_factor[t]) (cost = exp(logits), contiguous), or nullptr: the
  // keys are the logits.
  const float* cost;
  const float* row_factor;
  const float* column_factor;
  int32_t* experts;
  int64_t experts_stride0, experts_stride1;
  float* scores;
  int64_t scores_stride0, scores_stride1;
  float* partial_probabilities;  // (blocks, routed): each block's sums of the softmax probabilities
  int32_t* partial_counts;       // (blocks, routed): each block's tokens per expert
  float* partial_z;              // (blocks): each block's sum of logsumexp^2
  int64_t tokens;
  int routed, top_k, shared;
  bool softmax_of_chosen;  // top_k_softmax scores; else sinkhorn's (sigmoid for top_k 1, the softmax probability)
};

template <int kPerLane>
__global__ void __launch_bounds__(kRouteWarps * 32) route_forward_kernel(const RouteForwardParams p) {
  __shared__ float warp_probabilities[kRouteWarps][kMaxRouted];
  __shared__ int32_t warp_counts[kRouteWarps][kMaxRouted];
  __shared__ float warp_z[kRouteWarps];
  __shared__ float chosen_logits[kRouteWarps][kMaxRouted];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  float probability_sum[kPerLane];
  int32_t count[kPerLane];
#pragma unroll
  for (int s = 0; s < kPerLane; ++s) {
    probability_sum[s] = 0.0f;
    count[s] = 0;
  }
  float z_sum = 0.0f;
  const int64_t first = int64_t(blockIdx.x) * kRouteTokensPerBlock + int64_t(warp) * kTokensPerRouteWarp;
  for (int i = 0; i < kTokensPerRouteWarp; ++i) {
    const int64_t token = first + i;
    if (token >= p.tokens) break;  // warp-uniform
    TokenSoftmax<kPerLane> row;
    token_softmax<kPerLane>(p.logits, p.logits_stride0, p.logits_stride1, token, p.routed, row);
    z_sum += row.logsumexp * row.logsumexp;
    float key[kPerLane];
#pragma unroll
    for (int s = 0; s < kPerLane; ++s) {
      const int expert = lane + 32 * s;
      probability_sum[s] += row.probability[s];
      if (p.cost != nullptr && expert < p.routed)
        key[s] = p.cost[token * p.routed + expert] * (p.column_factor[expert] * p.row_factor[token]);
      else
        key[s] = row.logit[s];
      if (isnan(key[s])) key[s] = -INFINITY;
    }
    for (int j = lane; j < p.shared; j += 32) {
      at(p.experts, p.experts_stride0, p.experts_stride1, token, j) = p.routed + j;
      at(p.scores, p.scores_stride0, p.scores_stride1, token, j) = 1.0f;
    }
    uint32_t taken = 0;  // bit s: this lane's expert lane + 32 s is chosen
    float first_logit = 0.0f, chosen_sum = 0.0f;
    for (int k = 0; k < p.top_k; ++k) {
      Candidate best{.key = -INFINITY, .expert = INT_MAX, .logit = 0.0f, .probability = 0.0f};
#pragma unroll
      for (int s = 0; s < kPerLane; ++s) {
        const Candidate candidate{.key = key[s], .expert = lane + 32 * s, .logit = row.logit[s],
                                  .probability = row.probability[s]};
        if (candidate.expert < p.routed && !(taken >> s & 1u) && better(candidate, best)) best = candidate;
      }
      best = warp_best(best);
#pragma unroll
      for (int s = 0; s < kPerLane; ++s)
        if (lane + 32 * s == best.expert) {
          taken |= 1u << s;
          ++count[s];
        }
      if (k == 0) first_logit = best.logit;
      if (lane == 0) {
        at(p.experts, p.experts_stride0, p.experts_stride1, token, p.shared + k) = best.expert;
        if (p.softmax_of_chosen)
          chosen_logits[warp][k] = best.logit;
        else
          at(p.scores, p.scores_stride0, p.scores_stride1, token, p.shared + k) =
              p.top_k == 1 ? sigmoid(best.logit) : best.probability;
      }
      if (p.softmax_of_chosen) chosen_sum += expf(best.logit - first_logit);
    }
    if (p.softmax_of_chosen) {
      __syncwarp();
      for (int k = lane; k < p.top_k; k += 32)
        at(p.scores, p.scores_stride0, p.scores_stride1, token, p.shared + k) =
            expf(chosen_logits[warp][k] - first_logit) / chosen_sum;
      __syncwarp();
    }
  }
  // The block's partial sums: warps in order, one thread per expert.
#pragma unroll
  for (int s = 0; s < kPerLane; ++s)
    if (lane + 32 * s < kMaxRouted) {
      warp_probabilities[warp][lane + 32 * s] = probability_sum[s];
      warp_counts[warp][lane + 32 * s] = count[s];
    }
  if (lane == 0) warp_z[warp] = z_sum;
  __syncthreads();
  for (int expert = int(threadIdx.x); expert < p.routed; expert += int(blockDim.x)) {
    float probabilities = 0.0f;
    int32_t counts = 0;
    for (int w = 0; w < kRouteWarps; ++w) {
      probabilities += warp_probabilities[w][expert];
      counts += warp_counts[w][expert];
    }
    p.partial_probabilities[int64_t(blockIdx.x) * p.routed + expert] = probabilities;
    p.partial_counts[int64_t(blockIdx.x) * p.routed + expert] = counts;
  }
  if (threadIdx.x == 0) {
    float z = 0.0f;
    for (int w = 0; w < kRouteWarps; ++w) z += warp_z[w];
    p.partial_z[blockIdx.x] = z;
  }
}

struct RouteStatisticsParams {
  const float* partial_probabilities;
  const int32_t* partial_counts;
  const float* partial_z;
  int64_t blocks, tokens;
  int routed;
  float* expert_counts;  // or nullptr
  int64_t expert_counts_stride;
  void* load_balancing_loss_sum;  // float or double scalar, or nullptr
  bool load_balancing_double;
  void* z_loss_sum;
  bool z_double;
  double loss_weight;
};

__device__ __forceinline__ void add_scalar(void* target, bool is_double, double value) {
  if (is_double)
    *static_cast<double*>(target) += value;
  else
    *static_cast<float*>(target) += float(value);
}

// One block of kMaxRouted threads: the expert counts and both losses from the routing blocks' partials, in block
// order, in fp64.
__global__ void __launch_bounds__(kMaxRouted) route_statistics_kernel(const RouteStatisticsParams p) {
  __shared__ double scratch[2][32];
  const int expert = int(threadIdx.x);
  double term = 0.0;
  if (expert < p.routed) {
    double probabilities = 0.0;
    int64_t count = 0;
    for (int64_t b = 0; b < p.blocks; ++b) {
      probabilities += double(p.partial_probabilities[b * p.routed + expert]);
      count += p.partial_counts[b * p.routed + expert];
    }
    if (p.expert_counts != nullptr) p.expert_counts[expert * p.expert_counts_stride] = float(count);
    if (p.tokens > 0) term = probabilities / double(p.tokens) * (double(count) / double(p.tokens));
  }
  const double aux = block_sum_to_thread0(term, scratch[0]);
  double z = 0.0;
  for (int64_t b = threadIdx.x; b < p.blocks; b += blockDim.x) z += double(p.partial_z[b]);
  z = block_sum_to_thread0(z, scratch[1]);
  if (threadIdx.x != 0 || p.tokens == 0) return;
  if (p.load_balancing_loss_sum != nullptr)
    add_scalar(p.load_balancing_loss_sum, p.load_balancing_double, p.loss_weight * aux);
  if (p.z_loss_sum != nullptr) add_scalar(p.z_loss_sum, p.z_double, p.loss_weight * (z / double(p.tokens)));
}

// Sinkhorn: cost = exp(logits) (contiguous), column factors 1, the flag cleared.
__global__ void sinkhorn_start_kernel(const float* logits, int64_t stride0, int64_t stride1, int64_t tokens,
                                      int routed, float* cost, float* column_factor, int32_t* done) {
  const int64_t count = tokens * routed;
  for (int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; index < count;
       index += int64_t(gridDim.x) * blockDim.x) {
    const int64_t token = index / routed, expert = index % routed;
    cost[index] = expf(at(logits, stride0, stride1, token, expert));
  }
  if (blockIdx.x == 0) {
    for (int expert = int(threadIdx.x); expert < routed; expert += int(blockDim.x)) column_factor[expert] = 1.0f;
    if (threadIdx.x == 0) *done = 0;
  }
}

// row_factor[t] = 1 / T / (sum_e column_factor[e] cost[t, e] + eps): one warp per token.
__global__ void __launch_bounds__(256) sinkhorn_row_kernel(const float* cost, const float* column_factor,
                                                           float* row_factor, int64_t tokens, int routed,
                                                           const int32_t* done) {
  if (*done) return;
  const int lane = int(threadIdx.x) % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t token = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; token < tokens; token += warps) {
    float sum = 0.0f;
    for (int expert = lane; expert < routed; expert += 32) sum += column_factor[expert] * cost[token * routed + expert];
    sum = warp_sum(sum);
    if (lane == 0) row_factor[token] = 1.0f / float(tokens) / (sum + kSinkhornEpsilon);
  }
}

// partial[b, e] = sum over the tokens of chunk b of row_factor[t] cost[t, e]. A block of kMaxRouted threads is
// `groups` groups of `lanes` = routed rounded up to 32 threads; thread (g, e) sums tokens g, g + groups, ... of the
// chunk, then thread (0, e) adds the groups' sums in group order.
__global__ void __launch_bounds__(kMaxRouted) sinkhorn_column_partial_kernel(const float* cost, const float* row_factor,
                                                                             float* partial, int64_t tokens,
                                                                             int routed, const int32_t* done) {
  __shared__ float group_sums[kMaxRouted];
  if (*done) return;  // uniform over the block
  const int lanes = (routed + 31) / 32 * 32, groups = kMaxRouted / lanes;
  const int expert = int(threadIdx.x) % lanes, group = int(threadIdx.x) / lanes;
  const int64_t begin = int64_t(blockIdx.x) * kSinkhornChunk;
  const int64_t end = begin + kSinkhornChunk < tokens ? begin + kSinkhornChunk : tokens;
  float sum = 0.0f;
  if (expert < routed && group < groups)
    for (int64_t token = begin + group; token < end; token += groups)
      sum += row_factor[token] * cost[token * routed + expert];
  group_sums[threadIdx.x] = sum;
  __syncthreads();
  if (group != 0 || expert >= routed) return;
  float total = 0.0f;
  for (int g = 0; g < groups; ++g) total += group_sums[g * lanes + expert];
  partial[int64_t(blockIdx.x) * routed + expert] = total;
}

// column_factor[e] = 1 / E / (sum_b partial[b, e] + eps); the flag is raised when the mean change of the column
// factors is at most the tolerance. One block of kMaxRouted threads.
__global__ void __launch_bounds__(kMaxRouted) sinkhorn_column_kernel(const float* partial, int64_t blocks,
                                                                     float* column_factor, int routed,
                                                                     int32_t* done) {
  __shared__ float scratch[32];
  if (*done) return;  // uniform over the block
  const int expert = int(threadIdx.x);
  float change = 0.0f;
  if (expert < routed) {
    float sum = 0.0f;
#pragma unroll 4
    for (int64_t b = 0; b < blocks; ++b) sum += partial[b * routed + expert];
    const float factor = 1.0f / float(routed) / (sum + kSinkhornEpsilon);
    change = fabsf(column_factor[expert] - factor);
    column_factor[expert] = factor;
  }
  const float error = block_sum(change, scratch) / float(routed);
  if (threadIdx.x == 0 && !(error > kSinkhornTolerance)) *done = 1;
}

std::optional<std::string> routed_reason(int64_t routed) {
  if (routed <= kMaxRouted) return std::nullopt;
  return fmt::format("{} routed experts; supported: at most {} (one warp per token holds 8 logits per lane)", routed,
                     kMaxRouted);
}

std::optional<std::string> supports_route_forward(const MoeRouteForwardArgs& args) {
  if (auto reason = float32_reason("logits", args.logits)) return reason;
  return routed_reason(args.logits.size(1));
}

// Runs `function` with kPerLane = the smallest of 1, 2, 4, 8 with 32 kPerLane >= routed.
template <class Function>
void visit_per_lane(int64_t routed, Function&& function) {
  if (routed <= 32)
    function(std::integral_constant<int, 1>{});
  else if (routed <= 64)
    function(std::integral_constant<int, 2>{});
  else if (routed <= 128)
    function(std::integral_constant<int, 4>{});
  else
    function(std::integral_constant<int, 8>{});
}

// Sinkhorn's row and column factors of `logits` into (cost, row_factor, column_factor); the host reads the device's
// convergence flag every kSinkhornCheck iterations (one stream synchronisation each).
void run_sinkhorn(const Tensor& logits, const Tensor& cost, const Tensor& row_factor, const Tensor& column_factor,
                  const LaunchScope& scope) {
  const int64_t tokens = logits.size(0);
  const int routed = int(logits.size(1));
  const Stream stream = scope.tensor_stream();
  const int64_t blocks = ceil_div(tokens, kSinkhornChunk);
  Tensor partial = Tensor::empty(Shape{blocks, routed}, DType::float32, scope.device(), stream);
  Tensor done = Tensor::empty(Shape{1}, DType::int32, scope.device(), stream);
  sinkhorn_start_kernel<<<grid_for(tokens * routed, 256, scope), 256, 0, scope.stream()>>>(
      logits.data_as<float>(), logits.stride(0), logits.stride(1), tokens, routed, cost.data_as<float>(),
      column_factor.data_as<float>(), done.data_as<int32_t>());
  scope.check_launch();
  for (int iteration = 0; iteration < kSinkhornMaxIterations; iteration += kSinkhornCheck) {
    for (int i = iteration; i < iteration + kSinkhornCheck && i < kSinkhornMaxIterations; ++i) {
      sinkhorn_row_kernel<<<grid_for(tokens, 256 / 32, scope), 256, 0, scope.stream()>>>(
          cost.data_as<float>(), column_factor.data_as<float>(), row_factor.data_as<float>(), tokens, routed,
          done.data_as<int32_t>());
      sinkhorn_column_partial_kernel<<<unsigned(blocks), kMaxRouted, 0, scope.stream()>>>(
          cost.data_as<float>(), row_factor.data_as<float>(), partial.data_as<float>(), tokens, routed,
          done.data_as<int32_t>());
      sinkhorn_column_kernel<<<1, kMaxRouted, 0, scope.stream()>>>(partial.data_as<float>(), blocks,
                                                                  column_factor.data_as<float>(), routed,
                                                                  done.data_as<int32_t>());
      scope.check_launch();
    }
    int32_t converged = 0;
    FLM_CUDA_CHECK(cudaMemcpyAsync(&converged, done.data(), sizeof(converged), cudaMemcpyDeviceToHost, scope.stream()));
    FLM_CUDA_CHECK(cudaStreamSynchronize(scope.stream()));
    if (converged != 0) break;
  }
}

void route_forward_fused(const MoeRouteForwardArgs& args) {
  const Device device = args.logits.device();
  const int64_t tokens = args.logits.size(0);
  const int routed = int(args.logits.size(1));
  LaunchScope scope("moe_route_forward", device, args.stream);
  const Stream stream = scope.tensor_stream();
  const int64_t blocks = ceil_div(tokens, kRouteTokensPerBlock);
  const int64_t partial_rows = blocks > 0 ? blocks : 1;
  Tensor partial_probabilities = Tensor::empty(Shape{partial_rows, routed}, DType::float32, device, stream);
  Tensor partial_counts = Tensor::empty(Shape{partial_rows, routed}, DType::int32, device, stream);
  Tensor partial_z = Tensor::empty(Shape{partial_rows}, DType::float32, device, stream);
  Tensor cost, row_factor, column_factor;
  const bool by_sinkhorn = args.routing == MoeRouting::sinkhorn && args.training && tokens > 0;
  if (by_sinkhorn) {
    cost = Tensor::empty(Shape{tokens, routed}, DType::float32, device, stream);
    row_factor = Tensor::empty(Shape{tokens}, DType::float32, device, stream);
    column_factor = Tensor::empty(Shape{routed}, DType::float32, device, stream);
    run_sinkhorn(args.logits, cost, row_factor, column_factor, scope);
  }
  if (blocks > 0) {
    const RouteForwardParams params{.logits = args.logits.data_as<float>(),
                                    .logits_stride0 = args.logits.stride(0),
                                    .logits_stride1 = args.logits.stride(1),
                                    .cost = by_sinkhorn ? cost.data_as<float>() : nullptr,
                                    .row_factor = by_sinkhorn ? row_factor.data_as<float>() : nullptr,
                                    .column_factor = by_sinkhorn ? column_factor.data_as<float>() : nullptr,
                                    .experts = args.experts.data_as<int32_t>(),
                                    .experts_stride0 = args.experts.stride(0),
                                    .experts_stride1 = args.experts.stride(1),
                                    .scores = args.scores.data_as<float>(),
                                    .scores_stride0 = args.scores.stride(0),
                                    .scores_stride1 = args.scores.stride(1),
                                    .partial_probabilities = partial_probabilities.data_as<float>(),
                                    .partial_counts = partial_counts.data_as<int32_t>(),
                                    .partial_z = partial_z.data_as<float>(),
                                    .tokens = tokens,
                                    .routed = routed,
                                    .top_k = args.top_k,
                                    .shared = args.shared_experts,
                                    .softmax_of_chosen = args.routing == MoeRouting::top_k_softmax};
    visit_per_lane(routed, [&]<int kPerLane>(std::integral_constant<int, kPerLane>) {
      route_forward_kernel<kPerLane><<<unsigned(blocks), kRouteWarps * 32, 0, scope.stream()>>>(params);
    });
    scope.check_launch();
  }
  if (args.expert_counts == nullptr && args.load_balancing_loss_sum == nullptr && args.z_loss_sum == nullptr) return;
  const RouteStatisticsParams statistics{
      .partial_probabilities = partial_probabilities.data_as<float>(),
      .partial_counts = partial_counts.data_as<int32_t>(),
      .partial_z = partial_z.data_as<float>(),
      .blocks = blocks,
      .tokens = tokens,
      .routed = routed,
      .expert_counts = args.expert_counts != nullptr ? args.expert_counts->data_as<float>() : nullptr,
      .expert_counts_stride = args.expert_counts != nullptr ? args.expert_counts->stride(0) : 0,
      .load_balancing_loss_sum =
          args.load_balancing_loss_sum != nullptr ? args.load_balancing_loss_sum->data() : nullptr,
      .load_balancing_double =
          args.load_balancing_loss_sum != nullptr && args.load_balancing_loss_sum->dtype() == DType::float64,
      .z_loss_sum = args.z_loss_sum != nullptr ? args.z_loss_sum->data() : nullptr,
      .z_double = args.z_loss_sum != nullptr && args.z_loss_sum->dtype() == DType::float64,
      .loss_weight = args.loss_weight};
  route_statistics_kernel<<<1, kMaxRouted, 0, scope.stream()>>>(statistics);
  scope.check_launch();
}

struct RouteBackwardParams {
  const float* logits;
  int64_t logits_stride0, logits_stride1;
  const int32_t* experts;
  int64_t experts_stride0, experts_stride1;
  const float* grad_scores;
  int64_t grad_scores_stride0, grad_scores_stride1;
  float* grad_logits;
  int64_t grad_logits_stride0, grad_logits_stride1;
  const float* expert_counts;  // or nullptr (no load-balancing gradient)
  int64_t expert_counts_stride;
  int64_t tokens;
  int routed, top_k, shared;
  MoeRouting routing;
  float load_balancing_gradient, z_loss_gradient;
};

// grad_logits of one token per warp, term by term in the reference's order.
template <int kPerLane>
__global__ void __launch_bounds__(256) route_backward_kernel(const RouteBackwardParams p) {
  const int lane = int(threadIdx.x) % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  const float load_balancing_scale = p.load_balancing_gradient / float(p.tokens);
  const float z_scale = p.z_loss_gradient / float(p.tokens);
  for (int64_t token = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; token < p.tokens;
       token += warps) {
    TokenSoftmax<kPerLane> row;
    token_softmax<kPerLane>(p.logits, p.logits_stride0, p.logits_stride1, token, p.routed, row);
    float grad[kPerLane];
#pragma unroll
    for (int s = 0; s < kPerLane; ++s) grad[s] = 0.0f;
    auto expert_of = [&](int i) {
      const int expert = at(p.experts, p.experts_stride0, p.experts_stride1, token, p.shared + i);
      return expert >= 0 && expert < p.routed ? expert : 0;
    };
    auto logit_of = [&](int expert) { return at(p.logits, p.logits_stride0, p.logits_stride1, token, expert); };
    auto grad_score_of = [&](int i) {
      return at(p.grad_scores, p.grad_scores_stride0, p.grad_scores_stride1, token, p.shared + i);
    };
    auto add_to = [&](int expert, float value) {
#pragma unroll
      for (int s = 0; s < kPerLane; ++s)
        if (lane + 32 * s == expert) grad[s] += value;
    };
    if (p.routing == MoeRouting::top_k_softmax) {
      // s_i = softmax over the chosen logits: dl_{e_i} = s_i (g_i - sum_j s_j g_j).
      const float maximum = logit_of(expert_of(0));
      float sum = 0.0f;
      for (int i = 0; i < p.top_k; ++i) sum += expf(logit_of(expert_of(i)) - maximum);
      float dot = 0.0f;
      for (int i = 0; i < p.top_k; ++i) dot += expf(logit_of(expert_of(i)) - maximum) / sum * grad_score_of(i);
      for (int i = 0; i < p.top_k; ++i) {
        const int expert = expert_of(i);
        const float score = expf(logit_of(expert) - maximum) / sum;
        add_to(expert, score * (grad_score_of(i) - dot));
      }
    } else if (p.top_k == 1) {
      // s = sigmoid(l_e): dl_e = g s (1 - s).
      const int expert = expert_of(0);
      const float score = sigmoid(logit_of(expert));
      add_to(expert, grad_score_of(0) * score * (1.0f - score));
    } else {
      // s_i = p_{e_i}: dl_k = sum_i g_i p_{e_i} ([k = e_i] - p_k). p_{e_i} is broadcast from its lane.
      float dot = 0.0f;
      for (int i = 0; i < p.top_k; ++i) {
        const int expert = expert_of(i);
        float mine = 0.0f;
#pragma unroll
        for (int s = 0; s < kPerLane; ++s)
          if (s == expert / 32) mine = row.probability[s];
        const float probability = __shfl_sync(0xffffffffu, mine, expert % 32);
        dot += grad_score_of(i) * probability;
      }
#pragma unroll
      for (int s = 0; s < kPerLane; ++s) grad[s] -= row.probability[s] * dot;
      for (int i = 0; i < p.top_k; ++i) {
        const int expert = expert_of(i);
#pragma unroll
        for (int s = 0; s < kPerLane; ++s)
          if (lane + 32 * s == expert) grad[s] += grad_score_of(i) * row.probability[s];
      }
    }
    if (p.expert_counts != nullptr && p.load_balancing_gradient != 0.0f) {
      // aux = sum_e c_e mean_t p_te: d aux / d l_tk = p_tk (c_k - <p_t, c>) / T.
      float mask_mean[kPerLane];
      float mean_mask = 0.0f;
#pragma unroll
      for (int s = 0; s < kPerLane; ++s) {
        const int expert = lane + 32 * s;
        mask_mean[s] = expert < p.routed ? p.expert_counts[expert * p.expert_counts_stride] / float(p.tokens) : 0.0f;
        mean_mask += row.probability[s] * mask_mean[s];
      }
      mean_mask = warp_sum(mean_mask);
#pragma unroll
      for (int s = 0; s < kPerLane; ++s)
        grad[s] += load_balancing_scale * row.probability[s] * (mask_mean[s] - mean_mask);
    }
    if (p.z_loss_gradient != 0.0f) {
#pragma unroll
      for (int s = 0; s < kPerLane; ++s) grad[s] += z_scale * 2.0f * row.logsumexp * row.probability[s];
    }
#pragma unroll
    for (int s = 0; s < kPerLane; ++s)
      if (lane + 32 * s < p.routed)
        at(p.grad_logits, p.grad_logits_stride0, p.grad_logits_stride1, token, lane + 32 * s) = grad[s];
  }
}

std::optional<std::string> supports_route_backward(const MoeRouteBackwardArgs& args) {
  if (auto reason = float32_reason("logits", args.logits)) return reason;
  return routed_reason(args.logits.size(1));
}

void route_backward_fused(const MoeRouteBackwardArgs& args) {
  const int64_t tokens = args.logits.size(0);
  const int routed = int(args.logits.size(1));
  if (tokens == 0) return;
  LaunchScope scope("moe_route_backward", args.logits.device(), args.stream);
  const bool load_balancing = args.load_balancing_gradient != 0.0;
  const RouteBackwardParams params{
      .logits = args.logits.data_as<float>(),
      .logits_stride0 = args.logits.stride(0),
      .logits_stride1 = args.logits.stride(1),
      .experts = args.experts.data_as<int32_t>(),
      .experts_stride0 = args.experts.stride(0),
      .experts_stride1 = args.experts.stride(1),
      .grad_scores = args.grad_scores.data_as<float>(),
      .grad_scores_stride0 = args.grad_scores.stride(0),
      .grad_scores_stride1 = args.grad_scores.stride(1),
      .grad_logits = args.grad_logits.data_as<float>(),
      .grad_logits_stride0 = args.grad_logits.stride(0),
      .grad_logits_stride1 = args.grad_logits.stride(1),
      .expert_counts = load_balancing ? args.expert_counts->data_as<float>() : nullptr,
      .expert_counts_stride = load_balancing ? args.expert_counts->stride(0) : 0,
      .tokens = tokens,
      .routed = routed,
      .top_k = args.top_k,
      .shared = args.shared_experts,
      .routing = args.routing,
      .load_balancing_gradient = float(args.load_balancing_gradient),
      .z_loss_gradient = float(args.z_loss_gradient)};
  visit_per_lane(routed, [&]<int kPerLane>(std::integral_constant<int, kPerLane>) {
    route_backward_kernel<kPerLane><<<grid_for(tokens, 256 / 32, scope), 256, 0, scope.stream()>>>(params);
  });
  scope.check_launch();
}

// ---------------------------------------------------------------------------------------------------------------------
// Dispatch map.

struct DispatchMapParams {
  const int32_t* experts;
  int64_t experts_stride0, experts_stride1;
  int32_t* rows;
  int64_t rows_stride0, rows_stride1;
  int32_t* offsets;
  int64_t offsets_stride;
  int32_t* chunk_counts;  // (chunks, E): each chunk's slots per expert, then each chunk's first row per expert
  int32_t* totals;        // (E)
  int64_t slots_per_token, slots, chunk, chunks;
  int num_experts;
};

__device__ __forceinline__ int32_t expert_of_slot(const DispatchMapParams& p, int64_t slot) {
  return at(p.experts, p.experts_stride0, p.experts_stride1, slot / p.slots_per_token, slot % p.slots_per_token);
}

// chunk_counts[c, e] = slots of chunk c routed to e (integer shared-memory atomics: the counts are exact).
__global__ void __launch_bounds__(256) dispatch_histogram_kernel(const DispatchMapParams p) {
  extern __shared__ int32_t histogram[];
  for (int e = int(threadIdx.x); e < p.num_experts; e += int(blockDim.x)) histogram[e] = 0;
  __syncthreads();
  const int64_t begin = int64_t(blockIdx.x) * p.chunk;
  const int64_t end = begin + p.chunk < p.slots ? begin + p.chunk : p.slots;
  for (int64_t slot = begin + threadIdx.x; slot < end; slot += blockDim.x) {
    const int32_t expert = expert_of_slot(p, slot);
    if (expert >= 0 && expert < p.num_experts) atomicAdd(&histogram[expert], 1);
  }
  __syncthreads();
  for (int e = int(threadIdx.x); e < p.num_experts; e += int(blockDim.x))
    p.chunk_counts[int64_t(blockIdx.x) * p.num_experts + e] = histogram[e];
}

// One block: chunk_counts becomes each chunk's rank base per expert (exclusive scan over chunks), offsets the
// exclusive scan of the experts' totals.
__global__ void __launch_bounds__(kScanThreads) dispatch_scan_kernel(const DispatchMapParams p) {
  using Scan = cub::BlockScan<int32_t, kScanThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  for (int e = int(threadIdx.x); e < p.num_experts; e += kScanThreads) {
    int32_t running = 0;
    // kScanBatch loads in flight before their stores.
    for (int64_t first = 0; first < p.chunks; first += kScanBatch) {
      int32_t values[kScanBatch];
#pragma unroll
      for (int i = 0; i < kScanBatch; ++i)
        values[i] = first + i < p.chunks ? p.chunk_counts[(first + i) * p.num_experts + e] : 0;
#pragma unroll
      for (int i = 0; i < kScanBatch; ++i) {
        if (first + i < p.chunks) p.chunk_counts[(first + i) * p.num_experts + e] = running;
        running += values[i];
      }
    }
    p.totals[e] = running;
  }
  __syncthreads();
  int32_t carry = 0;
  for (int base = 0; base < p.num_experts; base += kScanThreads) {
    const int e = base + int(threadIdx.x);
    const int32_t value = e < p.num_experts ? p.totals[e] : 0;
    int32_t exclusive = 0, tile_total = 0;
    Scan(scan_storage).ExclusiveSum(value, exclusive, tile_total);
    if (e < p.num_experts) p.offsets[e * p.offsets_stride] = carry + exclusive;
    carry += tile_total;
    __syncthreads();  // scan_storage is reused
  }
  if (threadIdx.x == 0) p.offsets[p.num_experts * p.offsets_stride] = carry;
}

// One warp per chunk: the slots in order, 32 at a time; the lanes with equal experts rank among themselves by lane
// (__match_any_sync) after the rows the chunk's earlier slots took.
__global__ void __launch_bounds__(32) dispatch_rank_kernel(const DispatchMapParams p) {
  extern __shared__ int32_t next_row[];
  const int lane = int(threadIdx.x);
  const int64_t chunk = blockIdx.x;
  for (int e = lane; e < p.num_experts; e += 32)
    next_row[e] = p.offsets[e * p.offsets_stride] + p.chunk_counts[chunk * p.num_experts + e];
  __syncwarp();
  const int64_t begin = chunk * p.chunk;
  const int64_t end = begin + p.chunk < p.slots ? begin + p.chunk : p.slots;
  for (int64_t base = begin; base < end; base += 32) {
    const int64_t slot = base + lane;
    const int32_t expert = slot < end ? expert_of_slot(p, slot) : -1;
    const bool valid = expert >= 0 && expert < p.num_experts;
    const unsigned peers = __match_any_sync(0xffffffffu, valid ? expert : -1);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (slot < end)
      at(p.rows, p.rows_stride0, p.rows_stride1, slot / p.slots_per_token, slot % p.slots_per_token) =
          valid ? next_row[expert] + rank : -1;
    __syncwarp();
    if (valid && rank == 0) next_row[expert] += __popc(peers);
    __syncwarp();
  }
}

std::optional<std::string> supports_dispatch_map(const MoeDispatchMapArgs& args) {
  const int64_t experts = args.expert_offsets.size(0) - 1;
  if (experts <= kMapMaxExperts) return std::nullopt;
  return fmt::format("{} experts; supported: at most {} (one shared-memory counter each)", experts, kMapMaxExperts);
}

void dispatch_map_fused(const MoeDispatchMapArgs& args) {
  const Device device = args.experts.device();
  const int num_experts = int(args.expert_offsets.size(0) - 1);
  const int64_t slots = args.experts.numel();
  LaunchScope scope("moe_dispatch_map", device, args.stream);
  const Stream stream = scope.tensor_stream();
  // About kMapChunks chunks: the scan's serial walk over chunks and each rank warp's walk over its slots stay short.
  const int64_t chunk = std::max<int64_t>(kMapMinChunk, round_up(ceil_div(slots, kMapChunks), 32));
  const int64_t chunks = ceil_div(slots, chunk);
  Tensor chunk_counts = Tensor::empty(Shape{chunks > 0 ? chunks : 1, num_experts}, DType::int32, device, stream);
  Tensor totals = Tensor::empty(Shape{num_experts}, DType::int32, device, stream);
  const DispatchMapParams params{.experts = args.experts.data_as<int32_t>(),
                                 .experts_stride0 = args.experts.stride(0),
                                 .experts_stride1 = args.experts.stride(1),
                                 .rows = args.rows.data_as<int32_t>(),
                                 .rows_stride0 = args.rows.stride(0),
                                 .rows_stride1 = args.rows.stride(1),
                                 .offsets = args.expert_offsets.data_as<int32_t>(),
                                 .offsets_stride = args.expert_offsets.stride(0),
                                 .chunk_counts = chunk_counts.data_as<int32_t>(),
                                 .totals = totals.data_as<int32_t>(),
                                 .slots_per_token = args.experts.size(1),
                                 .slots = slots,
                                 .chunk = chunk,
                                 .chunks = chunks,
                                 .num_experts = num_experts};
  const size_t shared_bytes = size_t(num_experts) * sizeof(int32_t);
  if (chunks > 0) {
    dispatch_histogram_kernel<<<unsigned(chunks), 256, shared_bytes, scope.stream()>>>(params);
    scope.check_launch();
  }
  dispatch_scan_kernel<<<1, kScanThreads, 0, scope.stream()>>>(params);
  scope.check_launch();
  if (chunks > 0) {
    dispatch_rank_kernel<<<unsigned(chunks), 32, shared_bytes, scope.stream()>>>(params);
    scope.check_launch();
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Row kernels. A thread owns one vector column (kVec elements) and walks tokens blockIdx.y, + gridDim.y, ...

struct RowParams {
  const void* input;
  int64_t input_stride;
  void* output;
  int64_t output_stride;
  const int32_t* rows;
  int64_t rows_stride0, rows_stride1;
  const float* scores;
  int64_t scores_stride0, scores_stride1;
  int64_t tokens, slots, buffer_rows, vectors;
};

__device__ __forceinline__ int64_t row_of(const RowParams& p, int64_t token, int64_t slot) {
  const int64_t row = at(p.rows, p.rows_stride0, p.rows_stride1, token, slot);
  return row >= 0 && row < p.buffer_rows ? row : -1;
}

// output[rows[t, j]] = input[t], bit for bit.
template <class T, int kVec>
__global__ void __launch_bounds__(256) permute_kernel(const RowParams p) {
  const int64_t vector = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vector >= p.vectors) return;
  const int64_t column = vector * kVec;
  for (int64_t token = blockIdx.y; token < p.tokens; token += gridDim.y) {
    const Vector<T, kVec> pack = load_pack<kVec>(static_cast<const T*>(p.input) + token * p.input_stride + column);
    for (int64_t slot = 0; slot < p.slots; ++slot) {
      const int64_t row = row_of(p, token, slot);
      if (row >= 0)
        *reinterpret_cast<Vector<T, kVec>*>(static_cast<T*>(p.output) + row * p.output_stride + column) = pack;
    }
  }
}

// output[t] = sum_j input[rows[t, j]] in fp32, slot order, one rounding.
template <class T, int kVec>
__global__ void __launch_bounds__(256) unpermute_kernel(const RowParams p) {
  const int64_t vector = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vector >= p.vectors) return;
  const int64_t column = vector * kVec;
  for (int64_t token = blockIdx.y; token < p.tokens; token += gridDim.y) {
    float sum[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) sum[i] = 0.0f;
    for (int64_t slot = 0; slot < p.slots; ++slot) {
      const int64_t row = row_of(p, token, slot);
      if (row < 0) continue;
      float values[kVec];
      load_floats<kVec>(static_cast<const T*>(p.input) + row * p.input_stride + column, values);
#pragma unroll
      for (int i = 0; i < kVec; ++i) sum[i] += values[i];
    }
    store_floats<kVec>(static_cast<T*>(p.output) + token * p.output_stride + column, sum);
  }
}

// output[rows[t, j]] = scores[t, j] * input[rows[t, j]] (output may be input: each element is read, then written, by
// the same thread).
template <class T, int kVec>
__global__ void __launch_bounds__(256) scale_rows_kernel(const RowParams p) {
  const int64_t vector = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vector >= p.vectors) return;
  const int64_t column = vector * kVec;
  for (int64_t token = blockIdx.y; token < p.tokens; token += gridDim.y)
    for (int64_t slot = 0; slot < p.slots; ++slot) {
      const int64_t row = row_of(p, token, slot);
      if (row < 0) continue;
      const float score = at(p.scores, p.scores_stride0, p.scores_stride1, token, slot);
      float values[kVec];
      load_floats<kVec>(static_cast<const T*>(p.input) + row * p.input_stride + column, values);
#pragma unroll
      for (int i = 0; i < kVec; ++i) values[i] = score * values[i];
      store_floats<kVec>(static_cast<T*>(p.output) + row * p.output_stride + column, values);
    }
}

struct ScaleBackwardParams {
  const void* grad_output;
  int64_t grad_output_stride;
  const void* input;
  int64_t input_stride;
  void* grad_input;
  int64_t grad_input_stride;
  const int32_t* rows;
  int64_t rows_stride0, rows_stride1;
  const float* scores;
  int64_t scores_stride0, scores_stride1;
  float* grad_scores;
  int64_t grad_scores_stride0, grad_scores_stride1;
  int64_t tokens, slots, buffer_rows, vectors;
};

// One block per slot (t, j), grid-stride: grad_scores[t, j] = <grad_output, input>[row] summed in a fixed order, and
// grad_input[row] = score * grad_output[row] (grad_input may be grad_output: each element is read, then written, by
// the same thread).
template <class T, int kVec>
__global__ void __launch_bounds__(256) scale_rows_backward_kernel(const ScaleBackwardParams p) {
  __shared__ float scratch[32];
  const int64_t pairs = p.tokens * p.slots;
  for (int64_t pair = blockIdx.x; pair < pairs; pair += gridDim.x) {
    const int64_t token = pair / p.slots, slot = pair % p.slots;
    int64_t row = at(p.rows, p.rows_stride0, p.rows_stride1, token, slot);
    if (row < 0 || row >= p.buffer_rows) row = -1;
    const float score = at(p.scores, p.scores_stride0, p.scores_stride1, token, slot);
    float dot = 0.0f;
    if (row >= 0)
      for (int64_t vector = threadIdx.x; vector < p.vectors; vector += blockDim.x) {
        const int64_t column = vector * kVec;
        float grad[kVec], values[kVec];
        load_floats<kVec>(static_cast<const T*>(p.grad_output) + row * p.grad_output_stride + column, grad);
        load_floats<kVec>(static_cast<const T*>(p.input) + row * p.input_stride + column, values);
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          dot += grad[i] * values[i];
          grad[i] = score * grad[i];
        }
        store_floats<kVec>(static_cast<T*>(p.grad_input) + row * p.grad_input_stride + column, grad);
      }
    dot = block_sum(dot, scratch);
    if (threadIdx.x == 0) at(p.grad_scores, p.grad_scores_stride0, p.grad_scores_stride1, token, slot) = dot;
  }
}

std::optional<std::string> supports_rows(std::string_view input_name, const Tensor& input,
                                         std::string_view output_name, const Tensor& output) {
  if (auto reason = cuda_floating_reason(input_name, input)) return reason;
  if (auto reason = inner_contiguous_reason(input_name, input)) return reason;
  return inner_contiguous_reason(output_name, output);
}

std::optional<std::string> supports_permute(const MoePermuteArgs& args) {
  return supports_rows("input", args.input, "output", args.output);
}
std::optional<std::string> supports_unpermute(const MoeUnpermuteArgs& args) {
  return supports_rows("input", args.input, "output", args.output);
}
std::optional<std::string> supports_scale_rows(const MoeScaleRowsArgs& args) {
  if (auto reason = float32_reason("scores", args.scores)) return reason;
  return supports_rows("input", args.input, "output", args.output);
}
std::optional<std::string> supports_scale_rows_backward(const MoeScaleRowsBackwardArgs& args) {
  if (auto reason = float32_reason("scores", args.scores)) return reason;
  if (auto reason = supports_rows("grad_output", args.grad_output, "grad_input", args.grad_input)) return reason;
  return inner_contiguous_reason("input", args.input);
}

// RowParams of a (tokens, slots) map between `input` and `output`, with the vector width set by the launcher.
RowParams row_params(const Tensor& input, const Tensor& output, const Tensor& rows, const Tensor* scores,
                     int64_t buffer_rows) {
  return RowParams{.input = input.data(),
                   .input_stride = row_stride(input),
                   .output = output.data(),
                   .output_stride = row_stride(output),
                   .rows = rows.data_as<int32_t>(),
                   .rows_stride0 = rows.stride(0),
                   .rows_stride1 = rows.stride(1),
                   .scores = scores != nullptr ? scores->data_as<float>() : nullptr,
                   .scores_stride0 = scores != nullptr ? scores->stride(0) : 0,
                   .scores_stride1 = scores != nullptr ? scores->stride(1) : 0,
                   .tokens = rows.size(0),
                   .slots = rows.size(1),
                   .buffer_rows = buffer_rows,
                   .vectors = 0};
}

// Launches Kernel<T, kVec> (16-byte vectors when `input` and `output` allow, else one element) over (vector columns,
// tokens) for a row op of `width` columns.
template <template <class, int> class Launch>
void launch_rows(const char* op, const Tensor& input, const Tensor& output, int64_t width, RowParams params,
                 Stream stream) {
  if (params.tokens == 0 || params.slots == 0 || width == 0) return;
  LaunchScope scope(op, input.device(), stream);
  visit_floating(input.dtype(), [&]<class T>(std::type_identity<T>) {
    constexpr int kVec = kVectorElements<T>;
    const bool vectorized = width % kVec == 0 && rows_aligned<T>(input) && rows_aligned<T>(output);
    params.vectors = vectorized ? width / kVec : width;
    const int threads = row_threads(params.vectors);
    const dim3 grid = row_grid(ceil_div(params.vectors, threads), params.tokens, scope);
    if (vectorized)
      Launch<T, kVec>::run(grid, threads, scope.stream(), params);
    else
      Launch<T, 1>::run(grid, threads, scope.stream(), params);
    scope.check_launch();
  });
}

#define FLM_MOE_ROW_LAUNCH(Name, kernel)                                                      \
  template <class T, int kVec>                                                                \
  struct Name {                                                                               \
    static void run(dim3 grid, int threads, cudaStream_t stream, const RowParams& params) {   \
      kernel<T, kVec><<<grid, threads, 0, stream>>>(params);                                  \
    }                                                                                         \
  };
FLM_MOE_ROW_LAUNCH(PermuteLaunch, permute_kernel)
FLM_MOE_ROW_LAUNCH(UnpermuteLaunch, unpermute_kernel)
FLM_MOE_ROW_LAUNCH(ScaleRowsLaunch, scale_rows_kernel)
#undef FLM_MOE_ROW_LAUNCH

void permute_fused(const MoePermuteArgs& args) {
  launch_rows<PermuteLaunch>("moe_permute", args.input, args.output, args.input.size(1),
                             row_params(args.input, args.output, args.rows, nullptr, args.output.size(0)),
                             args.stream);
}

void unpermute_fused(const MoeUnpermuteArgs& args) {
  launch_rows<UnpermuteLaunch>("moe_unpermute", args.input, args.output, args.input.size(1),
                               row_params(args.input, args.output, args.rows, nullptr, args.input.size(0)),
                               args.stream);
}

void scale_rows_fused(const MoeScaleRowsArgs& args) {
  launch_rows<ScaleRowsLaunch>("moe_scale_rows", args.input, args.output, args.input.size(1),
                               row_params(args.input, args.output, args.rows, &args.scores, args.input.size(0)),
                               args.stream);
}

void scale_rows_backward_fused(const MoeScaleRowsBackwardArgs& args) {
  const int64_t tokens = args.rows.size(0), slots = args.rows.size(1), width = args.grad_output.size(1);
  if (tokens == 0 || slots == 0) return;
  LaunchScope scope("moe_scale_rows_backward", args.grad_output.device(), args.stream);
  visit_floating(args.grad_output.dtype(), [&]<class T>(std::type_identity<T>) {
    constexpr int kVec = kVectorElements<T>;
    const bool vectorized = width % kVec == 0 && rows_aligned<T>(args.grad_output) && rows_aligned<T>(args.input) &&
                            rows_aligned<T>(args.grad_input);
    const ScaleBackwardParams params{.grad_output = args.grad_output.data(),
                                     .grad_output_stride = row_stride(args.grad_output),
                                     .input = args.input.data(),
                                     .input_stride = row_stride(args.input),
                                     .grad_input = args.grad_input.data(),
                                     .grad_input_stride = row_stride(args.grad_input),
                                     .rows = args.rows.data_as<int32_t>(),
                                     .rows_stride0 = args.rows.stride(0),
                                     .rows_stride1 = args.rows.stride(1),
                                     .scores = args.scores.data_as<float>(),
                                     .scores_stride0 = args.scores.stride(0),
                                     .scores_stride1 = args.scores.stride(1),
                                     .grad_scores = args.grad_scores.data_as<float>(),
                                     .grad_scores_stride0 = args.grad_scores.stride(0),
                                     .grad_scores_stride1 = args.grad_scores.stride(1),
                                     .tokens = tokens,
                                     .slots = slots,
                                     .buffer_rows = args.grad_output.size(0),
                                     .vectors = vectorized ? width / kVec : width};
    // The block size depends on the width only, so the summation order is fixed by the shape.
    const int threads = std::max(32, row_threads(params.vectors));
    const unsigned grid = grid_for(tokens * slots, 1, scope, 16);
    if (vectorized)
      scale_rows_backward_kernel<T, kVec><<<grid, threads, 0, scope.stream()>>>(params);
    else
      scale_rows_backward_kernel<T, 1><<<grid, threads, 0, scope.stream()>>>(params);
    scope.check_launch();
  });
}

}  // namespace

FLM_REGISTER_KERNEL(MoeRouteForward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_route_forward, &route_forward_fused,
                    "one warp per token (top-k by warp arg-max), statistics by per-block partials in a fixed order; "
                    "Sinkhorn on the device, its convergence flag read every 8 iterations");
FLM_REGISTER_KERNEL(MoeRouteBackward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_route_backward, &route_backward_fused, "one warp per token, softmax recomputed");
FLM_REGISTER_KERNEL(MoeDispatchMap, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_dispatch_map, &dispatch_map_fused,
                    "chunk histograms, one-block scan, stable ranks by warp match: no host round trip");
FLM_REGISTER_KERNEL(MoePermute, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline, &supports_permute,
                    &permute_fused, "row scatter, 16-byte accesses");
FLM_REGISTER_KERNEL(MoeUnpermute, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_unpermute, &unpermute_fused, "row gather-sum in fp32, slot order, 16-byte accesses");
FLM_REGISTER_KERNEL(MoeScaleRows, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_scale_rows, &scale_rows_fused, "row scaling, 16-byte accesses");
FLM_REGISTER_KERNEL(MoeScaleRowsBackward, DeviceType::cuda, "fused", /*priority=*/100, KernelKind::baseline,
                    &supports_scale_rows_backward, &scale_rows_backward_fused,
                    "one block per row: dot product in a fixed order, scaled gradient in the same pass");

}  // namespace fast_llm::kernels::cuda
