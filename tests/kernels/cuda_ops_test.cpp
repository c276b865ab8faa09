// CUDA-only cases for the fused variants of kernels/cuda/{normalization, rotary, embedding, cross_entropy,
// optimizer_ops, pointwise}.cu, on top of the per-op consistency tests: the shapes that pick each kernel path (16-byte
// and scalar accesses, norm rows held in registers by one warp or several, cross-entropy rows staged in shared memory,
// rows read twice, several rows per block and row groups that loop, clusters of 1 to 8 blocks per cross-entropy row),
// the norms' residual form on each path and in place, odd sizes (hidden 264, 576 and 4097, vocab 50257, 1, 3 and 9001
// rows), unaligned and strided views, mixed dtypes, and bitwise run-to-run determinism of every reduction. Every case
// compares the `fused` variant with the CPU reference through the consistency harness (outputs poisoned with NaN
// first, relative error of the norm within the dtype's tolerance) and fails if the variant declines it; Adam's
// compute-dtype weights are also compared bit for bit with a cast of the parameters it leaves. Without a GPU every
// case skips itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "fast_llm/kernels/copy.h"
#include "fast_llm/kernels/cross_entropy.h"
#include "fast_llm/kernels/embedding.h"
#include "fast_llm/kernels/normalization.h"
#include "fast_llm/kernels/optimizer_ops.h"
#include "fast_llm/kernels/pointwise.h"
#include "fast_llm/kernels/rotary.h"
#include "kernels/consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

#define REQUIRE_GPU() \
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device visible"

// The fused variant matches the reference on `problem` (and does not decline it).
template <class Op>
void expect_fused_matches(const ConsistencyProblem<Op>& problem) {
  const std::string id = fmt::format("{}:cuda:fused", Op::name);
  const ConsistencyReport report = check_variants(problem, DeviceType::cuda);
  bool found = false;
  for (const VariantOutcome& outcome : report) {
    if (outcome.id != id) continue;
    found = true;
    EXPECT_FALSE(outcome.unsupported.has_value()) << id << " declines " << problem.name << ": "
                                                  << outcome.unsupported.value_or("");
  }
  EXPECT_TRUE(found) << id << " is not registered";
}

// Two runs of the fused variant on the same inputs write the same bits.
template <class Op>
void expect_deterministic(const ConsistencyProblem<Op>& problem) {
  SCOPED_TRACE(fmt::format("{} {} (determinism)", Op::name, problem.name));
  const auto& variant = OpRegistry<Op>::instance().find("fused", Device::cuda(0));
  std::vector<std::map<std::string, std::vector<char>>> runs;
  for (int run = 0; run < 2; ++run) {
    TensorMap tensors = testing::detail::materialize(problem, Device::cuda(0), testing::detail::kNanPoison);
    problem.call(tensors, [&](const typename Op::Args& args) { variant.run(args); });
    synchronize_device(Device::cuda(0));
    std::map<std::string, std::vector<char>> bytes;
    for (const auto& [name, spec] : problem.tensors) {
      if (!spec.output) continue;
      const Tensor host = tensors.at(name).to(Device::cpu());
      const char* data = static_cast<const char*>(host.data());
      bytes[name].assign(data, data + host.nbytes());
    }
    runs.push_back(std::move(bytes));
  }
  for (const auto& [name, first] : runs[0])
    EXPECT_TRUE(first == runs[1].at(name)) << "output " << name << " differs between two runs";
}

// A 1-d view of `count` elements starting one element into its storage (not 16-byte aligned) when `unaligned`.
std::function<Tensor(const Tensor&)> offset_view(bool unaligned, int64_t count) {
  if (!unaligned) return nullptr;
  return [count](const Tensor& tensor) { return tensor.slice(0, 1, 1 + count); };
}

// A (rows, columns) view of (rows, columns + padding) rows (padding 0: the storage itself).
std::function<Tensor(const Tensor&)> padded_rows(int64_t columns, int64_t padding) {
  if (padding == 0) return nullptr;
  return [columns](const Tensor& tensor) { return tensor.slice(1, 0, columns); };
}

Tensor* optional_tensor(TensorMap& tensors, const std::string& name) {
  auto found = tensors.find(name);
  return found == tensors.end() ? nullptr : &found->second;
}

// ---------------------------------------------------------------------------------------------------------------------
// rms_norm / layer_norm

struct NormCase {
  DType dtype = DType::bfloat16;
  DType parameter_dtype = DType::bfloat16;
  int64_t rows = 1, hidden = 1;
  bool weight = true, bias = true, zero_centered = false;
  bool grad_weight = true, grad_bias = true;
  int64_t padding = 0;    // extra columns per row of the activations' storage
  bool residual = false;  // the residual form: residual and sum in the forward, grad_residual in the backward
};

std::string norm_name(const NormCase& c) {
  return fmt::format("{} (weights {}) ({}, {}) weight={} bias={} zero_centered={} grad_weight={} grad_bias={} "
                     "padding={} residual={}",
                     dtype_name(c.dtype), dtype_name(c.parameter_dtype), c.rows, c.hidden, c.weight, c.bias,
                     c.zero_centered, c.grad_weight, c.grad_bias, c.padding, c.residual);
}

TensorSpec norm_activation(const NormCase& c, bool is_output, uint64_t seed) {
  Tensor storage = random_tensor(Shape{c.rows, c.hidden + c.padding}, c.dtype, seed, -2, 2);
  return is_output ? output(storage, padded_rows(c.hidden, c.padding))
                   : input(storage, padded_rows(c.hidden, c.padding));
}

struct NormProblems {
  ConsistencyProblem<RmsNormForward> rms_forward;
  ConsistencyProblem<RmsNormBackward> rms_backward;
  ConsistencyProblem<LayerNormForward> layer_forward;
  ConsistencyProblem<LayerNormBackward> layer_backward;
};

