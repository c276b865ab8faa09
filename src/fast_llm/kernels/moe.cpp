// The contracts of the mixture-of-experts ops (kernels/moe.h), checked once per call by the entry functions. Values
// inside index tensors (experts, rows) are the data's, not the call's: the CPU reference checks them, the GPU trusts
// them. Logits and scores are float32 or float64 here; a variant states its own narrower limits (CUDA: float32).
#include "fast_llm/kernels/moe.h"

#include <cstdint>
#include <utility>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {
namespace {

// logits (T, routed) float32 / float64; returns routed.
int64_t check_logits(const OpContract& contract, const Tensor& logits) {
  contract.rank("logits", logits, 2, "(tokens, routed_experts)");
  contract.dtype("logits", logits, {DType::float32, DType::float64});
  return logits.size(1);
}

// top_k in [1, routed], shared_experts >= 0; returns slots = shared + top_k.
int64_t check_routing_sizes(const OpContract& contract, int64_t routed, int top_k, int shared_experts) {
  FLM_CHECK(top_k >= 1 && top_k <= routed, contract.op(), "top_k is {}, expected 1 .. {} (the routed experts)", top_k,
            routed);
  FLM_CHECK(shared_experts >= 0, contract.op(), "shared_experts is {}, expected >= 0", shared_experts);
  return int64_t(shared_experts) + top_k;
}

void check_expert_counts(const OpContract& contract, const Tensor* expert_counts, int64_t routed) {
  if (expert_counts == nullptr) return;
  contract.shape("expert_counts", *expert_counts, Shape{routed});
  contract.dtype("expert_counts", *expert_counts, {DType::float32});
}

// rows (T, slots) int32; returns (T, slots).
std::pair<int64_t, int64_t> check_rows(const OpContract& contract, const Tensor& rows) {
  contract.rank("rows", rows, 2, "(tokens, slots)");
  contract.dtype("rows", rows, {DType::int32});
  return {rows.size(0), rows.size(1)};
}

// scores (T, slots) float32 / float64.
void check_scores(const OpContract& contract, const Tensor& scores, int64_t tokens, int64_t slots) {
  contract.shape("scores", scores, Shape{tokens, slots});
  contract.dtype("scores", scores, {DType::float32, DType::float64});
}

}  // namespace

void check_moe_route_forward(const MoeRouteForwardArgs& args) {
  const OpContract contract("moe_route_forward", args.logits.device());
  const int64_t routed = check_logits(contract, args.logits), tokens = args.logits.size(0);
  const int64_t slots = check_routing_sizes(contract, routed, args.top_k, args.shared_experts);
  contract.shape("experts", args.experts, Shape{tokens, slots});
  contract.dtype("experts", args.experts, {DType::int32});
  contract.shape("scores", args.scores, Shape{tokens, slots});
  contract.same_dtype("scores", args.scores, "logits", args.logits);
  check_expert_counts(contract, args.expert_counts, routed);
  contract.loss_sum("load_balancing_loss_sum", args.load_balancing_loss_sum);
  contract.loss_sum("z_loss_sum", args.z_loss_sum);
  if (args.load_balancing_loss_sum != nullptr) {
    FLM_CHECK(args.routing == MoeRouting::top_k_softmax, contract.op(),
              "load_balancing_loss_sum is given but sinkhorn routing has no load-balancing loss");
    FLM_CHECK(args.expert_counts != nullptr, contract.op(), "load_balancing_loss_sum is given without expert_counts");
  }
}

void check_moe_route_backward(const MoeRouteBackwardArgs& args) {
  const OpContract contract("moe_route_backward", args.logits.device());
  const int64_t routed = check_logits(contract, args.logits), tokens = args.logits.size(0);
  const int64_t slots = check_routing_sizes(contract, routed, args.top_k, args.shared_experts);
  contract.shape("experts", args.experts, Shape{tokens, slots});
  contract.dtype("experts", args.experts, {DType::int32});
  contract.shape("grad_scores", args.grad_scores, Shape{tokens, slots});
  contract.same_dtype("grad_scores", args.grad_scores, "logits", args.logits);
  contract.shape("grad_logits", args.grad_logits, Shape{tokens, routed});
  contract.same_dtype("grad_logits", args.grad_logits, "logits", args.logits);
  check_expert_counts(contract, args.expert_counts, routed);
  if (args.load_balancing_gradient != 0.0) {
    FLM_CHECK(args.routing == MoeRouting::top_k_softmax, contract.op(),
              "load_balancing_gradient is {} but sinkhorn routing has no load-balancing loss",
              args.load_balancing_gradient);
    FLM_CHECK(args.expert_counts != nullptr, contract.op(), "load_balancing_gradient is {} without expert_counts",
              args.load_balancing_gradient);
  }
}

