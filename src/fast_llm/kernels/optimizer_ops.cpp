// The contracts of adam_step, squared_norm and optimizer_decision (kernels/optimizer_ops.h), checked once per call by
// the entry functions.
#include "fast_llm/kernels/optimizer_ops.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {
namespace {

// An optimizer_decision state: (optimizer_state::size) contiguous float64.
void check_state(const OpContract& contract, const Tensor& state) {
  contract.shape("state", state, Shape{optimizer_state::size});
  contract.dtype("state", state, {DType::float64});
  contract.contiguous("state", state);
}

}  // namespace

void check_adam_step(const AdamStepArgs& args) {
  const OpContract contract("adam_step", args.parameters.device());
  contract.on_device("parameters", args.parameters);
  contract.floating("parameters", args.parameters);
  contract.contiguous("parameters", args.parameters);
  for (const auto& [name, tensor] : {std::pair<const char*, const Tensor*>{"gradients", &args.gradients},
                                     {"exp_avg", &args.exp_avg},
                                     {"exp_avg_sq", &args.exp_avg_sq}}) {
    contract.shape(name, *tensor, args.parameters.shape());
    contract.same_dtype(name, *tensor, "parameters", args.parameters);
    contract.contiguous(name, *tensor);
  }
  if (args.compute_weights != nullptr) {
    contract.shape("compute_weights", *args.compute_weights, args.parameters.shape());
    contract.floating("compute_weights", *args.compute_weights);
    contract.contiguous("compute_weights", *args.compute_weights);
  }
  if (args.state != nullptr)
    check_state(contract, *args.state);
  else
    FLM_CHECK(args.step >= 1, contract.op(), "step is {}, expected 1 or more (bias correction counts steps from 1)",
              args.step);
}

void check_squared_norm(const SquaredNormArgs& args) {
  const OpContract contract("squared_norm", args.input.device());
  contract.on_device("input", args.input);
  contract.floating("input", args.input);
  contract.contiguous("input", args.input);
  contract.shape("result", args.result, Shape{1});
  contract.dtype("result", args.result, {DType::float32, DType::float64});
}

void check_optimizer_decision(const OptimizerDecisionArgs& args) {
  const OpContract contract("optimizer_decision", args.state.device());
  check_state(contract, args.state);
  contract.rank("learning_rates", args.learning_rates, 1, "(n)");
  contract.dtype("learning_rates", args.learning_rates, {DType::float64});
  contract.contiguous("learning_rates", args.learning_rates);
  FLM_CHECK(args.learning_rates.numel() >= 1, contract.op(), "learning_rates is empty: expected at least one rate");
}

}  // namespace fast_llm::kernels
