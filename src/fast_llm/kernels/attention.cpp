// What every attention_backward variant shares (kernels/attention.h).
#include "fast_llm/kernels/attention.h"

#include "fast_llm/kernels/rotary.h"

namespace fast_llm::kernels {

void unrotate_attention_gradients(const AttentionBackwardArgs& args, bool query, bool key) {
  FLM_CHECK((args.rotary_cos == nullptr) == (args.rotary_sin == nullptr), "attention_backward",
            "rotary_cos and rotary_sin come together; only {} is given",
            args.rotary_cos != nullptr ? "rotary_cos" : "rotary_sin");
  if (args.rotary_cos == nullptr) return;
  for (Tensor* gradient : {query ? &args.grad_query : nullptr, key ? &args.grad_key : nullptr})
    if (gradient != nullptr)
      rotary_apply({.tensor = *gradient, .cos = *args.rotary_cos, .sin = *args.rotary_sin, .inverse = true,
                    .stream = args.stream});
}

}  // namespace fast_llm::kernels