void check_moe_dispatch_map(const MoeDispatchMapArgs& args) {
  const OpContract contract("moe_dispatch_map", args.experts.device());
  contract.rank("experts", args.experts, 2, "(tokens, slots)");
  contract.dtype("experts", args.experts, {DType::int32});
  contract.rank("expert_offsets", args.expert_offsets, 1, "(num_experts + 1)");
  contract.dtype("expert_offsets", args.expert_offsets, {DType::int32});
  FLM_CHECK(args.expert_offsets.size(0) >= 2, contract.op(), "expert_offsets has shape {}, expected at least 2 entries",
            args.expert_offsets.shape().str());
  contract.shape("rows", args.rows, args.experts.shape());
  contract.dtype("rows", args.rows, {DType::int32});
  FLM_CHECK(args.experts.numel() <= int64_t(INT32_MAX), contract.op(), "{} slots do not fit int32 rows",
            args.experts.numel());
}

void check_moe_permute(const MoePermuteArgs& args) {
  const OpContract contract("moe_permute", args.input.device());
  const auto [tokens, slots] = check_rows(contract, args.rows);
  contract.rank("input", args.input, 2, "(tokens, hidden)");
  contract.floating("input", args.input);
  contract.shape("input", args.input, Shape{tokens, args.input.size(1)});
  contract.shape("output", args.output, Shape{tokens * slots, args.input.size(1)});
  contract.same_dtype("output", args.output, "input", args.input);
}

void check_moe_unpermute(const MoeUnpermuteArgs& args) {
  const OpContract contract("moe_unpermute", args.input.device());
  const auto [tokens, slots] = check_rows(contract, args.rows);
  contract.rank("input", args.input, 2, "(tokens * slots, hidden)");
  contract.floating("input", args.input);
  contract.shape("input", args.input, Shape{tokens * slots, args.input.size(1)});
  contract.shape("output", args.output, Shape{tokens, args.input.size(1)});
  contract.same_dtype("output", args.output, "input", args.input);
}

void check_moe_scale_rows(const MoeScaleRowsArgs& args) {
  const OpContract contract("moe_scale_rows", args.input.device());
  const auto [tokens, slots] = check_rows(contract, args.rows);
  contract.rank("input", args.input, 2, "(tokens * slots, width)");
  contract.floating("input", args.input);
  contract.shape("input", args.input, Shape{tokens * slots, args.input.size(1)});
  check_scores(contract, args.scores, tokens, slots);
  contract.shape("output", args.output, args.input.shape());
  contract.same_dtype("output", args.output, "input", args.input);
}

void check_moe_scale_rows_backward(const MoeScaleRowsBackwardArgs& args) {
  const OpContract contract("moe_scale_rows_backward", args.grad_output.device());
  const auto [tokens, slots] = check_rows(contract, args.rows);
  contract.rank("grad_output", args.grad_output, 2, "(tokens * slots, width)");
  contract.floating("grad_output", args.grad_output);
  contract.shape("grad_output", args.grad_output, Shape{tokens * slots, args.grad_output.size(1)});
  contract.shape("input", args.input, args.grad_output.shape());
  contract.same_dtype("input", args.input, "grad_output", args.grad_output);
  check_scores(contract, args.scores, tokens, slots);
  contract.shape("grad_input", args.grad_input, args.grad_output.shape());
  contract.same_dtype("grad_input", args.grad_input, "grad_output", args.grad_output);
  contract.shape("grad_scores", args.grad_scores, Shape{tokens, slots});
  contract.same_dtype("grad_scores", args.grad_scores, "scores", args.scores);
}

}  // namespace fast_llm::kernels
