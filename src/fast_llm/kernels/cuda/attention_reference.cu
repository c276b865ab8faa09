// Plain CUDA attention forward / backward (kernels/attention.h), variant "reference": the CUDA baseline, for every
// dtype a model computes in on the GPU (fp32, bf16, fp16), any head_size up to 256 and any strides. Slow (one warp
// walks the keys of one row one at a time) but simple, exact to fp32 math, deterministic, and O(tokens) memory.
//
// A warp owns one row; lane l holds channels l, l + 32, ... (kPerLane of them); dot products are warp butterflies.
// Positions are key rows: query row i sits at p = query_offset + i (a piece of a sequence against a longer key range;
// 0 and as many keys as queries otherwise). The document of a position is found by binary search in cu_seqlens (on
// the device). The keys query p of document [begin, end) sees: [first, last) with last = p + 1 when causal or windowed
// (end otherwise) and first = max(begin, p - window + 1) with a window (begin otherwise), as the CPU reference.
//   forward: online softmax over the row's keys (natural exp), out = sum p v / sum p, lse = m + log(sum).
//   backward: (a) per (token, head): delta = dO . O into a (heads, tokens) scratch, and dQ = scale sum_j dS_j k_j;
//             (b) per (key token, group): dK = scale sum dS q_i, dV = sum p dO_i over the heads of the group and the
//             queries (of the query range) that see the key. No atomics.
#include "fast_llm/kernels/cuda/attention_tile.cuh"

namespace fast_llm::kernels::cuda::attention {
namespace {

constexpr int kReferenceThreads = 256;  // 8 rows per block
constexpr int kMaxHeadSize = 256;

struct Strided {
  const void* data;
  int64_t token_stride, head_stride, channel_stride;
};

inline Strided strided(const Tensor& tensor) {
  return {tensor.data(), tensor.stride(0), tensor.stride(1), tensor.stride(2)};
}

struct ReferenceParams {
  Strided query, key, value, output, grad_output;  // output: written by the forward, read by the backward
  Strided grad_query, grad_key, grad_value;
  float* logsumexp;  // (heads, tokens), strided
  int64_t logsumexp_head_stride, logsumexp_token_stride;
  float* delta;  // (heads, tokens) contiguous scratch of the backward
  const int32_t* cu_seqlens;  // of the key rows
  int64_t cu_seqlens_stride;
  int documents;
  int64_t tokens;        // query rows
  int64_t key_tokens;    // key rows
  int64_t query_offset;  // key row of query row 0
  int heads, heads_per_group, head_size;
  float softmax_scale;
  bool causal;  // also true with a window
  int window;   // 0: none
};

struct Document {
  int64_t begin, end;
};

__device__ __forceinline__ Document document_of(const ReferenceParams& p, int64_t token) {
  // cu[low] <= token < cu[high] throughout: cu[0] = 0 and cu[documents] = key_tokens.
  int low = 0, high = p.documents;
  while (high - low > 1) {
    const int middle = (low + high) / 2;
    if (p.cu_seqlens[middle * p.cu_seqlens_stride] <= token)
      low = middle;
    else
      high = middle;
  }
  return {p.cu_seqlens[low * p.cu_seqlens_stride], p.cu_seqlens[high * p.cu_seqlens_stride]};
}

template <class T, int kPerLane>
__device__ __forceinline__ void load_row(const Strided& tensor, int64_t token, int64_t head, int head_size, int lane,
                                         float (&values)[kPerLane]) {
  const T* row = static_cast<const T*>(tensor.data) + token * tensor.token_stride + head * tensor.head_stride;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int channel = lane + 32 * i;
    values[i] = channel < head_size ? load(row[channel * tensor.channel_stride]) : 0.0f;
  }
}

template <class T, int kPerLane>
__device__ __forceinline__ void store_row(const Strided& tensor, int64_t token, int64_t head, int head_size, int lane,
                                          const float (&values)[kPerLane], float scale) {
  T* row = static_cast<T*>(const_cast<void*>(tensor.data)) + token * tensor.token_stride + head * tensor.head_stride;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int channel = lane + 32 * i;
    if (channel < head_size) row[channel * tensor.channel_stride] = store<T>(values[i] * scale);
  }
}

