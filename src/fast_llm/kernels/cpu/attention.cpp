// CPU reference of attention_forward / attention_backward (kernels/attention.h).
//
// Exact softmax attention over packed documents, one query row at a time: the scores of a query against the keys it
// may see are held in a row buffer of at most one document's length (per thread), never a (tokens, tokens) matrix.
// Positions are key rows: query row i sits at p = query_offset + i. Query p of document [begin, end) sees the keys j
// in [begin, end) with j <= p when causal, and 0 <= p - j < window_size when a window is set (a window never shows
// later keys, as flash-attn's (window_size - 1, 0) in Fast-LLM): always one contiguous range [first_key, last_key).
// A document's queries are the part of it inside the query range [query_offset, query_offset + query_tokens).
//
// query / key / value / output and their gradients: (tokens, heads or head_groups, head_size), any strides, one
// floating dtype; math in fp32 for fp32 / bf16 / fp16 (rounded on store) and fp64 for fp64. logsumexp: (heads,
// query_tokens) in fp32 as the header asks, or fp64 (exact fp64 tests). cu_seqlens: (documents + 1) int32, from 0 to
// key_tokens.
//
// Forward runs one (document, head) per task. Backward runs one (document, key/value group) per task, so the heads of
// a group add into the same dK / dV rows without races; those are accumulated in (document length, head_size) buffers
// and written (=) once the group is done (every key row lies in one document, so every row is written).
#include "fast_llm/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/kernels/cpu/reference_helpers.h"

namespace fast_llm::kernels::cpu {
namespace {

// Element (token, head, channel) of a rank-3 tensor with any strides.
template <class T>
struct TokenHeadView {
  T* data;
  int64_t token_stride, head_stride, channel_stride;

  explicit TokenHeadView(const Tensor& tensor)
      : data(tensor.data_as<std::remove_const_t<T>>()),
        token_stride(tensor.stride(0)),
        head_stride(tensor.stride(1)),
        channel_stride(tensor.stride(2)) {}

  T& operator()(int64_t token, int64_t head, int64_t channel) const {
    return data[token * token_stride + head * head_stride + channel * channel_stride];
  }
};

struct Shapes {
  int64_t query_tokens, key_tokens, query_offset, heads, head_groups, head_size;
  std::vector<int64_t> document_begins;  // (documents + 1), in key rows

