// Consistency of every rms_norm / layer_norm variant (CPU and CUDA) with the CPU reference: fp32 / bf16 / fp16 / fp64,
// with and without weight and bias, zero-centered, odd sizes (hidden 7, 264, 576, 1000 over odd row counts), contiguous
// rows and strided views, plain and in the residual form (residual and sum, grad_residual); fp32 statistics and
// gradient buffers as the header lays out. The reference itself is checked
// against hand-computed values and finite differences in normalization_test.cpp.
#include <gtest/gtest.h>

#include "fast_llm/kernels/normalization.h"
#include "kernels/reference_consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

struct NormCase {
  DType dtype = DType::bfloat16;
  int64_t rows = 1, hidden = 1;
  bool weight = true, bias = true, zero_centered = false;
  bool strided = false;   // activations are column slices of wider rows
  bool residual = false;  // the residual form
};

std::string case_name(const NormCase& c) {
  return fmt::format("{} ({}, {}) weight={} bias={} zero_centered={}{}{}", dtype_name(c.dtype), c.rows, c.hidden,
                     c.weight, c.bias, c.zero_centered, c.strided ? " strided" : "", c.residual ? " residual" : "");
}

DType gradient_dtype(const NormCase& c) { return c.dtype == DType::float64 ? DType::float64 : DType::float32; }

// A (rows, hidden) activation, or a slice of (rows, hidden + 3) rows when strided.
TensorSpec activation(const NormCase& c, bool is_output, uint64_t seed) {
  Tensor storage = random_tensor(Shape{c.rows, c.strided ? c.hidden + 3 : c.hidden}, c.dtype, seed, -2, 2);
  std::function<Tensor(const Tensor&)> view;
  const int64_t hidden = c.hidden;
  if (c.strided) view = [hidden](const Tensor& tensor) { return tensor.slice(1, 1, 1 + hidden); };
  return is_output ? output(storage, view) : input(storage, view);
}

std::vector<NormCase> norm_cases() {
  std::vector<NormCase> cases;
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16, DType::float64})
    for (const auto& [rows, hidden] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 7}, {16, 64}, {67, 264}, {35, 576}, {9, 1000}})
      for (const auto& [weight, bias, zero_centered] :
           std::vector<std::tuple<bool, bool, bool>>{{true, true, false}, {true, false, true}, {false, false, false}})
        for (bool strided : {false, true})
          for (bool residual : {false, true})
            cases.push_back({.dtype = dtype,
                             .rows = rows,
                             .hidden = hidden,
                             .weight = weight,
                             .bias = bias,
                             .zero_centered = zero_centered,
                             .strided = strided,
                             .residual = residual});
  return cases;
}

Tensor* optional_tensor(TensorMap& tensors, const std::string& name) {
  auto found = tensors.find(name);
  return found == tensors.end() ? nullptr : &found->second;
}

