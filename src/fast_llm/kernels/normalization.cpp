// The contract of rms_norm and layer_norm (kernels/normalization.h), checked once per call by the entry functions.
// Both norms check the same things, a layer_norm having a bias and a second statistic more.
#include "fast_llm/kernels/normalization.h"

#include <initializer_list>

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {
namespace {

// An argument of the call by name; `tensor` is null for an optional argument that is not given.
struct Named {
  std::string_view name;
  const Tensor* tensor;
};

// input (rows, hidden) of a floating dtype, hidden > 0.
void check_input(const OpContract& contract, const Tensor& input) {
  contract.rank("input", input, 2, "(rows, hidden)");
  contract.floating("input", input);
  FLM_CHECK(input.size(1) > 0, contract.op(), "input has shape {}: hidden size must be positive", input.shape().str());
}

// (rows, hidden) activations of the input's dtype: output, the residual form's tensors, gradients of activations.
void check_activations(const OpContract& contract, const Tensor& input, std::initializer_list<Named> tensors) {
  for (const auto& [name, tensor] : tensors) {
    if (tensor == nullptr) continue;
    contract.shape(name, *tensor, input.shape());
    contract.same_dtype(name, *tensor, "input", input);
  }
}

// (size) tensors of one of `dtypes`: weight and bias (size hidden), statistics (size rows), parameter gradients.
void check_vectors(const OpContract& contract, int64_t size, std::initializer_list<DType> dtypes,
                   std::initializer_list<Named> tensors) {
  for (const auto& [name, tensor] : tensors) {
    if (tensor == nullptr) continue;
    contract.shape(name, *tensor, Shape{size});
    contract.dtype(name, *tensor, dtypes);
  }
}

constexpr std::initializer_list<DType> kFloating = {DType::float32, DType::float64, DType::bfloat16, DType::float16};
constexpr std::initializer_list<DType> kAccumulation = {DType::float32, DType::float64};

void check_forward(std::string_view op, const Tensor& input, const Tensor* weight, const Tensor* bias,
                   const Tensor& output, std::initializer_list<Named> statistics, const Tensor* residual,
                   const Tensor* sum) {
  const OpContract contract(op, input.device());
  check_input(contract, input);
  FLM_CHECK((residual == nullptr) == (sum == nullptr), op, "residual and sum must be given together");
  check_activations(contract, input, {{"output", &output}, {"residual", residual}, {"sum", sum}});
  check_vectors(contract, input.size(1), kFloating, {{"weight", weight}, {"bias", bias}});
  check_vectors(contract, input.size(0), kAccumulation, statistics);
}

void check_backward(std::string_view op, const Tensor& grad_output, const Tensor& input, const Tensor* weight,
                    std::initializer_list<Named> statistics, const Tensor& grad_input, const Tensor* grad_weight,
                    const Tensor* grad_bias, const Tensor* grad_residual) {
  const OpContract contract(op, input.device());
  check_input(contract, input);
  check_activations(contract, input,
                    {{"grad_output", &grad_output}, {"grad_input", &grad_input}, {"grad_residual", grad_residual}});
  check_vectors(contract, input.size(1), kFloating, {{"weight", weight}});
  check_vectors(contract, input.size(0), kAccumulation, statistics);
  check_vectors(contract, input.size(1), kAccumulation, {{"grad_weight", grad_weight}, {"grad_bias", grad_bias}});
  FLM_CHECK(grad_weight == nullptr || weight != nullptr, op, "grad_weight is given without a weight");
}

}  // namespace

void check_rms_norm_forward(const RmsNormForwardArgs& args) {
  check_forward("rms_norm_forward", args.input, args.weight, nullptr, args.output, {{"inverse_rms", &args.inverse_rms}},
                args.residual, args.sum);
}

void check_rms_norm_backward(const RmsNormBackwardArgs& args) {
  check_backward("rms_norm_backward", args.grad_output, args.input, args.weight, {{"inverse_rms", &args.inverse_rms}},
                 args.grad_input, args.grad_weight, nullptr, args.grad_residual);
}

void check_layer_norm_forward(const LayerNormForwardArgs& args) {
  check_forward("layer_norm_forward", args.input, args.weight, args.bias, args.output,
                {{"mean", &args.mean}, {"inverse_std", &args.inverse_std}}, args.residual, args.sum);
}

void check_layer_norm_backward(const LayerNormBackwardArgs& args) {
  check_backward("layer_norm_backward", args.grad_output, args.input, args.weight,
                 {{"mean", &args.mean}, {"inverse_std", &args.inverse_std}}, args.grad_input, args.grad_weight,
                 args.grad_bias, args.grad_residual);
}

}  // namespace fast_llm::kernels
