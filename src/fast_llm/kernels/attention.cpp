// What every attention_backward variant shares (kernels/attention.h).
#include "fast_llm/kernels/attention.h"

#include "fast_llm/kernels/rotary.h"

namespace fast_llm::kernels {

void check_attention_rotary(const AttentionBackwardArgs& args) {
  constexpr const char* op = "attention_backward";
  FLM_CHECK((args.rotary_cos == nullptr) == (args.rotary_sin == nullptr), op,
            "rotary_cos and rotary_sin come together; only {} is given",
            args.rotary_cos != nullptr ? "rotary_cos" : "rotary_sin");
  if (args.rotary_cos == nullptr) return;
  const int64_t tokens = args.query.rank() == 3 ? args.query.size(0) : 0;
  const int64_t head_size = args.query.rank() == 3 ? args.query.size(2) : 0;
  for (const auto& [name, table] : {std::pair{"rotary_cos", args.rotary_cos}, std::pair{"rotary_sin", args.rotary_sin}}) {
    FLM_CHECK(table->dtype() == DType::float32, op, "{} has dtype {}, expected float32", name,
              dtype_name(table->dtype()));
    FLM_CHECK(table->rank() == 2 && table->size(0) == tokens && table->size(1) > 0 && 2 * table->size(1) <= head_size,
              op, "{} has shape {}, expected (tokens, rotary_dims / 2) = ({}, at most {}) for query of shape {}", name,
              table->shape().str(), tokens, head_size / 2, args.query.shape().str());
    FLM_CHECK(table->device() == args.query.device(), op, "{} is on {}, the query on {}", name,
              table->device().str(), args.query.device().str());
  }
  FLM_CHECK(args.rotary_cos->shape() == args.rotary_sin->shape(), op, "rotary_cos has shape {}, rotary_sin {}",
            args.rotary_cos->shape().str(), args.rotary_sin->shape().str());
}

void unrotate_attention_gradients(const AttentionBackwardArgs& args, bool query, bool key) {
  if (args.rotary_cos == nullptr || args.rotary_sin == nullptr) return;
  for (Tensor* gradient : {query ? &args.grad_query : nullptr, key ? &args.grad_key : nullptr})
    if (gradient != nullptr)
      rotary_apply({.tensor = *gradient, .cos = *args.rotary_cos, .sin = *args.rotary_sin, .inverse = true,
                    .stream = args.stream});
}

}  // namespace fast_llm::kernels