TEST(NormalizationConsistency, CpuAndCudaVariantsMatchTheReference) {
  uint64_t seed = 30000;
  for (const NormCase& c : norm_cases()) {
    const bool must_support = c.dtype != DType::float64 && !c.strided;
    const Shape rows{c.rows}, hidden{c.hidden};

    ConsistencyProblem<RmsNormForward> rms_forward{
        .name = case_name(c), .dtype = c.dtype, .exact = false, .tensors = {}, .call = {}};
    rms_forward.tensors["input"] = activation(c, false, ++seed);
    if (c.weight) rms_forward.tensors["weight"] = input(random_tensor(hidden, c.dtype, ++seed));
    rms_forward.tensors["output"] = activation(c, true, ++seed);
    rms_forward.tensors["inverse_rms"] = output(Tensor::empty(rows, DType::float32));
    if (c.residual) {
      rms_forward.tensors["residual"] = activation(c, false, ++seed);
      rms_forward.tensors["sum"] = activation(c, true, ++seed);
    }
    rms_forward.call = [c](TensorMap& t, const auto& run) {
      run({.input = t.at("input"),
           .weight = optional_tensor(t, "weight"),
           .output = t.at("output"),
           .inverse_rms = t.at("inverse_rms"),
           .epsilon = 1e-5,
           .zero_centered = c.zero_centered,
           .residual = optional_tensor(t, "residual"),
           .sum = optional_tensor(t, "sum")});
    };
    check_variants_on_all_devices(rms_forward, must_support);

    ConsistencyProblem<RmsNormBackward> rms_backward{
        .name = case_name(c), .dtype = c.dtype, .exact = false, .tensors = {}, .call = {}};
    rms_backward.tensors["grad_output"] = activation(c, false, ++seed);
    rms_backward.tensors["input"] = activation(c, false, ++seed);
    if (c.weight) {
      rms_backward.tensors["weight"] = input(random_tensor(hidden, c.dtype, ++seed));
      rms_backward.tensors["grad_weight"] = accumulated_output(random_tensor(hidden, gradient_dtype(c), ++seed));
    }
    rms_backward.tensors["inverse_rms"] = input(random_tensor(rows, DType::float32, ++seed, 0.5, 2));
    rms_backward.tensors["grad_input"] = activation(c, true, ++seed);
    if (c.residual) rms_backward.tensors["grad_residual"] = activation(c, false, ++seed);
    rms_backward.call = [c](TensorMap& t, const auto& run) {
      run({.grad_output = t.at("grad_output"),
           .input = t.at("input"),
           .weight = optional_tensor(t, "weight"),
           .inverse_rms = t.at("inverse_rms"),
           .grad_input = t.at("grad_input"),
           .grad_weight = optional_tensor(t, "grad_weight"),
           .zero_centered = c.zero_centered,
           .grad_residual = optional_tensor(t, "grad_residual")});
    };
    check_variants_on_all_devices(rms_backward, must_support);

    ConsistencyProblem<LayerNormForward> layer_forward{
        .name = case_name(c), .dtype = c.dtype, .exact = false, .tensors = {}, .call = {}};
    layer_forward.tensors["input"] = activation(c, false, ++seed);
    if (c.weight) layer_forward.tensors["weight"] = input(random_tensor(hidden, c.dtype, ++seed));
    if (c.bias) layer_forward.tensors["bias"] = input(random_tensor(hidden, c.dtype, ++seed));
    layer_forward.tensors["output"] = activation(c, true, ++seed);
    layer_forward.tensors["mean"] = output(Tensor::empty(rows, DType::float32));
    layer_forward.tensors["inverse_std"] = output(Tensor::empty(rows, DType::float32));
    if (c.residual) {
      layer_forward.tensors["residual"] = activation(c, false, ++seed);
      layer_forward.tensors["sum"] = activation(c, true, ++seed);
    }
    layer_forward.call = [c](TensorMap& t, const auto& run) {
      run({.input = t.at("input"),
           .weight = optional_tensor(t, "weight"),
           .bias = optional_tensor(t, "bias"),
           .output = t.at("output"),
           .mean = t.at("mean"),
           .inverse_std = t.at("inverse_std"),
           .epsilon = 1e-5,
           .zero_centered = c.zero_centered,
           .residual = optional_tensor(t, "residual"),
           .sum = optional_tensor(t, "sum")});
    };
    check_variants_on_all_devices(layer_forward, must_support);

    ConsistencyProblem<LayerNormBackward> layer_backward{
        .name = case_name(c), .dtype = c.dtype, .exact = false, .tensors = {}, .call = {}};
    layer_backward.tensors["grad_output"] = activation(c, false, ++seed);
    layer_backward.tensors["input"] = activation(c, false, ++seed);
    if (c.weight) {
      layer_backward.tensors["weight"] = input(random_tensor(hidden, c.dtype, ++seed));
      layer_backward.tensors["grad_weight"] = accumulated_output(random_tensor(hidden, gradient_dtype(c), ++seed));
    }
    if (c.bias)
      layer_backward.tensors["grad_bias"] = accumulated_output(random_tensor(hidden, gradient_dtype(c), ++seed));
    layer_backward.tensors["mean"] = input(random_tensor(rows, DType::float32, ++seed));
    layer_backward.tensors["inverse_std"] = input(random_tensor(rows, DType::float32, ++seed, 0.5, 2));
    layer_backward.tensors["grad_input"] = activation(c, true, ++seed);
    if (c.residual) layer_backward.tensors["grad_residual"] = activation(c, false, ++seed);
    layer_backward.call = [c](TensorMap& t, const auto& run) {
      run({.grad_output = t.at("grad_output"),
           .input = t.at("input"),
           .weight = optional_tensor(t, "weight"),
           .mean = t.at("mean"),
           .inverse_std = t.at("inverse_std"),
           .grad_input = t.at("grad_input"),
           .grad_weight = optional_tensor(t, "grad_weight"),
           .grad_bias = optional_tensor(t, "grad_bias"),
           .zero_centered = c.zero_centered,
           .grad_residual = optional_tensor(t, "grad_residual")});
    };
    check_variants_on_all_devices(layer_backward, must_support);
  }
}

}  // namespace
}  // namespace fast_llm::kernels