  int64_t documents() const { return int64_t(document_begins.size()) - 1; }
  int64_t heads_per_group() const { return heads / head_groups; }
  // The key rows of document `document` that are queries too: [first, last) (empty when first >= last).
  std::pair<int64_t, int64_t> query_positions(int64_t document) const {
    return {std::max(document_begins[size_t(document)], query_offset),
            std::min(document_begins[size_t(document + 1)], query_offset + query_tokens)};
  }
};

// The keys query `token` of document [begin, end) may see: [first, last).
struct KeyRange {
  int64_t first, last;
};

KeyRange allowed_keys(int64_t token, int64_t begin, int64_t end, bool causal, const std::optional<int64_t>& window) {
  const int64_t last = causal || window ? token + 1 : end;
  const int64_t first = window ? std::max(begin, token - *window + 1) : begin;  // i - j < window <=> j > i - window
  return {first, std::max(first, last)};
}

// The sizes of the call, and the document boundaries read from cu_seqlens, checked against the key rows (the call's
// shapes are the contract's, checked by the entry function).
Shapes read_shapes(std::string_view op, const Tensor& query, const Tensor& key, const Tensor& cu_seqlens,
                   int64_t max_seqlen, int64_t query_offset) {
  Shapes shapes{.query_tokens = query.size(0),
                .key_tokens = key.size(0),
                .query_offset = query_offset,
                .heads = query.size(1),
                .head_groups = key.size(1),
                .head_size = query.size(2),
                .document_begins = {}};
  const int32_t* offsets = cu_seqlens.data_as<int32_t>();
  for (int64_t index = 0; index < cu_seqlens.size(0); ++index)
    shapes.document_begins.push_back(offsets[index * cu_seqlens.stride(0)]);
  const std::vector<int64_t>& begins = shapes.document_begins;
  FLM_CHECK(begins.front() == 0 && begins.back() == shapes.key_tokens, op,
            "cu_seqlens runs from {} to {}, expected 0 to the number of keys {}", begins.front(), begins.back(),
            shapes.key_tokens);
  int64_t longest = 0;
  for (int64_t document = 0; document < shapes.documents(); ++document) {
    const int64_t length = begins[size_t(document + 1)] - begins[size_t(document)];
    FLM_CHECK(length >= 0, op, "cu_seqlens decreases at document {}: {} then {}", document, begins[size_t(document)],
              begins[size_t(document + 1)]);
    longest = std::max(longest, length);
  }
  FLM_CHECK(max_seqlen >= longest, op, "max_seqlen is {}, the longest document has {} tokens", max_seqlen, longest);
  return shapes;
}

// ---------------------------------------------------------------------------------------------------------------------
// Forward

void attention_forward_reference(const AttentionForwardArgs& args) {
  const Shapes shapes =
      read_shapes("attention_forward", args.query, args.key, args.cu_seqlens, args.max_seqlen, args.query_offset);

  visit_floating_dtype(args.query.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const TokenHeadView<const T> query(args.query);  // (query_tokens, heads, head_size)
    const TokenHeadView<const T> key(args.key);      // (key_tokens, head_groups, head_size)
    const TokenHeadView<const T> value(args.value);  // (key_tokens, head_groups, head_size)
    const TokenHeadView<T> output(args.output);      // (query_tokens, heads, head_size)
    const int64_t query_tokens = shapes.query_tokens, offset = shapes.query_offset;
    std::vector<Compute> logsumexp(size_t(shapes.heads * query_tokens));  // (heads, query_tokens)
    const Compute scale = Compute(args.softmax_scale);
    const int64_t tasks = shapes.documents() * shapes.heads;

#pragma omp parallel for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t document = task / shapes.heads, head = task % shapes.heads;
      const int64_t group = head / shapes.heads_per_group();
      const int64_t begin = shapes.document_begins[size_t(document)];
      const int64_t end = shapes.document_begins[size_t(document + 1)];
      const auto [first_query, last_query] = shapes.query_positions(document);
      std::vector<Compute> scores(size_t(end - begin));         // (keys of the row)
      std::vector<Compute> accumulator(size_t(shapes.head_size));  // (head_size)
      for (int64_t position = first_query; position < last_query; ++position) {
        const int64_t token = position - offset;  // query row
        const KeyRange keys = allowed_keys(position, begin, end, args.causal, args.window_size);
        if (keys.first == keys.last) {
          for (int64_t channel = 0; channel < shapes.head_size; ++channel)
            output(token, head, channel) = store_value<T>(0);
          logsumexp[size_t(head * query_tokens + token)] = -std::numeric_limits<Compute>::infinity();
          continue;
        }
        // s_j = scale q . k_j;  lse = m + log(sum_j exp(s_j - m)) with m = max_j s_j;  out = sum_j exp(s_j - lse) v_j
        Compute max_score = -std::numeric_limits<Compute>::infinity();
        for (int64_t key_token = keys.first; key_token < keys.last; ++key_token) {
          Compute dot = 0;
          for (int64_t channel = 0; channel < shapes.head_size; ++channel)
            dot += load_value(query(token, head, channel)) * load_value(key(key_token, group, channel));
          const Compute score = scale * dot;
          scores[size_t(key_token - keys.first)] = score;
          max_score = std::max(max_score, score);
        }
        Compute sum = 0;
        for (int64_t key_token = keys.first; key_token < keys.last; ++key_token)
          sum += std::exp(scores[size_t(key_token - keys.first)] - max_score);
        const Compute row_logsumexp = max_score + std::log(sum);
        std::fill(accumulator.begin(), accumulator.end(), Compute(0));
        for (int64_t key_token = keys.first; key_token < keys.last; ++key_token) {
          const Compute probability = std::exp(scores[size_t(key_token - keys.first)] - row_logsumexp);
          for (int64_t channel = 0; channel < shapes.head_size; ++channel)
            accumulator[size_t(channel)] += probability * load_value(value(key_token, group, channel));
        }
        for (int64_t channel = 0; channel < shapes.head_size; ++channel)
          output(token, head, channel) = store_value<T>(accumulator[size_t(channel)]);
        logsumexp[size_t(head * query_tokens + token)] = row_logsumexp;
      }
    }
    write_values<Compute>(args.logsumexp, logsumexp, /*accumulate=*/false);
  });
}

// ---------------------------------------------------------------------------------------------------------------------
// Backward

