// CPU reference of attention_decode (kernels/attention_decode.h).
//
// Per (sequence, head): store the new key and value row into the cache (first, by the head that leads its group, so
// the rows exist before any head of the group reads them: the stores run before the attention loop), then an exact
// softmax over the allowed cached keys [first, length] with a row buffer of scores. query / key / value / output: any
// strides; caches contiguous (the contract). Math in fp32 for fp32 / bf16 / fp16 (rounded on store) and fp64 for fp64.
#include "fast_llm/kernels/attention_decode.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fast_llm/kernels/cpu/dtype_dispatch.h"

namespace fast_llm::kernels::cpu {
namespace {

void attention_decode_reference(const AttentionDecodeArgs& args) {
  const int64_t batch = args.query.size(0), heads = args.query.size(1), head_size = args.query.size(2);
  const int64_t groups = args.key.size(1), capacity = args.key_cache.size(1);
  const int64_t heads_per_group = heads / groups;
  std::vector<int64_t> lengths(static_cast<size_t>(batch), 0);
  for (int64_t sequence = 0; sequence < batch; ++sequence) {
    lengths[size_t(sequence)] = args.lengths.data_as<int32_t>()[sequence * args.lengths.stride(0)];
    FLM_CHECK(lengths[size_t(sequence)] >= 0 && lengths[size_t(sequence)] < capacity, "attention_decode",
              "sequence {} has {} cached tokens, the cache holds {} (the new token needs a free row)", sequence,
              lengths[size_t(sequence)], capacity);
  }

  visit_floating_dtype(args.query.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    // (b, h, c) of a rank-3 tensor with any strides.
    auto at = [](const Tensor& tensor, int64_t b, int64_t h, int64_t c) -> T& {
      return tensor.data_as<T>()[b * tensor.stride(0) + h * tensor.stride(1) + c * tensor.stride(2)];
    };
    T* key_cache = args.key_cache.data_as<T>();      // (batch, capacity, groups, head_size)
    T* value_cache = args.value_cache.data_as<T>();  // (batch, capacity, groups, head_size)
    auto cache_row = [&](int64_t b, int64_t position, int64_t group) {
      return ((b * capacity + position) * groups + group) * head_size;
    };
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t group = 0; group < groups; ++group)
        for (int64_t c = 0; c < head_size; ++c) {
          key_cache[cache_row(b, lengths[size_t(b)], group) + c] = at(args.key, b, group, c);
          value_cache[cache_row(b, lengths[size_t(b)], group) + c] = at(args.value, b, group, c);
        }

    const Compute scale = Compute(args.softmax_scale);
#pragma omp parallel for
    for (int64_t task = 0; task < batch * heads; ++task) {
      const int64_t b = task / heads, head = task % heads, group = head / heads_per_group;
      const int64_t last = lengths[size_t(b)];  // the new token's position, attended too
      const int64_t first = args.window_size ? std::max<int64_t>(0, last - *args.window_size + 1) : 0;
      std::vector<Compute> scores(size_t(last - first + 1));
      Compute maximum = -std::numeric_limits<Compute>::infinity();
      for (int64_t position = first; position <= last; ++position) {
        Compute dot = 0;
        for (int64_t c = 0; c < head_size; ++c)
          dot += Compute(load_value(at(args.query, b, head, c))) *
                 Compute(load_value(key_cache[cache_row(b, position, group) + c]));
        scores[size_t(position - first)] = scale * dot;
        maximum = std::max(maximum, scores[size_t(position - first)]);
      }
      Compute sum = 0;
      for (Compute& score : scores) sum += (score = std::exp(score - maximum));
      for (int64_t c = 0; c < head_size; ++c) {
        Compute accumulator = 0;
        for (int64_t position = first; position <= last; ++position)
          accumulator += scores[size_t(position - first)] *
                         Compute(load_value(value_cache[cache_row(b, position, group) + c]));
        at(args.output, b, head, c) = store_value<T>(accumulator / sum);
      }
    }
  });
}

}  // namespace

FLM_REGISTER_KERNEL(AttentionDecode, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &attention_decode_reference,
                    "exact softmax per (sequence, head) over its cached keys; fp32 math (fp64 for fp64)");

}  // namespace fast_llm::kernels::cpu