NormProblems norm_problems(const NormCase& c, uint64_t seed) {
  const Shape rows{c.rows}, hidden{c.hidden};
  NormProblems problems;
  const std::string name = norm_name(c);

  auto& rms_forward = problems.rms_forward;
  rms_forward.name = name;
  rms_forward.dtype = c.dtype;
  rms_forward.tensors["input"] = norm_activation(c, false, ++seed);
  if (c.weight) rms_forward.tensors["weight"] = input(random_tensor(hidden, c.parameter_dtype, ++seed));
  rms_forward.tensors["output"] = norm_activation(c, true, ++seed);
  rms_forward.tensors["inverse_rms"] = output(Tensor::empty(rows, DType::float32));
  if (c.residual) {
    rms_forward.tensors["residual"] = norm_activation(c, false, ++seed);
    rms_forward.tensors["sum"] = norm_activation(c, true, ++seed);
  }
  rms_forward.call = [c](TensorMap& t, const auto& run) {
    run({.input = t.at("input"), .weight = optional_tensor(t, "weight"), .output = t.at("output"),
         .inverse_rms = t.at("inverse_rms"), .epsilon = 1e-5, .zero_centered = c.zero_centered,
         .residual = optional_tensor(t, "residual"), .sum = optional_tensor(t, "sum")});
  };

  auto& rms_backward = problems.rms_backward;
  rms_backward.name = name;
  rms_backward.dtype = c.dtype;
  rms_backward.tensors["grad_output"] = norm_activation(c, false, ++seed);
  rms_backward.tensors["input"] = norm_activation(c, false, ++seed);
  if (c.weight) {
    rms_backward.tensors["weight"] = input(random_tensor(hidden, c.parameter_dtype, ++seed));
    if (c.grad_weight)
      rms_backward.tensors["grad_weight"] = accumulated_output(random_tensor(hidden, DType::float32, ++seed));
  }
  rms_backward.tensors["inverse_rms"] = input(random_tensor(rows, DType::float32, ++seed, 0.5, 2));
  rms_backward.tensors["grad_input"] = norm_activation(c, true, ++seed);
  if (c.residual) rms_backward.tensors["grad_residual"] = norm_activation(c, false, ++seed);
  rms_backward.call = [c](TensorMap& t, const auto& run) {
    run({.grad_output = t.at("grad_output"), .input = t.at("input"), .weight = optional_tensor(t, "weight"),
         .inverse_rms = t.at("inverse_rms"), .grad_input = t.at("grad_input"),
         .grad_weight = optional_tensor(t, "grad_weight"), .zero_centered = c.zero_centered,
         .grad_residual = optional_tensor(t, "grad_residual")});
  };

  auto& layer_forward = problems.layer_forward;
  layer_forward.name = name;
  layer_forward.dtype = c.dtype;
  layer_forward.tensors["input"] = norm_activation(c, false, ++seed);
  if (c.weight) layer_forward.tensors["weight"] = input(random_tensor(hidden, c.parameter_dtype, ++seed));
  if (c.bias) layer_forward.tensors["bias"] = input(random_tensor(hidden, c.parameter_dtype, ++seed));
  layer_forward.tensors["output"] = norm_activation(c, true, ++seed);
  layer_forward.tensors["mean"] = output(Tensor::empty(rows, DType::float32));
  layer_forward.tensors["inverse_std"] = output(Tensor::empty(rows, DType::float32));
  if (c.residual) {
    layer_forward.tensors["residual"] = norm_activation(c, false, ++seed);
    layer_forward.tensors["sum"] = norm_activation(c, true, ++seed);
  }
  layer_forward.call = [c](TensorMap& t, const auto& run) {
    run({.input = t.at("input"), .weight = optional_tensor(t, "weight"), .bias = optional_tensor(t, "bias"),
         .output = t.at("output"), .mean = t.at("mean"), .inverse_std = t.at("inverse_std"), .epsilon = 1e-5,
         .zero_centered = c.zero_centered, .residual = optional_tensor(t, "residual"),
         .sum = optional_tensor(t, "sum")});
  };

  auto& layer_backward = problems.layer_backward;
  layer_backward.name = name;
  layer_backward.dtype = c.dtype;
  layer_backward.tensors["grad_output"] = norm_activation(c, false, ++seed);
  layer_backward.tensors["input"] = norm_activation(c, false, ++seed);
  if (c.weight) {
    layer_backward.tensors["weight"] = input(random_tensor(hidden, c.parameter_dtype, ++seed));
    if (c.grad_weight)
      layer_backward.tensors["grad_weight"] = accumulated_output(random_tensor(hidden, DType::float32, ++seed));
  }
  if (c.bias && c.grad_bias)
    layer_backward.tensors["grad_bias"] = accumulated_output(random_tensor(hidden, DType::float32, ++seed));
  layer_backward.tensors["mean"] = input(random_tensor(rows, DType::float32, ++seed, -0.5, 0.5));
  layer_backward.tensors["inverse_std"] = input(random_tensor(rows, DType::float32, ++seed, 0.5, 2));
  layer_backward.tensors["grad_input"] = norm_activation(c, true, ++seed);
  if (c.residual) layer_backward.tensors["grad_residual"] = norm_activation(c, false, ++seed);
  layer_backward.call = [c](TensorMap& t, const auto& run) {
    run({.grad_output = t.at("grad_output"), .input = t.at("input"), .weight = optional_tensor(t, "weight"),
         .mean = t.at("mean"), .inverse_std = t.at("inverse_std"), .grad_input = t.at("grad_input"),
         .grad_weight = optional_tensor(t, "grad_weight"), .grad_bias = optional_tensor(t, "grad_bias"),
         .zero_centered = c.zero_centered, .grad_residual = optional_tensor(t, "grad_residual")});
  };
  return problems;
}