template <int kPerLane>
__device__ __forceinline__ float dot(const float (&a)[kPerLane], const float (&b)[kPerLane]) {
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) sum += a[i] * b[i];
  return warp_sum(sum);
}

// (token, head) of the warp's row, or false past the last row.
__device__ __forceinline__ bool warp_row(int64_t rows, int64_t& row) {
  row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  return row < rows;
}

template <class T, int kPerLane>
__global__ void __launch_bounds__(kReferenceThreads) attention_forward_reference_kernel(const ReferenceParams p) {
  int64_t row;
  if (!warp_row(p.tokens * p.heads, row)) return;
  const int lane = int(threadIdx.x) % 32;
  const int64_t token = row / p.heads, head = row % p.heads, group = head / p.heads_per_group;
  const int64_t position = p.query_offset + token;
  const Document document = document_of(p, position);
  const int64_t first = p.window > 0 ? max(document.begin, position - p.window + 1) : document.begin;
  const int64_t last = p.causal ? position + 1 : document.end;

  float query[kPerLane], accumulator[kPerLane];
  load_row<T>(p.query, token, head, p.head_size, lane, query);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) accumulator[i] = 0.0f;
  float max_score = -INFINITY, sum = 0.0f;
  for (int64_t key_token = first; key_token < last; ++key_token) {
    float key[kPerLane], value[kPerLane];
    load_row<T>(p.key, key_token, group, p.head_size, lane, key);
    load_row<T>(p.value, key_token, group, p.head_size, lane, value);
    const float score = p.softmax_scale * dot(query, key);
    const float new_max = fmaxf(max_score, score);
    const float correction = expf(max_score - new_max), probability = expf(score - new_max);
    max_score = new_max;
    sum = sum * correction + probability;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) accumulator[i] = accumulator[i] * correction + probability * value[i];
  }
  store_row<T>(p.output, token, head, p.head_size, lane, accumulator, sum > 0.0f ? 1.0f / sum : 0.0f);
  if (lane == 0)
    p.logsumexp[head * p.logsumexp_head_stride + token * p.logsumexp_token_stride] =
        sum > 0.0f ? max_score + logf(sum) : -INFINITY;
}

// (a) delta and dQ, one warp per (token, head).
template <class T, int kPerLane>
__global__ void __launch_bounds__(kReferenceThreads) attention_backward_query_kernel(const ReferenceParams p) {
  int64_t row;
  if (!warp_row(p.tokens * p.heads, row)) return;
  const int lane = int(threadIdx.x) % 32;
  const int64_t token = row / p.heads, head = row % p.heads, group = head / p.heads_per_group;
  const int64_t position = p.query_offset + token;
  const Document document = document_of(p, position);
  const int64_t first = p.window > 0 ? max(document.begin, position - p.window + 1) : document.begin;
  const int64_t last = p.causal ? position + 1 : document.end;
  const float logsumexp = p.logsumexp[head * p.logsumexp_head_stride + token * p.logsumexp_token_stride];

  float query[kPerLane], grad_output[kPerLane], output[kPerLane], grad_query[kPerLane];
  load_row<T>(p.query, token, head, p.head_size, lane, query);
  load_row<T>(p.grad_output, token, head, p.head_size, lane, grad_output);
  load_row<T>(p.output, token, head, p.head_size, lane, output);
  const float delta = dot(grad_output, output);
  if (lane == 0) p.delta[head * p.tokens + token] = delta;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) grad_query[i] = 0.0f;
  if (isfinite(logsumexp)) {  // a row without keys has no gradient
    for (int64_t key_token = first; key_token < last; ++key_token) {
      float key[kPerLane], value[kPerLane];
      load_row<T>(p.key, key_token, group, p.head_size, lane, key);
      load_row<T>(p.value, key_token, group, p.head_size, lane, value);
      const float probability = expf(p.softmax_scale * dot(query, key) - logsumexp);
      const float grad_score = probability * (dot(grad_output, value) - delta);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) grad_query[i] += grad_score * key[i];
    }
  }
  store_row<T>(p.grad_query, token, head, p.head_size, lane, grad_query, p.softmax_scale);
}