void attention_backward_reference(const AttentionBackwardArgs& args) {
  const Shapes shapes =
      read_shapes("attention_backward", args.query, args.key, args.cu_seqlens, args.max_seqlen, args.query_offset);

  visit_floating_dtype(args.query.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    const TokenHeadView<const T> grad_output(args.grad_output);  // (query_tokens, heads, head_size)
    const TokenHeadView<const T> query(args.query);              // (query_tokens, heads, head_size)
    const TokenHeadView<const T> key(args.key);                  // (key_tokens, head_groups, head_size)
    const TokenHeadView<const T> value(args.value);              // (key_tokens, head_groups, head_size)
    const TokenHeadView<const T> output(args.output);            // (query_tokens, heads, head_size)
    const TokenHeadView<T> grad_query(args.grad_query);          // (query_tokens, heads, head_size)
    const TokenHeadView<T> grad_key(args.grad_key);              // (key_tokens, head_groups, head_size)
    const TokenHeadView<T> grad_value(args.grad_value);          // (key_tokens, head_groups, head_size)
    const std::vector<Compute> logsumexp = read_values<Compute>(args.logsumexp);  // (heads, query_tokens)
    const int64_t query_tokens = shapes.query_tokens, offset = shapes.query_offset;
    const Compute scale = Compute(args.softmax_scale);
    const int64_t head_size = shapes.head_size;
    const int64_t tasks = shapes.documents() * shapes.head_groups;

#pragma omp parallel for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t document = task / shapes.head_groups, group = task % shapes.head_groups;
      const int64_t begin = shapes.document_begins[size_t(document)];
      const int64_t end = shapes.document_begins[size_t(document + 1)];
      std::vector<Compute> grad_key_sum(size_t((end - begin) * head_size));    // (document tokens, head_size)
      std::vector<Compute> grad_value_sum(size_t((end - begin) * head_size));  // (document tokens, head_size)
      std::vector<Compute> grad_query_row(static_cast<size_t>(head_size));               // (head_size)
      const auto [first_query, last_query] = shapes.query_positions(document);
      for (int64_t head = group * shapes.heads_per_group(); head < (group + 1) * shapes.heads_per_group(); ++head) {
        for (int64_t position = first_query; position < last_query; ++position) {
          const int64_t token = position - offset;  // query row
          const KeyRange keys = allowed_keys(position, begin, end, args.causal, args.window_size);
          const Compute row_logsumexp = logsumexp[size_t(head * query_tokens + token)];
          std::fill(grad_query_row.begin(), grad_query_row.end(), Compute(0));
          // A row without keys has a constant (zero) output: no gradient flows through it.
          if (keys.first < keys.last && std::isfinite(row_logsumexp)) {
            // delta = rowsum(dO * O) = sum_j p_j dP_j, the softmax's correction term.
            Compute delta = 0;
            for (int64_t channel = 0; channel < head_size; ++channel)
              delta += load_value(grad_output(token, head, channel)) * load_value(output(token, head, channel));
            for (int64_t key_token = keys.first; key_token < keys.last; ++key_token) {
              // p_j = exp(scale q . k_j - lse);  dP_j = dO . v_j;  dS_j = p_j (dP_j - delta)
              Compute score = 0, grad_probability = 0;
              for (int64_t channel = 0; channel < head_size; ++channel) {
                score += load_value(query(token, head, channel)) * load_value(key(key_token, group, channel));
                grad_probability +=
                    load_value(grad_output(token, head, channel)) * load_value(value(key_token, group, channel));
              }
              const Compute probability = std::exp(scale * score - row_logsumexp);
              const Compute grad_score = probability * (grad_probability - delta);
              // dQ_i += dS_j k_j;  dK_j += dS_j q_i;  dV_j += p_j dO_i  (scale applied to dQ and dK at the end)
              Compute* grad_key_row = grad_key_sum.data() + (key_token - begin) * head_size;
              Compute* grad_value_row = grad_value_sum.data() + (key_token - begin) * head_size;
              for (int64_t channel = 0; channel < head_size; ++channel) {
                grad_query_row[size_t(channel)] += grad_score * load_value(key(key_token, group, channel));
                grad_key_row[channel] += grad_score * load_value(query(token, head, channel));
                grad_value_row[channel] += probability * load_value(grad_output(token, head, channel));
              }
            }
          }
          for (int64_t channel = 0; channel < head_size; ++channel)
            grad_query(token, head, channel) = store_value<T>(scale * grad_query_row[size_t(channel)]);
        }
      }
      for (int64_t token = begin; token < end; ++token) {
        for (int64_t channel = 0; channel < head_size; ++channel) {
          const size_t index = size_t((token - begin) * head_size + channel);
          grad_key(token, group, channel) = store_value<T>(scale * grad_key_sum[index]);
          grad_value(token, group, channel) = store_value<T>(grad_value_sum[index]);
        }
      }
    }
  });
  unrotate_attention_gradients(args, /*query=*/true, /*key=*/true);
}

}  // namespace

FLM_REGISTER_KERNEL(AttentionForward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &attention_forward_reference,
                    "exact softmax per (document, head) and query row, O(document) row buffer; fp32 math (fp64 for "
                    "fp64)");
FLM_REGISTER_KERNEL(AttentionBackward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &attention_backward_reference,
                    "probabilities recomputed from logsumexp per (document, key/value group); fp32 math (fp64 for "
                    "fp64)");

}  // namespace fast_llm::kernels::cpu
