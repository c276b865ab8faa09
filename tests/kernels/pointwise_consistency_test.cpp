// Consistency of every axpy / dropout variant (CPU and CUDA) with the CPU reference. axpy: every dtype, and bf16 / fp16
// inputs into fp32 outputs (gradient accumulation). dropout: the mask must be the same on every device, so with
// p = 0.5 and 0.75 (exact scales 2 and 4) results must match bit for bit; other p within the dtype's tolerance.
// The references themselves are checked in pointwise_test.cpp.
#include <gtest/gtest.h>

#include "fast_llm/kernels/pointwise.h"
#include "kernels/reference_consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

constexpr int64_t kSizes[] = {1, 7, 1000, 65537};

TEST(AxpyConsistency, CpuAndCudaVariantsMatchTheReference) {
  const std::vector<std::pair<DType, DType>> dtype_pairs = {
      {DType::float32, DType::float32}, {DType::bfloat16, DType::bfloat16}, {DType::float16, DType::float16},
      {DType::float64, DType::float64}, {DType::bfloat16, DType::float32},  {DType::float16, DType::float32},
      {DType::float32, DType::bfloat16}};
  uint64_t seed = 60000;
  for (const auto& [input_dtype, output_dtype] : dtype_pairs) {
    for (int64_t size : kSizes) {
      ConsistencyProblem<Axpy> problem{
          .name = fmt::format("{} += {} ({})", dtype_name(output_dtype), dtype_name(input_dtype), size),
          .dtype = output_dtype,
          .exact = false,
          .tensors = {},
          .call = {}};
      problem.tensors["input"] = input(random_tensor(Shape{size}, input_dtype, ++seed));
      problem.tensors["output"] = accumulated_output(random_tensor(Shape{size}, output_dtype, ++seed));
      problem.call = [](TensorMap& t, const auto& run) {
        run({.input = t.at("input"), .output = t.at("output"), .alpha = -0.37});
      };
      check_variants_on_all_devices(problem, /*must_support=*/input_dtype != DType::float64);
    }
  }
}

TEST(DropoutConsistency, CpuAndCudaVariantsMatchTheReference) {
  uint64_t seed = 61000;
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16, DType::float64}) {
    for (int64_t size : kSizes) {
      for (double probability : {0.0, 0.1, 0.5, 0.75}) {
        ConsistencyProblem<Dropout> problem{.name = fmt::format("{} ({}) p={}", dtype_name(dtype), size, probability),
                                            .dtype = dtype,
                                            .exact = probability != 0.1,
                                            .tensors = {},
                                            .call = {}};
        problem.tensors["tensor"] = accumulated_output(random_tensor(Shape{size}, dtype, ++seed));
        const uint64_t dropout_seed = ++seed;
        problem.call = [probability, dropout_seed](TensorMap& t, const auto& run) {
          run({.tensor = t.at("tensor"), .probability = probability, .seed = dropout_seed});
        };
        check_variants_on_all_devices(problem, /*must_support=*/dtype != DType::float64);
      }
    }
  }
}

}  // namespace
}  // namespace fast_llm::kernels
