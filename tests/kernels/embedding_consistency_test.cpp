// Consistency of every embedding_forward / embedding_backward variant (CPU and CUDA) with the CPU reference: int64 and
// int32 indices with repeats, fp32 / bf16 / fp16 / fp64 weights, scale, accumulate, odd sizes, fp32 gradient buffers.
// The reference itself is checked against hand-computed gathers and finite differences in embedding_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "fast_llm/kernels/embedding.h"
#include "kernels/reference_consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

// (tokens) indices in [0, rows), with repeats when tokens > rows.
Tensor random_indices(int64_t tokens, int64_t rows, DType dtype, uint64_t seed) {
  std::vector<double> values = uniform_values(tokens, seed, 0, double(rows));
  for (double& value : values) value = std::floor(value);
  return make_tensor(values, Shape{tokens}, dtype);
}

TEST(EmbeddingConsistency, CpuAndCudaVariantsMatchTheReference) {
  // (tokens, rows, hidden)
  std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1}, {9, 4, 7}, {64, 100, 64}, {257, 50, 96}};
  uint64_t seed = 50000;
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16, DType::float64}) {
    for (DType index_dtype : {DType::int64, DType::int32}) {
      for (const auto& [tokens, rows, hidden] : shapes) {
        for (bool accumulate : {false, true}) {
          const std::string name = fmt::format("{} weight, {} indices, ({}, {}, {}) accumulate={}", dtype_name(dtype),
                                               dtype_name(index_dtype), tokens, rows, hidden, accumulate);
          const bool must_support = dtype != DType::float64;
          const double scale = accumulate ? 1.0 : 0.7;
          Tensor indices = random_indices(tokens, rows, index_dtype, ++seed);

          ConsistencyProblem<EmbeddingForward> forward{
              .name = name, .dtype = dtype, .exact = false, .tensors = {}, .call = {}};
          forward.tensors["indices"] = input(indices);
          forward.tensors["weight"] = input(random_tensor(Shape{rows, hidden}, dtype, ++seed));
          Tensor initial_output = random_tensor(Shape{tokens, hidden}, dtype, ++seed);
          forward.tensors["output"] = accumulate ? accumulated_output(initial_output) : output(initial_output);
          forward.call = [scale, accumulate](TensorMap& t, const auto& run) {
            run({.indices = t.at("indices"),
                 .weight = t.at("weight"),
                 .output = t.at("output"),
                 .scale = scale,
                 .accumulate = accumulate});
          };
          check_variants_on_all_devices(forward, must_support);

          ConsistencyProblem<EmbeddingBackward> backward{
              .name = name, .dtype = dtype, .exact = false, .tensors = {}, .call = {}};
          backward.tensors["indices"] = input(indices);
          backward.tensors["grad_output"] = input(random_tensor(Shape{tokens, hidden}, dtype, ++seed));
          const DType gradient_dtype = dtype == DType::float64 ? DType::float64 : DType::float32;
          backward.tensors["grad_weight"] =
              accumulated_output(random_tensor(Shape{rows, hidden}, gradient_dtype, ++seed));
          backward.call = [scale](TensorMap& t, const auto& run) {
            run({.indices = t.at("indices"),
                 .grad_output = t.at("grad_output"),
                 .grad_weight = t.at("grad_weight"),
                 .scale = scale});
          };
          check_variants_on_all_devices(backward, must_support);
        }
      }
    }
  }
}

}  // namespace
}  // namespace fast_llm::kernels