std::vector<NormCase> norm_cases() {
  const DType bf16 = DType::bfloat16, fp16 = DType::float16, fp32 = DType::float32;
  return {
      // Scalar path (odd hidden), rows read once per pass (4097 elements exceed the registers of a row group).
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 3, .hidden = 4097},
      {.dtype = fp32, .parameter_dtype = fp32, .rows = 1, .hidden = 4097, .zero_centered = true},
      // Scalar path, rows held in registers.
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 3, .hidden = 1001},
      // 16-byte path, one warp per row: SmolLM2-135M's hidden size (72 vectors, 2 or 3 a lane) over more rows than
      // the backward's wave has row groups, and 264 (33 vectors: one lane holds two).
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 9001, .hidden = 576},
      {.dtype = fp16, .parameter_dtype = fp32, .rows = 35, .hidden = 576, .zero_centered = true},
      {.dtype = fp32, .parameter_dtype = fp32, .rows = 513, .hidden = 576},
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 67, .hidden = 264},
      // 16-byte path, several warps per row: Llama-3.2-1B's and 3B's hidden sizes (2 and 3 warps, the latter two rows
      // to a block of 192 threads), fp32 parameters with bf16 activations.
      {.dtype = bf16, .parameter_dtype = fp32, .rows = 3, .hidden = 2048},
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 1001, .hidden = 3072},  // layer_norm: exactly 48 KiB of sums
      {.dtype = fp32, .parameter_dtype = fp32, .rows = 5, .hidden = 4096},
      {.dtype = fp16, .parameter_dtype = fp16, .rows = 17, .hidden = 8192, .zero_centered = true},
      // 16-byte path, the longest rows held in registers (512 threads of 4 vectors): the backward's column sums take
      // more than 48 KiB of shared memory (64 KiB for rms_norm, 128 KiB for layer_norm).
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 5, .hidden = 16384},
      // 16-byte path, rows read once per pass.
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 2, .hidden = 65536},
      // Short rows: several row groups per block, and (backward) row groups that loop over many rows.
      {.dtype = fp32, .parameter_dtype = fp32, .rows = 20000, .hidden = 64},
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 333, .hidden = 40},
      // Padded (strided) rows that keep 16-byte alignment, and padded rows that break it.
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 1000, .hidden = 2048, .padding = 8},
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 7, .hidden = 256, .padding = 3},
      // Optional parameters and gradients.
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 9, .hidden = 512, .weight = false, .bias = false},
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 9, .hidden = 512, .grad_weight = false},
      {.dtype = fp32, .parameter_dtype = fp32, .rows = 9, .hidden = 4097, .grad_weight = false, .grad_bias = true},
      {.dtype = fp16, .parameter_dtype = fp32, .rows = 9, .hidden = 768, .bias = false, .grad_weight = false},
      // The residual form on each path: one warp and several per row, the scalar path held in registers and read
      // per pass, long 16-byte rows, padded rows (16-byte aligned and not), zero-centred fp16 with fp32 parameters.
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 9001, .hidden = 576, .residual = true},
      {.dtype = bf16, .parameter_dtype = fp32, .rows = 67, .hidden = 264, .residual = true},
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 1001, .hidden = 3072, .residual = true},
      // Row groups of several warps that each walk several rows (their barrier's scratch halves alternate per row).
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 7001, .hidden = 2048, .residual = true},
      {.dtype = fp16, .parameter_dtype = fp32, .rows = 35, .hidden = 2048, .zero_centered = true, .residual = true},
      {.dtype = fp32, .parameter_dtype = fp32, .rows = 513, .hidden = 576, .residual = true},
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 3, .hidden = 1001, .residual = true},
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 3, .hidden = 4097, .residual = true},
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 2, .hidden = 65536, .residual = true},
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 1000, .hidden = 2048, .padding = 8, .residual = true},
      {.dtype = bf16, .parameter_dtype = bf16, .rows = 7, .hidden = 256, .padding = 3, .residual = true},
  };
}

TEST(CudaOps, NormalizationMatchesTheReference) {
  REQUIRE_GPU();
  uint64_t seed = 90000;
  for (const NormCase& c : norm_cases()) {
    const NormProblems problems = norm_problems(c, seed += 100);
    expect_fused_matches(problems.rms_forward);
    expect_fused_matches(problems.rms_backward);
    expect_fused_matches(problems.layer_forward);
    expect_fused_matches(problems.layer_backward);
  }
}

TEST(CudaOps, NormalizationBackwardIsDeterministic) {
  REQUIRE_GPU();
  uint64_t seed = 91000;
  for (const NormCase& c : std::vector<NormCase>{
           {.dtype = DType::float32, .parameter_dtype = DType::float32, .rows = 20000, .hidden = 64},
           {.dtype = DType::bfloat16, .parameter_dtype = DType::bfloat16, .rows = 1000, .hidden = 2048},
           {.dtype = DType::bfloat16, .parameter_dtype = DType::bfloat16, .rows = 7001, .hidden = 3072,
            .residual = true},
           {.dtype = DType::bfloat16, .parameter_dtype = DType::bfloat16, .rows = 9001, .hidden = 576},
           {.dtype = DType::bfloat16, .parameter_dtype = DType::bfloat16, .rows = 9001, .hidden = 576,
            .residual = true},
           {.dtype = DType::bfloat16, .parameter_dtype = DType::bfloat16, .rows = 300, .hidden = 4097}}) {
    const NormProblems problems = norm_problems(c, seed += 100);
    expect_deterministic(problems.rms_forward);
    expect_deterministic(problems.rms_backward);
    expect_deterministic(problems.layer_forward);
    expect_deterministic(problems.layer_backward);
  }
}