// (b) dK and dV, one warp per (key token, group); reads the delta of (a).
template <class T, int kPerLane>
__global__ void __launch_bounds__(kReferenceThreads) attention_backward_key_value_kernel(const ReferenceParams p) {
  const int64_t groups = p.heads / p.heads_per_group;
  int64_t row;
  if (!warp_row(p.key_tokens * groups, row)) return;
  const int lane = int(threadIdx.x) % 32;
  const int64_t key_token = row / groups, group = row % groups;
  const Document document = document_of(p, key_token);
  // The positions of the queries that see the key: p >= key (causal), p < key + window (window), within the query
  // range [query_offset, query_offset + tokens).
  const int64_t first = max(p.causal ? key_token : document.begin, p.query_offset);
  const int64_t last = min(p.window > 0 ? min(document.end, key_token + p.window) : document.end,
                           p.query_offset + p.tokens);

  float key[kPerLane], value[kPerLane], grad_key[kPerLane], grad_value[kPerLane];
  load_row<T>(p.key, key_token, group, p.head_size, lane, key);
  load_row<T>(p.value, key_token, group, p.head_size, lane, value);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) grad_key[i] = grad_value[i] = 0.0f;
  for (int64_t head = group * p.heads_per_group; head < (group + 1) * p.heads_per_group; ++head) {
    for (int64_t position = first; position < last; ++position) {
      const int64_t token = position - p.query_offset;  // query row
      const float logsumexp = p.logsumexp[head * p.logsumexp_head_stride + token * p.logsumexp_token_stride];
      if (!isfinite(logsumexp)) continue;
      float query[kPerLane], grad_output[kPerLane];
      load_row<T>(p.query, token, head, p.head_size, lane, query);
      load_row<T>(p.grad_output, token, head, p.head_size, lane, grad_output);
      const float probability = expf(p.softmax_scale * dot(query, key) - logsumexp);
      const float grad_score = probability * (dot(grad_output, value) - p.delta[head * p.tokens + token]);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        grad_key[i] += grad_score * query[i];
        grad_value[i] += probability * grad_output[i];
      }
    }
  }
  store_row<T>(p.grad_key, key_token, group, p.head_size, lane, grad_key, p.softmax_scale);
  store_row<T>(p.grad_value, key_token, group, p.head_size, lane, grad_value, 1.0f);
}

// ---------------------------------------------------------------------------------------------------------------------
// Host

std::optional<std::string> reference_dtype_and_size_reason(const Tensor& query) {
  if (auto reason = cuda_floating_reason("query", query)) return reason;
  if (query.rank() == 3 && (query.size(2) < 1 || query.size(2) > kMaxHeadSize))
    return fmt::format("head_size {}; supported: 1 to {}", query.size(2), kMaxHeadSize);
  return std::nullopt;
}

template <class Args>
std::optional<std::string> supports_reference(const Args& args) {
  if (auto reason =
          common_reason(args.query, args.key, args.logsumexp, args.cu_seqlens, args.max_seqlen, args.window_size))
    return reason;
  return reference_dtype_and_size_reason(args.query);
}

ReferenceParams reference_params(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& output,
                                 const Tensor& logsumexp, const Tensor& cu_seqlens, double softmax_scale, bool causal,
                                 const std::optional<int64_t>& window_size, int64_t query_offset) {
  return ReferenceParams{.query = strided(query),
                         .key = strided(key),
                         .value = strided(value),
                         .output = strided(output),
                         .grad_output = {},
                         .grad_query = {},
                         .grad_key = {},
                         .grad_value = {},
                         .logsumexp = const_cast<float*>(logsumexp.data_as<float>()),
                         .logsumexp_head_stride = logsumexp.stride(0),
                         .logsumexp_token_stride = logsumexp.stride(1),
                         .delta = nullptr,
                         .cu_seqlens = cu_seqlens.data_as<int32_t>(),
                         .cu_seqlens_stride = cu_seqlens.stride(0),
                         .documents = int(cu_seqlens.size(0) - 1),
                         .tokens = query.size(0),
                         .key_tokens = key.size(0),
                         .query_offset = query_offset,
                         .heads = int(query.size(1)),
                         .heads_per_group = int(query.size(1) / key.size(1)),
                         .head_size = int(query.size(2)),
                         .softmax_scale = float(softmax_scale),
                         .causal = causal || window_size.has_value(),
                         .window = window_size ? int(*window_size) : 0};
}

