// CUDA variant "split_warps" of attention_decode (kernels/attention_decode.h): one block per (sequence, head), its
// warps taking the allowed cached keys in turn (warp w: keys first + w, first + w + kWarps, ...). Each lane holds
// head_size / 32 consecutive channels of the query and of its warp's running output, so a key or value row is one
// coalesced access per warp; a score is a warp butterfly sum (every lane gets the same bits), and each warp keeps an
// online softmax (running maximum, sum of exponentials, rescaled accumulator). The warps' partial results are merged
// through shared memory in a fixed order, so results are reproducible run to run.
// The new token's key and value are read from `key` / `value` directly (not from the cache, which this launch also
// writes): the block of the first head of each group stores them into the cache rows, and no block reads those rows,
// so there is no race. Head sizes 64 and 128; float32, bfloat16, float16; fp32 math. Enough for decoding, where the
// step's time goes to the weights' matmuls: one block per head reads a few hundred cached rows.
#include "fast_llm/kernels/cuda/common.cuh"
#include "fast_llm/kernels/attention_decode.h"

namespace fast_llm::kernels::cuda {
namespace {

constexpr int kWarps = 4;

struct DecodeParams {
  const void* query;  // (batch, heads, head_size), contiguous
  const void* key;    // (batch, groups, head_size), contiguous
  const void* value;
  void* key_cache;  // (batch, capacity, groups, head_size)
  void* value_cache;
  const int32_t* lengths;  // (batch)
  void* output;            // (batch, heads, head_size), contiguous
  int heads, groups, capacity;
  int window;  // 0: none
  float scale;
};

template <class T, int kHeadSize>
__global__ void __launch_bounds__(kWarps * 32) attention_decode_kernel(DecodeParams p) {
  constexpr int kPerLane = kHeadSize / 32;
  const int sequence = blockIdx.y, head = blockIdx.x;
  const int heads_per_group = p.heads / p.groups, group = head / heads_per_group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int last = p.lengths[sequence];
  const int first = p.window > 0 && last - p.window + 1 > 0 ? last - p.window + 1 : 0;
  const int64_t cache_row_stride = int64_t(p.groups) * kHeadSize;  // between positions of one sequence
  const int64_t cache_base = (int64_t(sequence) * p.capacity * p.groups + group) * kHeadSize + lane * kPerLane;
  const int64_t new_row = (int64_t(sequence) * p.groups + group) * kHeadSize + lane * kPerLane;
  const T* new_key = static_cast<const T*>(p.key) + new_row;
  const T* new_value = static_cast<const T*>(p.value) + new_row;
  T* key_cache = static_cast<T*>(p.key_cache);
  T* value_cache = static_cast<T*>(p.value_cache);

  if (head % heads_per_group == 0 && warp == 0) {
    float row[kPerLane];
    load_floats<kPerLane>(new_key, row);
    store_floats<kPerLane>(key_cache + cache_base + last * cache_row_stride, row);
    load_floats<kPerLane>(new_value, row);
    store_floats<kPerLane>(value_cache + cache_base + last * cache_row_stride, row);
  }

  float query[kPerLane], accumulator[kPerLane];
  load_floats<kPerLane>(static_cast<const T*>(p.query) + (int64_t(sequence) * p.heads + head) * kHeadSize +
                            lane * kPerLane,
                        query);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) accumulator[i] = 0.0f;
  float maximum = -INFINITY, sum = 0.0f;
  for (int position = first + warp; position <= last; position += kWarps) {
    float key[kPerLane], value[kPerLane];
    const bool is_new = position == last;
    load_floats<kPerLane>(is_new ? new_key : key_cache + cache_base + position * cache_row_stride, key);
    load_floats<kPerLane>(is_new ? new_value : value_cache + cache_base + position * cache_row_stride, value);
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) dot += query[i] * key[i];
    const float score = warp_sum(dot) * p.scale;
    const float new_maximum = fmaxf(maximum, score);
    const float correction = __expf(maximum - new_maximum), weight = __expf(score - new_maximum);
    sum = sum * correction + weight;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) accumulator[i] = accumulator[i] * correction + weight * value[i];
    maximum = new_maximum;
  }

  __shared__ float warp_maximum[kWarps], warp_sum_of_weights[kWarps];
  __shared__ float warp_accumulator[kWarps][kHeadSize];
  if (lane == 0) {
    warp_maximum[warp] = maximum;
    warp_sum_of_weights[warp] = sum;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) warp_accumulator[warp][lane * kPerLane + i] = accumulator[i];
  __syncthreads();
  float overall = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) overall = fmaxf(overall, warp_maximum[w]);
  float denominator = 0.0f;
  float factors[kWarps];
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    // A warp that saw no key (fewer keys than warps) has maximum -inf and contributes nothing.
    factors[w] = warp_maximum[w] == -INFINITY ? 0.0f : __expf(warp_maximum[w] - overall);
    denominator += warp_sum_of_weights[w] * factors[w];
  }
  T* output = static_cast<T*>(p.output) + (int64_t(sequence) * p.heads + head) * kHeadSize;
  for (int channel = threadIdx.x; channel < kHeadSize; channel += kWarps * 32) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += warp_accumulator[w][channel] * factors[w];
    output[channel] = store<T>(total / denominator);
  }
}

