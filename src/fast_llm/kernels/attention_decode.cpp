// The contract of attention_decode (kernels/attention_decode.h), checked once per call by the entry function. The
// lengths' values are the data's, not the call's: the CPU reference checks them against the capacity, the GPU
// variants trust them.
#include "fast_llm/kernels/attention_decode.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {

void check_attention_decode(const AttentionDecodeArgs& args) {
  const OpContract contract("attention_decode", args.query.device());
  contract.rank("query", args.query, 3, "(batch, heads, head_size)");
  contract.floating("query", args.query);
  contract.rank("key", args.key, 3, "(batch, head_groups, head_size)");
  const int64_t batch = args.query.size(0), heads = args.query.size(1), head_size = args.query.size(2);
  const int64_t groups = args.key.size(1);
  FLM_CHECK(args.key.size(0) == batch && args.key.size(2) == head_size, contract.op(),
            "key has shape {}, expected ({}, head_groups, {}) for query of shape {}", args.key.shape().str(), batch,
            head_size, args.query.shape().str());
  FLM_CHECK(groups > 0 && heads % groups == 0, contract.op(),
            "query has {} heads, key has {} head groups: heads must be a positive multiple of head_groups", heads,
            groups);
  contract.shape("value", args.value, args.key.shape());
  contract.same_dtype("key", args.key, "query", args.query);
  contract.same_dtype("value", args.value, "query", args.query);
  contract.rank("key_cache", args.key_cache, 4, "(batch, capacity, head_groups, head_size)");
  const int64_t capacity = args.key_cache.size(1);
  FLM_CHECK(capacity > 0, contract.op(), "key_cache has no room (capacity 0)");
  contract.shape("key_cache", args.key_cache, Shape{batch, capacity, groups, head_size});
  contract.shape("value_cache", args.value_cache, args.key_cache.shape());
  contract.same_dtype("key_cache", args.key_cache, "query", args.query);
  contract.same_dtype("value_cache", args.value_cache, "query", args.query);
  contract.contiguous("key_cache", args.key_cache);
  contract.contiguous("value_cache", args.value_cache);
  contract.shape("lengths", args.lengths, Shape{batch});
  contract.dtype("lengths", args.lengths, {DType::int32});
  contract.shape("output", args.output, args.query.shape());
  contract.same_dtype("output", args.output, "query", args.query);
  FLM_CHECK(!args.window_size || *args.window_size > 0, contract.op(),
            "window_size is {}, expected a positive number of tokens", args.window_size.value_or(0));
}

}  // namespace fast_llm::kernels
