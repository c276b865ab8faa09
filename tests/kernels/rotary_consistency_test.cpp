// Consistency of every rotary_apply variant (CPU and CUDA) with the CPU reference: forward and inverse, fp32 / bf16 /
// fp16 / fp64, full and partial rotary, odd sizes, contiguous tensors and the heads of a fused (tokens, 3 heads,
// head_size) buffer. The reference itself is checked against hand-computed rotations and finite differences in
// rotary_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "fast_llm/kernels/rotary.h"
#include "kernels/reference_consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

struct RotaryCase {
  DType dtype = DType::bfloat16;
  int64_t tokens = 1, heads = 1, head_size = 2, half = 1;
  bool inverse = false;
  bool strided = false;  // the middle third of the heads of a (tokens, 3 heads, head_size) buffer
};

std::string case_name(const RotaryCase& c) {
  return fmt::format("{} ({}, {}, {}) half={} inverse={}{}", dtype_name(c.dtype), c.tokens, c.heads, c.head_size,
                     c.half, c.inverse, c.strided ? " strided" : "");
}

// Every variant against the reference on `c`, with fresh inputs from `seed`.
void check_case(const RotaryCase& c, uint64_t& seed, bool must_support) {
  ConsistencyProblem<RotaryApply> problem{
      .name = case_name(c), .dtype = c.dtype, .exact = false, .tensors = {}, .call = {}};
  // Rotated in place: an output whose initial values are read.
  const int64_t heads = c.heads;
  Tensor storage = random_tensor(Shape{c.tokens, c.strided ? 3 * heads : heads, c.head_size}, c.dtype, ++seed, -2, 2);
  std::function<Tensor(const Tensor&)> view;
  if (c.strided) view = [heads](const Tensor& tensor) { return tensor.slice(1, heads, 2 * heads); };
  problem.tensors["tensor"] = accumulated_output(storage, view);
  // fp32, as the header asks.
  auto [cos, sin] = random_rotary_tables(c.tokens, c.half, DType::float32, ++seed);
  problem.tensors["cos"] = input(cos);
  problem.tensors["sin"] = input(sin);
  problem.call = [inverse = c.inverse](TensorMap& t, const auto& run) {
    run({.tensor = t.at("tensor"), .cos = t.at("cos"), .sin = t.at("sin"), .inverse = inverse});
  };
  check_variants_on_all_devices(problem, must_support);
}

// check_case for every (dtype, shape, direction, layout); shapes are (tokens, heads, head_size, half). The CUDA
// variants must run every fp32 / bf16 / fp16 contiguous case.
void check_cases(const std::vector<std::array<int64_t, 4>>& shapes, std::initializer_list<DType> dtypes,
                 std::initializer_list<bool> layouts, uint64_t seed) {
  for (DType dtype : dtypes)
    for (const auto& [tokens, heads, head_size, half] : shapes)
      for (bool inverse : {false, true})
        for (bool strided : layouts)
          check_case({.dtype = dtype,
                      .tokens = tokens,
                      .heads = heads,
                      .head_size = head_size,
                      .half = half,
                      .inverse = inverse,
                      .strided = strided},
                     seed, /*must_support=*/dtype != DType::float64 && !strided);
}

TEST(RotaryConsistency, CpuAndCudaVariantsMatchTheReference) {
  check_cases({{1, 1, 2, 1}, {5, 3, 8, 4}, {7, 4, 64, 32}, {9, 2, 80, 16}, {33, 8, 128, 64}},
              {DType::float32, DType::bfloat16, DType::float16, DType::float64}, {false, true}, 40000);
}

// Shapes where the CUDA kernel's threads go round both of their loops (kernels/cuda/common.cuh token_step_grid):
// more (head group, vector) steps per token than a block has threads (17 head groups of 16 or 32 vectors), and more
// tokens than one pass of the grid covers (132 SMs x 8 blocks x 8 or 4 tokens a block, at 32 or 64 steps a token).
TEST(RotaryConsistency, CudaThreadsGoRoundBothLoops) {
  // Without a CUDA device only the reference would run, against itself.
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  check_cases({{3, 68, 256, 128}, {10000, 32, 64, 32}}, {DType::float32, DType::bfloat16}, {false}, 41000);
}

}  // namespace
}  // namespace fast_llm::kernels
