// Consistency of every activation_forward / activation_backward variant (the fused SwiGLU among them: gated silu) with
// the CPU reference: every activation, gated or not, fp32 / bf16 / fp16 / fp64, odd sizes (vector tails, scalar
// paths), contiguous rows and strided views, and sizes whose grid-stride loops go round several times. The reference
// itself is checked against formulas and finite differences in activation_test.cpp.
#include "fast_llm/kernels/activation.h"

#include <gtest/gtest.h>

#include "kernels/consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

constexpr ActivationType kTypes[] = {ActivationType::gelu,         ActivationType::silu,    ActivationType::relu,
                                     ActivationType::squared_relu, ActivationType::sigmoid, ActivationType::identity};

struct ActivationCase {
  ActivationType type = ActivationType::silu;
  bool gated = true;
  DType dtype = DType::bfloat16;
  int64_t tokens = 1, size = 1;
  bool strided = false;  // tensors are column slices of wider rows
};

std::string case_name(const ActivationCase& c) {
  return fmt::format("type={} gated={} {} ({}, {}){}", int(c.type), c.gated, dtype_name(c.dtype), c.tokens, c.size,
                     c.strided ? " strided" : "");
}

// A (tokens, columns) tensor, or a slice of (tokens, columns + 5) rows when strided.
TensorSpec activation_tensor(const ActivationCase& c, int64_t columns, bool is_output, uint64_t seed) {
  const int64_t stored_columns = c.strided ? columns + 5 : columns;
  Tensor storage = random_tensor(Shape{c.tokens, stored_columns}, c.dtype, seed, -3, 3);
  std::function<Tensor(const Tensor&)> view;
  if (c.strided) view = [columns](const Tensor& tensor) { return tensor.slice(1, 0, columns); };
  return is_output ? output(storage, view) : input(storage, view);
}

std::vector<ActivationCase> activation_cases() {
  std::vector<ActivationCase> cases;
  for (ActivationType type : kTypes)
    for (bool gated : {false, true})
      for (DType dtype : {DType::float32, DType::bfloat16, DType::float16, DType::float64})
        for (const auto& [tokens, size] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 7}, {16, 64}, {33, 200}})
          for (bool strided : {false, true})
            cases.push_back({.type = type, .gated = gated, .dtype = dtype, .tokens = tokens, .size = size,
                             .strided = strided});
  // About 2 to 3 times as many steps (16-byte vectors, or elements when strided) as a GPU of up to 132 multiprocessors
  // runs threads (grid_for), so that the grid-stride loops go round and their (token, column) cursor carries into
  // the next row: the SwiGLU in bf16 (vectors and the scalar path), and fp32.
  cases.push_back({.type = ActivationType::silu, .gated = true, .dtype = DType::bfloat16, .tokens = 20011,
                   .size = 1032});
  cases.push_back({.type = ActivationType::silu, .gated = true, .dtype = DType::bfloat16, .tokens = 3001,
                   .size = 1003, .strided = true});
  cases.push_back({.type = ActivationType::sigmoid, .gated = false, .dtype = DType::float32, .tokens = 8009,
                   .size = 1000});
  return cases;
}

TEST(ActivationConsistency, CudaVariantsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 20000;
  for (const ActivationCase& c : activation_cases()) {
    const int64_t input_columns = c.gated ? 2 * c.size : c.size;

    ConsistencyProblem<ActivationForward> forward{.name = case_name(c), .dtype = c.dtype, .exact = false,
                                                  .tensors = {}, .call = {}};
    forward.tensors["input"] = activation_tensor(c, input_columns, false, ++seed);
    forward.tensors["output"] = activation_tensor(c, c.size, true, ++seed);
    forward.call = [c](TensorMap& tensors, const auto& run) {
      run({.type = c.type, .gated = c.gated, .input = tensors.at("input"), .output = tensors.at("output")});
    };
    const ConsistencyReport forward_report = check_variants(forward, DeviceType::cuda);
    EXPECT_FALSE(forward_report.empty()) << "no CUDA variant of activation_forward is registered";
    // fp64 is the CPU's compute dtype; a CUDA variant may leave it out. The training dtypes it must take.
    for (const VariantOutcome& outcome : forward_report)
      if (c.dtype != DType::float64) {
        EXPECT_FALSE(outcome.unsupported) << outcome.id << " " << case_name(c) << ": " << *outcome.unsupported;
      }

    ConsistencyProblem<ActivationBackward> backward{.name = case_name(c), .dtype = c.dtype, .exact = false,
                                                    .tensors = {}, .call = {}};
    backward.tensors["grad_output"] = activation_tensor(c, c.size, false, ++seed);
    backward.tensors["input"] = activation_tensor(c, input_columns, false, ++seed);
    backward.tensors["grad_input"] = activation_tensor(c, input_columns, true, ++seed);
    backward.call = [c](TensorMap& tensors, const auto& run) {
      run({.type = c.type, .gated = c.gated, .grad_output = tensors.at("grad_output"), .input = tensors.at("input"),
           .grad_input = tensors.at("grad_input")});
    };
    const ConsistencyReport backward_report = check_variants(backward, DeviceType::cuda);
    EXPECT_FALSE(backward_report.empty()) << "no CUDA variant of activation_backward is registered";
    // fp64 is the CPU's compute dtype; a CUDA variant may leave it out. The training dtypes it must take.
    for (const VariantOutcome& outcome : backward_report)
      if (c.dtype != DType::float64) {
        EXPECT_FALSE(outcome.unsupported) << outcome.id << " " << case_name(c) << ": " << *outcome.unsupported;
      }
  }
}

}  // namespace
}  // namespace fast_llm::kernels
