// Ops of the dropless mixture of experts (layers/mlp/mixture_of_experts.h): routing, the map from token slots to rows
// in expert order, the permutation of tokens into that order and back, and the per-row scaling by routing scores.
// T tokens have `slots` = shared_experts + top_k (expert, score) pairs each: shared experts first (score 1), then the
// top_k routed ones in descending logit order, ties to the lower expert. The permuted buffer has T * slots rows grouped
// by expert and ordered by slot within an expert, so every variant gives the same rows. Sums and softmax in fp32 (fp64
// for fp64 logits). Routing and loss formulas (Fast-LLM's): docs/moe.md, "Op contracts".
#pragma once

#include "fast_llm/kernels/registry.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::kernels {

enum class MoeRouting { top_k_softmax, sinkhorn };

struct MoeRouteForwardArgs {
  const Tensor& logits;  // (T, routed) float32 (float64 on the CPU)
  Tensor& experts;       // (T, slots) int32 =
  Tensor& scores;        // (T, slots) dtype of logits =
  int top_k = 1;
  int shared_experts = 0;
  MoeRouting routing = MoeRouting::top_k_softmax;
  bool training = true;  // sinkhorn: chooses by sinkhorn(logits) when training, by the logits otherwise
  // Tokens routed to each routed expert (=), float32: the load-balancing loss's mask means, and its backward.
  // Required with load_balancing_loss_sum and for moe_route_backward with a load-balancing gradient.
  Tensor* expert_counts = nullptr;                   // (routed)
  Tensor* load_balancing_loss_sum = nullptr;         // scalar += loss_weight * aux (top_k_softmax only)
  Tensor* z_loss_sum = nullptr;                      // scalar += loss_weight * z
  double loss_weight = 1.0;
  Stream stream = {};
};

struct MoeRouteBackwardArgs {
  const Tensor& logits;       // (T, routed), as moe_route_forward saw them
  const Tensor& experts;      // (T, slots) from moe_route_forward
  const Tensor& grad_scores;  // (T, slots) dtype of logits; the shared experts' columns are ignored
  Tensor& grad_logits;        // (T, routed) dtype of logits =
  int top_k = 1;
  int shared_experts = 0;
  MoeRouting routing = MoeRouting::top_k_softmax;
  // d(objective) / d(aux) and d(objective) / d(z): the coefficient times the loss's gradient scale (the layer's
  // choice: coefficient x routed experts x loss scale / micro-batches for aux). Zero: that loss adds nothing.
  double load_balancing_gradient = 0.0;
  double z_loss_gradient = 0.0;
  const Tensor* expert_counts = nullptr;  // (routed) float32 from forward; required with load_balancing_gradient != 0
  Stream stream = {};
};

struct MoeDispatchMapArgs {
  const Tensor& experts;   // (T, slots) int32, values in [0, num_experts)
  Tensor& expert_offsets;  // (num_experts + 1) int32 =: exclusive prefix sum of the experts' row counts; last = T*slots
  Tensor& rows;            // (T, slots) int32 =: the row of slot (t, j) in the permuted buffer
  Stream stream = {};
};

struct MoePermuteArgs {
  const Tensor& input;  // (T, hidden)
  const Tensor& rows;   // (T, slots) int32 from moe_dispatch_map
  Tensor& output;       // (T * slots, hidden), dtype of input =
  Stream stream = {};
};

struct MoeUnpermuteArgs {
  const Tensor& input;  // (T * slots, hidden)
  const Tensor& rows;   // (T, slots) int32
  Tensor& output;       // (T, hidden), dtype of input =: sums in fp32 (fp64 for fp64), one rounding
  Stream stream = {};
};

struct MoeScaleRowsArgs {
  const Tensor& input;   // (T * slots, width)
  const Tensor& rows;    // (T, slots) int32
  const Tensor& scores;  // (T, slots) float32 (float64 on the CPU)
  Tensor& output;        // (T * slots, width), dtype of input =; may be input itself
  Stream stream = {};
};

struct MoeScaleRowsBackwardArgs {
  const Tensor& grad_output;  // (T * slots, width)
  const Tensor& input;        // (T * slots, width): the unscaled rows forward took
  const Tensor& rows;         // (T, slots) int32
  const Tensor& scores;       // (T, slots) float32 (float64 on the CPU)
  Tensor& grad_input;         // (T * slots, width), dtype of grad_output =; may be grad_output itself
  Tensor& grad_scores;        // (T, slots), dtype of scores =: row dot products in fp32 (fp64 for fp64)
  Stream stream = {};
};

#define FLM_MOE_OP(Op, op_name, ArgsType)                 \
  struct Op {                                             \
    static constexpr std::string_view name = op_name;     \
    using Args = ArgsType;                                \
  };
FLM_MOE_OP(MoeRouteForward, "moe_route_forward", MoeRouteForwardArgs)
FLM_MOE_OP(MoeRouteBackward, "moe_route_backward", MoeRouteBackwardArgs)
FLM_MOE_OP(MoeDispatchMap, "moe_dispatch_map", MoeDispatchMapArgs)
FLM_MOE_OP(MoePermute, "moe_permute", MoePermuteArgs)
FLM_MOE_OP(MoeUnpermute, "moe_unpermute", MoeUnpermuteArgs)
FLM_MOE_OP(MoeScaleRows, "moe_scale_rows", MoeScaleRowsArgs)
FLM_MOE_OP(MoeScaleRowsBackward, "moe_scale_rows_backward", MoeScaleRowsBackwardArgs)
#undef FLM_MOE_OP

// The contracts above, checked once by each entry function before dispatch: throw `[moe_route_forward] ...`.
void check_moe_route_forward(const MoeRouteForwardArgs& args);
void check_moe_route_backward(const MoeRouteBackwardArgs& args);
void check_moe_dispatch_map(const MoeDispatchMapArgs& args);
void check_moe_permute(const MoePermuteArgs& args);
void check_moe_unpermute(const MoeUnpermuteArgs& args);
void check_moe_scale_rows(const MoeScaleRowsArgs& args);
void check_moe_scale_rows_backward(const MoeScaleRowsBackwardArgs& args);

inline void moe_route_forward(const MoeRouteForwardArgs& args) {
  check_moe_route_forward(args);
  dispatch<MoeRouteForward>(args, args.logits.device());
}
inline void moe_route_backward(const MoeRouteBackwardArgs& args) {
  check_moe_route_backward(args);
  dispatch<MoeRouteBackward>(args, args.logits.device());
}
inline void moe_dispatch_map(const MoeDispatchMapArgs& args) {
  check_moe_dispatch_map(args);
  dispatch<MoeDispatchMap>(args, args.experts.device());
}
inline void moe_permute(const MoePermuteArgs& args) {
  check_moe_permute(args);
  dispatch<MoePermute>(args, args.input.device());
}
inline void moe_unpermute(const MoeUnpermuteArgs& args) {
  check_moe_unpermute(args);
  dispatch<MoeUnpermute>(args, args.input.device());
}
inline void moe_scale_rows(const MoeScaleRowsArgs& args) {
  check_moe_scale_rows(args);
  dispatch<MoeScaleRows>(args, args.input.device());
}
inline void moe_scale_rows_backward(const MoeScaleRowsBackwardArgs& args) {
  check_moe_scale_rows_backward(args);
  dispatch<MoeScaleRowsBackward>(args, args.grad_output.device());
}

}  // namespace fast_llm::kernels