// The residual form in place, as the decoder block calls it: `sum` is the input, which ends up holding the sum.
TEST(CudaOps, NormalizationResidualFormInPlace) {
  REQUIRE_GPU();
  uint64_t seed = 92000;
  const DType bf16 = DType::bfloat16;
  // Rows in registers (16-byte and scalar) and rows read per pass (scalar and 16-byte).
  const std::vector<NormCase> cases = {{.dtype = bf16, .parameter_dtype = bf16, .rows = 9001, .hidden = 576},
                                       {.dtype = bf16, .parameter_dtype = bf16, .rows = 3, .hidden = 1001},
                                       {.dtype = bf16, .parameter_dtype = bf16, .rows = 3, .hidden = 4097},
                                       {.dtype = bf16, .parameter_dtype = bf16, .rows = 2, .hidden = 65536}};
  for (const NormCase& c : cases) {
    const Shape rows{c.rows}, hidden{c.hidden};
    const std::string name = norm_name(c) + " in place";
    auto input_and_sum = [&] {
      return accumulated_output(random_tensor(Shape{c.rows, c.hidden}, c.dtype, ++seed, -2, 2));
    };

    ConsistencyProblem<RmsNormForward> rms{.name = name, .dtype = c.dtype, .exact = false, .tensors = {}, .call = {}};
    rms.tensors["input"] = input_and_sum();
    rms.tensors["residual"] = norm_activation(c, false, ++seed);
    rms.tensors["weight"] = input(random_tensor(hidden, c.parameter_dtype, ++seed));
    rms.tensors["output"] = norm_activation(c, true, ++seed);
    rms.tensors["inverse_rms"] = output(Tensor::empty(rows, DType::float32));
    rms.call = [](TensorMap& t, const auto& run) {
      run({.input = t.at("input"), .weight = &t.at("weight"), .output = t.at("output"),
           .inverse_rms = t.at("inverse_rms"), .residual = &t.at("residual"), .sum = &t.at("input")});
    };
    expect_fused_matches(rms);

    ConsistencyProblem<LayerNormForward> layer{
        .name = name, .dtype = c.dtype, .exact = false, .tensors = {}, .call = {}};
    layer.tensors["input"] = input_and_sum();
    layer.tensors["residual"] = norm_activation(c, false, ++seed);
    layer.tensors["weight"] = input(random_tensor(hidden, c.parameter_dtype, ++seed));
    layer.tensors["bias"] = input(random_tensor(hidden, c.parameter_dtype, ++seed));
    layer.tensors["output"] = norm_activation(c, true, ++seed);
    layer.tensors["mean"] = output(Tensor::empty(rows, DType::float32));
    layer.tensors["inverse_std"] = output(Tensor::empty(rows, DType::float32));
    layer.call = [](TensorMap& t, const auto& run) {
      run({.input = t.at("input"), .weight = &t.at("weight"), .bias = &t.at("bias"), .output = t.at("output"),
           .mean = t.at("mean"), .inverse_std = t.at("inverse_std"), .residual = &t.at("residual"),
           .sum = &t.at("input")});
    };
    expect_fused_matches(layer);
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// rotary

struct RotaryCase {
  DType dtype = DType::bfloat16;
  int64_t tokens = 1, heads = 1, head_size = 64, half = 32;
  int64_t stored_heads = 0, first_head = 0;  // a view of heads [first_head, first_head + heads) of stored_heads
};

TEST(CudaOps, RotaryMatchesTheReference) {
  REQUIRE_GPU();
  const DType bf16 = DType::bfloat16, fp16 = DType::float16, fp32 = DType::float32;
  const std::vector<RotaryCase> cases = {
      {.dtype = bf16, .tokens = 3, .heads = 5, .head_size = 64, .half = 32},
      {.dtype = fp32, .tokens = 1, .heads = 32, .head_size = 128, .half = 32},  // partial rotary
      {.dtype = bf16, .tokens = 7, .heads = 8, .head_size = 64, .half = 12},    // scalar path (12 % 8 != 0)
      {.dtype = fp32, .tokens = 7, .heads = 3, .head_size = 30, .half = 13},    // scalar path, odd everything
      {.dtype = fp16, .tokens = 2048, .heads = 8, .head_size = 64, .half = 32},
      // The key heads of a fused (tokens, 32 + 8 + 8, 64) query-key-value buffer.
      {.dtype = bf16, .tokens = 65, .heads = 8, .head_size = 64, .half = 32, .stored_heads = 48, .first_head = 32},
  };
  uint64_t seed = 92000;
  for (const RotaryCase& c : cases)
    for (bool inverse : {false, true}) {
      ConsistencyProblem<RotaryApply> problem;
      problem.name = fmt::format("{} ({}, {}, {}) half={} stored_heads={} inverse={}", dtype_name(c.dtype), c.tokens,
                                 c.heads, c.head_size, c.half, c.stored_heads, inverse);
      problem.dtype = c.dtype;
      const int64_t stored_heads = c.stored_heads > 0 ? c.stored_heads : c.heads;
      std::function<Tensor(const Tensor&)> view;
      if (c.stored_heads > 0)
        view = [first = c.first_head, heads = c.heads](const Tensor& t) { return t.slice(1, first, first + heads); };
      problem.tensors["tensor"] =
          accumulated_output(random_tensor(Shape{c.tokens, stored_heads, c.head_size}, c.dtype, ++seed, -2, 2), view);
      problem.tensors["cos"] = input(random_tensor(Shape{c.tokens, c.half}, DType::float32, ++seed));
      problem.tensors["sin"] = input(random_tensor(Shape{c.tokens, c.half}, DType::float32, ++seed));
      problem.call = [inverse](TensorMap& t, const auto& run) {
        run({.tensor = t.at("tensor"), .cos = t.at("cos"), .sin = t.at("sin"), .inverse = inverse});
      };
      expect_fused_matches(problem);
    }
}

// ---------------------------------------------------------------------------------------------------------------------
// embedding

struct EmbeddingCase {
  DType dtype = DType::bfloat16;
  DType index_dtype = DType::int64;
  int64_t tokens = 1, rows = 1, hidden = 1;
  int64_t distinct = 0;       // indices drawn from [0, distinct) (0: from every row)
  int64_t repeated = -1;      // >= 0: every index is this one except one token in eight
  bool strided_indices = false;  // indices are every other element of their storage
  int64_t padding = 0;           // extra columns per row of grad_output / output
  double scale = 1.0;
};

std::string embedding_name(const EmbeddingCase& c) {
  return fmt::format("{} weight, {} indices, ({}, {}, {}) distinct={} repeated={} strided_indices={} padding={} "
                     "scale={}",
                     dtype_name(c.dtype), dtype_name(c.index_dtype), c.tokens, c.rows, c.hidden, c.distinct,
                     c.repeated, c.strided_indices, c.padding, c.scale);
}

// (tokens) indices, stored as (tokens, 2) with the indices in column 0 when strided.
Tensor embedding_indices(const EmbeddingCase& c, uint64_t seed) {
  const int64_t range = c.distinct > 0 ? c.distinct : c.rows;
  std::vector<double> values = uniform_values(c.tokens, seed, 0, double(range));
  for (int64_t token = 0; token < c.tokens; ++token) {
    double& value = values[size_t(token)];
    value = std::floor(value);
    if (c.repeated >= 0 && token % 8 != 5) value = double(c.repeated);
  }
  if (!c.strided_indices) return make_tensor(values, Shape{c.tokens}, c.index_dtype);
  std::vector<double> stored(size_t(2 * c.tokens), 0.0);
  for (int64_t token = 0; token < c.tokens; ++token) stored[size_t(2 * token)] = values[size_t(token)];
  return make_tensor(stored, Shape{c.tokens, 2}, c.index_dtype);
}

std::function<Tensor(const Tensor&)> index_view(const EmbeddingCase& c) {
  if (!c.strided_indices) return nullptr;
  return [](const Tensor& t) { return t.select(1, 0); };
}

ConsistencyProblem<EmbeddingForward> embedding_forward_problem(const EmbeddingCase& c, const Tensor& indices,
                                                               bool accumulate, uint64_t seed) {
  ConsistencyProblem<EmbeddingForward> problem;
  problem.name = fmt::format("{} accumulate={}", embedding_name(c), accumulate);
  problem.dtype = c.dtype;
  problem.tensors["indices"] = input(indices, index_view(c));
  problem.tensors["weight"] = input(random_tensor(Shape{c.rows, c.hidden}, c.dtype, ++seed));
  Tensor initial = random_tensor(Shape{c.tokens, c.hidden + c.padding}, c.dtype, ++seed);
  problem.tensors["output"] = accumulate ? accumulated_output(initial, padded_rows(c.hidden, c.padding))
                                         : output(initial, padded_rows(c.hidden, c.padding));
  problem.call = [scale = c.scale, accumulate](TensorMap& t, const auto& run) {
    run({.indices = t.at("indices"), .weight = t.at("weight"), .output = t.at("output"), .scale = scale,
         .accumulate = accumulate});
  };
  return problem;
}

ConsistencyProblem<EmbeddingBackward> embedding_backward_problem(const EmbeddingCase& c, const Tensor& indices,
                                                                 uint64_t seed) {
  ConsistencyProblem<EmbeddingBackward> problem;
  problem.name = embedding_name(c);
  problem.dtype = c.dtype;
  problem.tensors["indices"] = input(indices, index_view(c));
  problem.tensors["grad_output"] = input(random_tensor(Shape{c.tokens, c.hidden + c.padding}, c.dtype, ++seed),
                                         padded_rows(c.hidden, c.padding));
  problem.tensors["grad_weight"] = accumulated_output(random_tensor(Shape{c.rows, c.hidden}, DType::float32, ++seed));
  problem.call = [scale = c.scale](TensorMap& t, const auto& run) {
    run({.indices = t.at("indices"), .grad_output = t.at("grad_output"), .grad_weight = t.at("grad_weight"),
         .scale = scale});
  };
  return problem;
}

std::vector<EmbeddingCase> embedding_cases() {
  const DType bf16 = DType::bfloat16, fp16 = DType::float16, fp32 = DType::float32;
  return {
      {.dtype = bf16, .tokens = 3, .rows = 50257, .hidden = 64},
      {.dtype = fp32, .tokens = 1, .rows = 1000, .hidden = 4097, .scale = 0.5},  // scalar path
      {.dtype = fp16, .index_dtype = DType::int32, .tokens = 1, .rows = 4, .hidden = 64},
      // Many repeats: runs of one index across many chunks of sorted tokens, and chunk boundaries inside runs.
      {.dtype = bf16, .tokens = 5000, .rows = 128, .hidden = 2048, .distinct = 128},
      {.dtype = fp32, .tokens = 3000, .rows = 16, .hidden = 256, .repeated = 7, .scale = 0.25},
      {.dtype = bf16, .tokens = 777, .rows = 50, .hidden = 96, .distinct = 3},
      // Strided indices (int32 and int64), padded rows (aligned and not).
      {.dtype = bf16, .index_dtype = DType::int32, .tokens = 257, .rows = 300, .hidden = 512, .strided_indices = true,
       .padding = 8},
      {.dtype = fp32, .tokens = 100, .rows = 30, .hidden = 33, .strided_indices = true, .padding = 1},
  };
}

TEST(CudaOps, EmbeddingMatchesTheReference) {
  REQUIRE_GPU();
  uint64_t seed = 93000;
  for (const EmbeddingCase& c : embedding_cases()) {
    const Tensor indices = embedding_indices(c, seed += 10);
    for (bool accumulate : {false, true}) expect_fused_matches(embedding_forward_problem(c, indices, accumulate, ++seed));
    expect_fused_matches(embedding_backward_problem(c, indices, ++seed));
  }
}

TEST(CudaOps, EmbeddingBackwardIsDeterministic) {
  REQUIRE_GPU();
  uint64_t seed = 94000;
  for (const EmbeddingCase& c :
       std::vector<EmbeddingCase>{{.dtype = DType::bfloat16, .tokens = 16384, .rows = 1000, .hidden = 2048},
                                  {.dtype = DType::float32, .tokens = 3000, .rows = 16, .hidden = 256, .repeated = 7}}) {
    const Tensor indices = embedding_indices(c, seed += 10);
    expect_deterministic(embedding_backward_problem(c, indices, ++seed));
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// cross_entropy

enum class Gradient { none, out_of_place, in_place };

struct CrossEntropyCase {
  DType dtype = DType::bfloat16;
  int64_t tokens = 1, vocab = 1;
  bool z_loss = false;
  double scale = 1.0;
  std::optional<double> softcap = std::nullopt;
  Gradient gradient = Gradient::out_of_place;
  DType sum_dtype = DType::float32;
  bool unaligned_gradient = false;  // out of place, one element into rows of vocab + 1: not aligned as the logits
};

ConsistencyProblem<CrossEntropyForwardBackward> cross_entropy_problem(const CrossEntropyCase& c, uint64_t seed) {
  ConsistencyProblem<CrossEntropyForwardBackward> problem;
  problem.name = fmt::format("{} ({}, {}) z_loss={} scale={} softcap={} gradient={} sums={}{}", dtype_name(c.dtype),
                             c.tokens, c.vocab, c.z_loss, c.scale, c.softcap.value_or(0.0), int(c.gradient),
                             dtype_name(c.sum_dtype), c.unaligned_gradient ? " unaligned gradient" : "");
  problem.dtype = c.dtype;
  // fp32 sums over a vocabulary of 10^5 round differently on the two sides by up to ~sqrt(vocab) ulps.
  if (c.dtype == DType::float32 && c.vocab > 100000) problem.tolerance = 5e-5;
  const Tensor logits = random_tensor(Shape{c.tokens, c.vocab}, c.dtype, ++seed, -8, 8);
  // Labels at both ends of the vocabulary and in between; every third token masked.
  std::vector<double> labels;
  for (int64_t token = 0; token < c.tokens; ++token) {
    const int64_t label = token % 4 == 0 ? c.vocab - 1 : token % 4 == 2 ? 0 : (token * 7919 + 13) % c.vocab;
    labels.push_back(token % 3 == 1 ? -100.0 : double(label));
  }
  problem.tensors["logits"] = c.gradient == Gradient::in_place ? accumulated_output(logits) : input(logits);
  problem.tensors["labels"] = input(make_tensor(labels, Shape{c.tokens}, DType::int64));
  problem.tensors["label_loss_sum"] = accumulated_output(filled(Shape{1}, c.sum_dtype, 0.25));
  if (c.z_loss) problem.tensors["z_loss_sum"] = accumulated_output(filled(Shape{1}, c.sum_dtype, 0.5));
  if (c.gradient == Gradient::out_of_place && c.unaligned_gradient)
    problem.tensors["grad_logits"] =
        output(Tensor::empty(Shape{c.tokens, c.vocab + 1}, c.dtype),
               [vocab = c.vocab](const Tensor& tensor) { return tensor.slice(1, 1, 1 + vocab); });
  else if (c.gradient == Gradient::out_of_place)
    problem.tensors["grad_logits"] = output(Tensor::empty(Shape{c.tokens, c.vocab}, c.dtype));
  problem.call = [c](TensorMap& t, const auto& run) {
    Tensor* grad = c.gradient == Gradient::in_place       ? &t.at("logits")
                   : c.gradient == Gradient::out_of_place ? &t.at("grad_logits")
                                                          : nullptr;
    run({.logits = t.at("logits"), .labels = t.at("labels"), .label_loss_sum = t.at("label_loss_sum"),
         .z_loss_sum = c.z_loss ? &t.at("z_loss_sum") : nullptr, .grad_logits = grad, .label_weight = 0.03,
         .z_loss_weight = c.z_loss ? 1e-3 : 0.0, .logits_scale_factor = c.scale, .softcap = c.softcap});
  };
  return problem;
}

TEST(CudaOps, CrossEntropyMatchesTheReference) {
  REQUIRE_GPU();
  const DType bf16 = DType::bfloat16, fp16 = DType::float16, fp32 = DType::float32;
  const std::vector<CrossEntropyCase> cases = {
      // Odd vocab: rows start at every offset from a 16-byte boundary, the edge chunks of a row's window hold its
      // neighbours' logits; one block per row.
      {.dtype = bf16, .tokens = 3, .vocab = 50257, .z_loss = true},
      {.dtype = fp16, .tokens = 1, .vocab = 50257, .gradient = Gradient::none, .sum_dtype = DType::float64},
      // The gradient's rows not aligned as the logits': element stores.
      {.dtype = bf16, .tokens = 4, .vocab = 4096, .z_loss = true, .unaligned_gradient = true},
      // Llama-3 vocabulary: clusters of 3 blocks (bf16) and 5 (fp32) per row.
      {.dtype = bf16, .tokens = 3, .vocab = 128256, .z_loss = true, .scale = 0.5, .softcap = 30.0,
       .gradient = Gradient::in_place},
      {.dtype = fp32, .tokens = 3, .vocab = 128256},
      // 8 and 7 blocks per row; rows too long for the shared memory of 8 blocks: read twice.
      {.dtype = bf16, .tokens = 2, .vocab = 460000, .z_loss = true},
      {.dtype = fp32, .tokens = 2, .vocab = 200003, .softcap = 10.0},
      {.dtype = bf16, .tokens = 2, .vocab = 500000, .z_loss = true, .gradient = Gradient::in_place},
      // SmolLM2: one block per row and per SM, more rows than blocks: a block walks rows through both stages.
      {.dtype = bf16, .tokens = 700, .vocab = 49152, .z_loss = true, .gradient = Gradient::in_place},
      // Small vocabularies (fewer threads, several blocks per SM) and many rows.
      {.dtype = fp32, .tokens = 64, .vocab = 1000, .z_loss = true, .sum_dtype = DType::float64},
      {.dtype = bf16, .tokens = 3000, .vocab = 1000, .scale = 2.0, .gradient = Gradient::in_place},
      {.dtype = bf16, .tokens = 300, .vocab = 32000, .scale = 2.0},
      {.dtype = bf16, .tokens = 5, .vocab = 7, .z_loss = true, .softcap = 5.0, .gradient = Gradient::in_place},
  };
  uint64_t seed = 95000;
  for (const CrossEntropyCase& c : cases) expect_fused_matches(cross_entropy_problem(c, seed += 10));
}

TEST(CudaOps, CrossEntropyIsDeterministic) {
  REQUIRE_GPU();
  expect_deterministic(cross_entropy_problem(
      {.dtype = DType::bfloat16, .tokens = 1000, .vocab = 32000, .z_loss = true, .gradient = Gradient::out_of_place},
      96000));
  expect_deterministic(cross_entropy_problem({.dtype = DType::bfloat16, .tokens = 64, .vocab = 128256, .z_loss = true},
                                             96100));
  expect_deterministic(cross_entropy_problem({.dtype = DType::bfloat16, .tokens = 700, .vocab = 49152, .z_loss = true},
                                             96200));
}

// ---------------------------------------------------------------------------------------------------------------------
// adam_step, squared_norm

// With `weight_dtype`, Adam also writes the compute-dtype weights (random at first, viewed like the others).
ConsistencyProblem<AdamStep> adam_problem(int64_t size, bool unaligned, int64_t step, uint64_t seed,
                                          std::optional<DType> weight_dtype = std::nullopt) {
  ConsistencyProblem<AdamStep> problem;
  problem.name = fmt::format("n={} unaligned={} step={} weights={}", size, unaligned, step,
                             weight_dtype ? dtype_name(*weight_dtype) : "none");
  problem.dtype = DType::float32;
  const Shape shape{size + (unaligned ? 1 : 0)};
  problem.tensors["parameters"] = accumulated_output(random_tensor(shape, DType::float32, ++seed), offset_view(unaligned, size));
  problem.tensors["gradients"] = input(random_tensor(shape, DType::float32, ++seed, -3, 3), offset_view(unaligned, size));
  problem.tensors["exp_avg"] =
      accumulated_output(random_tensor(shape, DType::float32, ++seed, -0.1, 0.1), offset_view(unaligned, size));
  problem.tensors["exp_avg_sq"] =
      accumulated_output(random_tensor(shape, DType::float32, ++seed, 1e-4, 1e-2), offset_view(unaligned, size));
  if (weight_dtype) {
    problem.tensors["compute_weights"] =
        accumulated_output(random_tensor(shape, *weight_dtype, ++seed), offset_view(unaligned, size));
    problem.tensors["compute_weights"].tolerance = consistency_tolerance(*weight_dtype);
  }
  problem.call = [step, with_weights = weight_dtype.has_value()](TensorMap& t, const auto& run) {
    run({.parameters = t.at("parameters"), .gradients = t.at("gradients"), .exp_avg = t.at("exp_avg"),
         .exp_avg_sq = t.at("exp_avg_sq"), .learning_rate = 3e-4, .beta_1 = 0.9, .beta_2 = 0.95, .epsilon = 1e-8,
         .weight_decay = 0.1, .step = step, .grad_scale = 0.8,
         .compute_weights = with_weights ? &t.at("compute_weights") : nullptr});
  };
  return problem;
}

TEST(CudaOps, AdamStepMatchesTheReference) {
  REQUIRE_GPU();
  uint64_t seed = 97000;
  for (int64_t size : {int64_t(1), int64_t(3), int64_t(4097), int64_t((1 << 20) + 3)})
    for (bool unaligned : {false, true})
      for (int64_t step : {int64_t(1), int64_t(1000)})
        for (std::optional<DType> weight_dtype : {std::optional<DType>(), std::optional(DType::bfloat16),
                                                  std::optional(DType::float16)})
          expect_fused_matches(adam_problem(size, unaligned, step, seed += 10, weight_dtype));
}

// The compute-dtype weights the fused Adam writes are bit for bit the cast of the fp32 parameters it leaves: the
// optimizer counts on it (training gives the same bits with the weights refreshed in Adam's pass or by a cast after).
// Weights views 0, 1 (scalar path) and 4 (8-byte vectors) elements into their storage.
TEST(CudaOps, AdamStepComputeWeightsAreTheCastOfItsParameters) {
  REQUIRE_GPU();
  const Device device = Device::cuda(0);
  const auto& fused = OpRegistry<AdamStep>::instance().find("fused", device);
  uint64_t seed = 97500;
  for (DType weight_dtype : {DType::bfloat16, DType::float16})
    for (int64_t size : {int64_t(3), int64_t(4097), int64_t((1 << 20) + 3)})
      for (int64_t offset : {int64_t(0), int64_t(1), int64_t(4)}) {
        SCOPED_TRACE(fmt::format("{} n={} offset={}", dtype_name(weight_dtype), size, offset));
        const Shape shape{size};
        Tensor parameters = random_tensor(shape, DType::float32, ++seed).to(device);
        Tensor gradients = random_tensor(shape, DType::float32, ++seed, -3, 3).to(device);
        Tensor exp_avg = random_tensor(shape, DType::float32, ++seed, -0.1, 0.1).to(device);
        Tensor exp_avg_sq = random_tensor(shape, DType::float32, ++seed, 1e-4, 1e-2).to(device);
        Tensor compute_weights =
            filled(Shape{size + offset}, weight_dtype, 0).to(device).slice(0, offset, offset + size);
        const AdamStepArgs args{.parameters = parameters, .gradients = gradients, .exp_avg = exp_avg,
                                .exp_avg_sq = exp_avg_sq, .learning_rate = 3e-3, .beta_1 = 0.9, .beta_2 = 0.95,
                                .epsilon = 1e-8, .weight_decay = 0.1, .step = 9, .grad_scale = 0.8,
                                .compute_weights = &compute_weights};
        ASSERT_FALSE(fused.supports(args).has_value()) << fused.supports(args).value_or("");
        fused.run(args);
        Tensor cast_weights = Tensor::empty(shape, weight_dtype, device);
        cast({.source = parameters, .destination = cast_weights});
        synchronize_device(device);
        const Tensor actual = compute_weights.to(Device::cpu()), expected = cast_weights.to(Device::cpu());
        ASSERT_EQ(std::memcmp(actual.data(), expected.data(), actual.nbytes()), 0);
      }
}

ConsistencyProblem<SquaredNorm> squared_norm_problem(DType dtype, int64_t size, bool unaligned, DType result_dtype,
                                                     uint64_t seed) {
  ConsistencyProblem<SquaredNorm> problem;
  problem.name = fmt::format("{} n={} unaligned={} into {}", dtype_name(dtype), size, unaligned,
                             dtype_name(result_dtype));
  problem.dtype = DType::float32;
  problem.tensors["input"] =
      input(random_tensor(Shape{size + (unaligned ? 1 : 0)}, dtype, seed, -2, 2), offset_view(unaligned, size));
  problem.tensors["result"] = accumulated_output(filled(Shape{1}, result_dtype, 1.5));
  problem.call = [](TensorMap& t, const auto& run) { run({.input = t.at("input"), .result = t.at("result")}); };
  return problem;
}

TEST(CudaOps, SquaredNormMatchesTheReference) {
  REQUIRE_GPU();
  uint64_t seed = 98000;
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
    for (int64_t size : {int64_t(1), int64_t(3), int64_t(4097), int64_t(3000001)})
      for (bool unaligned : {false, true})
        for (DType result_dtype : {DType::float32, DType::float64})
          expect_fused_matches(squared_norm_problem(dtype, size, unaligned, result_dtype, ++seed));
}

TEST(CudaOps, SquaredNormIsDeterministic) {
  REQUIRE_GPU();
  expect_deterministic(squared_norm_problem(DType::float32, 30000001, false, DType::float32, 98500));
  expect_deterministic(squared_norm_problem(DType::bfloat16, 3000001, true, DType::float64, 98501));
}

// ---------------------------------------------------------------------------------------------------------------------
// axpy, dropout

TEST(CudaOps, AxpyMatchesTheReference) {
  REQUIRE_GPU();
  const DType bf16 = DType::bfloat16, fp16 = DType::float16, fp32 = DType::float32;
  uint64_t seed = 99000;
  for (const auto& [input_dtype, output_dtype] :
       std::vector<std::pair<DType, DType>>{{bf16, fp32}, {fp32, bf16}, {fp16, fp16}, {fp32, fp32}, {bf16, fp16}})
    for (int64_t size : {int64_t(1), int64_t(3), int64_t(4097), int64_t((1 << 20) + 5)})
      // Both tensors 16-byte aligned, both one element off, or only the output off.
      for (const auto& [input_unaligned, output_unaligned] :
           std::vector<std::pair<bool, bool>>{{false, false}, {true, true}, {false, true}}) {
        ConsistencyProblem<Axpy> problem;
        problem.name = fmt::format("{} += {} n={} unaligned input={} output={}", dtype_name(output_dtype),
                                   dtype_name(input_dtype), size, input_unaligned, output_unaligned);
        problem.dtype = output_dtype;
        problem.tensors["input"] = input(random_tensor(Shape{size + (input_unaligned ? 1 : 0)}, input_dtype, ++seed),
                                         offset_view(input_unaligned, size));
        problem.tensors["output"] = accumulated_output(
            random_tensor(Shape{size + (output_unaligned ? 1 : 0)}, output_dtype, ++seed),
            offset_view(output_unaligned, size));
        problem.call = [](TensorMap& t, const auto& run) {
          run({.input = t.at("input"), .output = t.at("output"), .alpha = -0.7});
        };
        expect_fused_matches(problem);
      }
}

TEST(CudaOps, DropoutMatchesTheReferenceBitForBit) {
  REQUIRE_GPU();
  uint64_t seed = 99500;
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
    for (int64_t size : {int64_t(1), int64_t(3), int64_t(4097), int64_t((1 << 20) + 2)})
      for (bool unaligned : {false, true})
        for (double probability : {0.1, 0.3, 0.5}) {
          ConsistencyProblem<Dropout> problem;
          problem.name = fmt::format("{} n={} unaligned={} p={}", dtype_name(dtype), size, unaligned, probability);
          problem.dtype = dtype;
          problem.exact = true;
          problem.tensors["tensor"] = accumulated_output(
              random_tensor(Shape{size + (unaligned ? 1 : 0)}, dtype, ++seed), offset_view(unaligned, size));
          const uint64_t dropout_seed = ++seed;
          problem.call = [probability, dropout_seed](TensorMap& t, const auto& run) {
            run({.tensor = t.at("tensor"), .probability = probability, .seed = dropout_seed});
          };
          expect_fused_matches(problem);
        }
}

}  // namespace
}  // namespace fast_llm::kernels
