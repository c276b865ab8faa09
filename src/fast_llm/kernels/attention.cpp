// The contracts of attention_forward / attention_backward (kernels/attention.h), checked once per call by the entry
// functions, and the inverse rotation the variants that do not fold it share. cu_seqlens' values are the data's, not
// the call's: the CPU reference checks them against the tokens, the GPU variants trust them.
#include "fast_llm/kernels/attention.h"

#include "fast_llm/kernels/contract.h"
#include "fast_llm/kernels/rotary.h"

namespace fast_llm::kernels {
namespace {

// What forward and backward share: query, key, value of one floating dtype, the query range inside the keys,
// (heads, query_tokens) logsumexp, int32 cu_seqlens, max_seqlen and the window.
void check_inputs(const OpContract& contract, const Tensor& query, const Tensor& key, const Tensor& value,
                  const Tensor& logsumexp, const Tensor& cu_seqlens, int64_t max_seqlen,
                  const std::optional<int64_t>& window_size, int64_t query_offset) {
  contract.rank("query", query, 3, "(query_tokens, heads, head_size)");
  contract.floating("query", query);
  contract.rank("key", key, 3, "(key_tokens, head_groups, head_size)");
  const int64_t tokens = query.size(0), heads = query.size(1), head_size = query.size(2), groups = key.size(1);
  FLM_CHECK(key.size(2) == head_size, contract.op(), "key has shape {}, expected (key_tokens, head_groups, {})",
            key.shape().str(), head_size);
  FLM_CHECK(query_offset >= 0 && query_offset + tokens <= key.size(0), contract.op(),
            "query rows [{}, {}) (query_offset {}, query of shape {}) lie outside the {} key rows", query_offset,
            query_offset + tokens, query_offset, query.shape().str(), key.size(0));
  FLM_CHECK(groups > 0 && heads % groups == 0, contract.op(),
            "query has {} heads, key has {} head groups: heads must be a positive multiple of head_groups", heads,
            groups);
  contract.shape("value", value, key.shape());
  contract.same_dtype("key", key, "query", query);
  contract.same_dtype("value", value, "query", query);
  contract.shape("logsumexp", logsumexp, Shape{heads, tokens});
  contract.dtype("logsumexp", logsumexp, {DType::float32, DType::float64});
  contract.rank("cu_seqlens", cu_seqlens, 1, "(documents + 1)");
  contract.dtype("cu_seqlens", cu_seqlens, {DType::int32});
  FLM_CHECK(cu_seqlens.size(0) >= 1, contract.op(),
            "cu_seqlens is empty, expected (documents + 1) offsets starting at 0");
  FLM_CHECK(max_seqlen >= 0, contract.op(), "max_seqlen is {}, expected the length of the longest document",
            max_seqlen);
  FLM_CHECK(!window_size || *window_size > 0, contract.op(), "window_size is {}, expected a positive number of tokens",
            window_size.value_or(0));
}

// Tensors shaped and typed as `reference` (named `reference_name`).
void check_like(const OpContract& contract, std::string_view reference_name, const Tensor& reference,
                std::initializer_list<std::pair<std::string_view, const Tensor*>> tensors) {
  for (const auto& [name, tensor] : tensors) {
    contract.shape(name, *tensor, reference.shape());
    contract.same_dtype(name, *tensor, reference_name, reference);
  }
}

// The rotary tables: both absent, or both (key_tokens, rotary_dims / 2) float32 (float64 allowed for a float64 query:
// layers/attention/rotary.h) with 0 < rotary_dims <= head_size.
void check_rotary(const OpContract& contract, const AttentionBackwardArgs& args) {
  FLM_CHECK((args.rotary_cos == nullptr) == (args.rotary_sin == nullptr), contract.op(),
            "rotary_cos and rotary_sin come together; only {} is given",
            args.rotary_cos != nullptr ? "rotary_cos" : "rotary_sin");
  if (args.rotary_cos == nullptr) return;
  const int64_t tokens = args.key.size(0), head_size = args.query.size(2);
  for (const auto& [name, table] :
       {std::pair{"rotary_cos", args.rotary_cos}, std::pair{"rotary_sin", args.rotary_sin}}) {
    contract.on_device(name, *table);
    const bool float64_tables = table->dtype() == DType::float64 && args.query.dtype() == DType::float64;
    FLM_CHECK(table->dtype() == DType::float32 || float64_tables, contract.op(), "{} has dtype {}, expected float32 (or float64 with a float64 query)", name,
              dtype_name(table->dtype()));
    FLM_CHECK(table->rank() == 2 && table->size(0) == tokens && table->size(1) > 0 && 2 * table->size(1) <= head_size,
              contract.op(),
              "{} has shape {}, expected (key_tokens, rotary_dims / 2) = ({}, at most {}) for key of shape {}", name,
              table->shape().str(), tokens, head_size / 2, args.key.shape().str());
  }
  FLM_CHECK(args.rotary_cos->shape() == args.rotary_sin->shape(), contract.op(),
            "rotary_cos has shape {}, rotary_sin {}", args.rotary_cos->shape().str(), args.rotary_sin->shape().str());
}

}  // namespace

void check_attention_forward(const AttentionForwardArgs& args) {
  const OpContract contract("attention_forward", args.query.device());
  check_inputs(contract, args.query, args.key, args.value, args.logsumexp, args.cu_seqlens, args.max_seqlen,
               args.window_size, args.query_offset);
  check_like(contract, "query", args.query, {{"output", &args.output}});
}

void check_attention_backward(const AttentionBackwardArgs& args) {
  const OpContract contract("attention_backward", args.query.device());
  check_inputs(contract, args.query, args.key, args.value, args.logsumexp, args.cu_seqlens, args.max_seqlen,
               args.window_size, args.query_offset);
  check_like(contract, "query", args.query,
             {{"grad_output", &args.grad_output}, {"output", &args.output}, {"grad_query", &args.grad_query}});
  check_like(contract, "key", args.key, {{"grad_key", &args.grad_key}, {"grad_value", &args.grad_value}});
  check_rotary(contract, args);
}

void unrotate_attention_gradients(const AttentionBackwardArgs& args, bool query, bool key) {
  if (args.rotary_cos == nullptr || args.rotary_sin == nullptr) return;
  if (query) {
    // The query rows' own rows of the (key_tokens) tables.
    const int64_t begin = args.query_offset, end = args.query_offset + args.grad_query.size(0);
    const Tensor cos = args.rotary_cos->slice(0, begin, end), sin = args.rotary_sin->slice(0, begin, end);
    rotary_apply({.tensor = args.grad_query, .cos = cos, .sin = sin, .inverse = true, .stream = args.stream});
  }
  if (key)
    rotary_apply({.tensor = args.grad_key, .cos = *args.rotary_cos, .sin = *args.rotary_sin, .inverse = true,
                  .stream = args.stream});
}

}  // namespace fast_llm::kernels