std::optional<std::string> supports_attention_decode(const AttentionDecodeArgs& args) {
  if (auto reason = cuda_floating_reason("query", args.query)) return reason;
  const int64_t head_size = args.query.size(2);
  if (head_size != 64 && head_size != 128)
    return fmt::format("head_size {}; supported: 64, 128", head_size);
  for (const auto& [name, tensor] : {std::pair<const char*, const Tensor*>{"query", &args.query},
                                     {"key", &args.key},
                                     {"value", &args.value},
                                     {"output", &args.output}})
    if (auto reason = contiguous_reason(name, *tensor)) return reason;
  const size_t lane_bytes = size_t(head_size / 32) * dtype_size(args.query.dtype());
  for (const auto& [name, tensor] : {std::pair<const char*, const Tensor*>{"query", &args.query},
                                     {"key", &args.key},
                                     {"value", &args.value},
                                     {"key_cache", &args.key_cache},
                                     {"value_cache", &args.value_cache}})
    if (!is_aligned(tensor->data(), lane_bytes)) return fmt::format("{} is not aligned to {} bytes", name, lane_bytes);
  if (args.key_cache.size(0) * args.key_cache.size(1) > (int64_t(1) << 31) / args.key_cache.size(2))
    return fmt::format("key_cache has {} rows; at most 2^31 / head_groups are indexed", args.key_cache.size(1));
  return std::nullopt;
}

void attention_decode_split_warps(const AttentionDecodeArgs& args) {
  const int64_t batch = args.query.size(0), heads = args.query.size(1), head_size = args.query.size(2);
  if (batch == 0) return;
  LaunchScope scope("attention_decode", args.query.device(), args.stream);
  const DecodeParams params{.query = args.query.data(),
                            .key = args.key.data(),
                            .value = args.value.data(),
                            .key_cache = args.key_cache.data(),
                            .value_cache = args.value_cache.data(),
                            .lengths = args.lengths.data_as<int32_t>(),
                            .output = args.output.data(),
                            .heads = int(heads),
                            .groups = int(args.key.size(1)),
                            .capacity = int(args.key_cache.size(1)),
                            .window = int(args.window_size.value_or(0)),
                            .scale = float(args.softmax_scale)};
  const dim3 grid{unsigned(heads), unsigned(batch)};
  visit_floating(args.query.dtype(), [&]<class T>(std::type_identity<T>) {
    if (head_size == 64)
      attention_decode_kernel<T, 64><<<grid, kWarps * 32, 0, scope.stream()>>>(params);
    else
      attention_decode_kernel<T, 128><<<grid, kWarps * 32, 0, scope.stream()>>>(params);
  });
  scope.check_launch();
}

}  // namespace

FLM_REGISTER_KERNEL(AttentionDecode, DeviceType::cuda, "split_warps", /*priority=*/100, KernelKind::baseline,
                    &supports_attention_decode, &attention_decode_split_warps,
                    "one block per (sequence, head), keys split over 4 warps, online softmax; fp32 math");

}  // namespace fast_llm::kernels::cuda