// Calls function(std::type_identity<T>, std::integral_constant<int, kPerLane>) for the dtype and head size.
template <class Function>
void visit_reference(DType dtype, int64_t head_size, Function&& function) {
  visit_floating(dtype, [&]<class T>(std::type_identity<T> type) {
    if (head_size <= 32)
      function(type, std::integral_constant<int, 1>{});
    else if (head_size <= 64)
      function(type, std::integral_constant<int, 2>{});
    else if (head_size <= 128)
      function(type, std::integral_constant<int, 4>{});
    else
      function(type, std::integral_constant<int, 8>{});
  });
}

unsigned warp_blocks(int64_t rows) { return unsigned(ceil_div(rows * 32, kReferenceThreads)); }

void attention_forward_cuda_reference(const AttentionForwardArgs& args) {
  const int64_t rows = args.query.size(0) * args.query.size(1);
  if (rows == 0 || args.cu_seqlens.size(0) < 2) return;
  LaunchScope scope("attention_forward", args.query.device(), args.stream);
  const ReferenceParams params =
      reference_params(args.query, args.key, args.value, args.output, args.logsumexp, args.cu_seqlens,
                       args.softmax_scale, args.causal, args.window_size, args.query_offset);
  visit_reference(args.query.dtype(), args.query.size(2), [&]<class T, int kPerLane>(
                                                              std::type_identity<T>, std::integral_constant<int, kPerLane>) {
    attention_forward_reference_kernel<T, kPerLane><<<warp_blocks(rows), kReferenceThreads, 0, scope.stream()>>>(params);
  });
  scope.check_launch();
}

void attention_backward_cuda_reference(const AttentionBackwardArgs& args) {
  const Device device = args.query.device();
  const int64_t tokens = args.query.size(0), heads = args.query.size(1), groups = args.key.size(1);
  const int64_t key_tokens = args.key.size(0);
  if (tokens == 0 || args.cu_seqlens.size(0) < 2) return;
  LaunchScope scope("attention_backward", device, args.stream);
  Tensor delta = Tensor::empty(Shape{heads, tokens}, DType::float32, device, scope.tensor_stream());
  ReferenceParams params = reference_params(args.query, args.key, args.value, args.output, args.logsumexp,
                                            args.cu_seqlens, args.softmax_scale, args.causal, args.window_size,
                                            args.query_offset);
  params.grad_output = strided(args.grad_output);
  params.grad_query = strided(args.grad_query);
  params.grad_key = strided(args.grad_key);
  params.grad_value = strided(args.grad_value);
  params.delta = delta.data_as<float>();
  visit_reference(args.query.dtype(), args.query.size(2), [&]<class T, int kPerLane>(
                                                              std::type_identity<T>, std::integral_constant<int, kPerLane>) {
    attention_backward_query_kernel<T, kPerLane>
        <<<warp_blocks(tokens * heads), kReferenceThreads, 0, scope.stream()>>>(params);
    scope.check_launch();
    attention_backward_key_value_kernel<T, kPerLane>
        <<<warp_blocks(key_tokens * groups), kReferenceThreads, 0, scope.stream()>>>(params);
    scope.check_launch();
  });
  unrotate_attention_gradients(args, /*query=*/true, /*key=*/true);
}

}  // namespace

FLM_REGISTER_KERNEL(AttentionForward, DeviceType::cuda, "reference", /*priority=*/0, KernelKind::baseline,
                    &supports_reference<AttentionForwardArgs>, &attention_forward_cuda_reference,
                    "one warp per (token, head) row walks its keys: online softmax in fp32; any strides, fp32 / "
                    "bf16 / fp16, head_size up to 256, a query range inside longer keys");
FLM_REGISTER_KERNEL(AttentionBackward, DeviceType::cuda, "reference", /*priority=*/0, KernelKind::baseline,
                    &supports_reference<AttentionBackwardArgs>, &attention_backward_cuda_reference,
                    "one warp per (token, head) for dQ and per (key, group) for dK / dV, probabilities recomputed from "
                    "logsumexp in fp32; no atomics");

}  // namespace fast_llm::kernels::cuda::attention
