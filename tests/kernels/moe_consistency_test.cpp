// Consistency of the CUDA variants of the mixture-of-experts ops (kernels/cuda/moe.cu) with the CPU references
// (kernels/cpu/moe.cpp, themselves checked by hand and by finite differences in moe_test.cpp), through the consistency
// harness (outputs poisoned first, so an unwritten element fails): routing forward and backward at 8 experts top-2
// and 64-256 experts top-8 (64k tokens at 128 experts), shared experts, logits with ties, Sinkhorn when training and
// not, both losses; the dispatch map with experts that get no token, every slot on one expert and 8192 experts; the
// row ops (permute, unpermute, scale_rows in and out of place, its backward) in fp32 / bf16 / fp16 on the 16-byte and
// the scalar paths (padded rows) at hidden 7 to 4096. Expert numbers, counts and rows must match exactly. Also: the
// routing declines more than 256 routed experts with its reason, and the reductions (losses, counts, the scale
// backward's dot products) give the same bits on two runs. Every case skips itself without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "fast_llm/kernels/moe.h"
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
    EXPECT_FALSE(outcome.unsupported.has_value())
        << id << " declines " << problem.name << ": " << outcome.unsupported.value_or("");
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

// ---------------------------------------------------------------------------------------------------------------------
// Routing.

struct RouteCase {
  int64_t tokens;
  int64_t routed;
  int top_k;
  int shared = 0;
  MoeRouting routing = MoeRouting::top_k_softmax;
  bool training = true;
  bool ties = false;  // logits on a grid of 0.25: many equal logits, ties to the lower expert
  bool nan = false;   // a few NaN logits: they rank last, the token's softmax and the losses are NaN
};

std::string route_name(const RouteCase& c) {
  return fmt::format("T={} routed={} top_k={} shared={} {}{}{}{}", c.tokens, c.routed, c.top_k, c.shared,
                     c.routing == MoeRouting::sinkhorn ? "sinkhorn" : "top_k_softmax",
                     c.training ? "" : " (not training)", c.ties ? " ties" : "", c.nan ? " NaN logits" : "");
}

Tensor route_logits(const RouteCase& c, uint64_t seed) {
  std::vector<double> values = uniform_values(c.tokens * c.routed, seed, -3.0, 3.0);
  if (c.ties)
    for (double& value : values) value = std::round(value * 4.0) / 4.0;
  if (c.nan)
    for (int64_t token = 3; token < c.tokens; token += 7) values[size_t(token * c.routed + token % c.routed)] = NAN;
  return make_tensor(values, Shape{c.tokens, c.routed}, DType::float32);
}

ConsistencyProblem<MoeRouteForward> route_forward_problem(const RouteCase& c, uint64_t seed) {
  ConsistencyProblem<MoeRouteForward> problem;
  problem.name = route_name(c);
  const int64_t slots = c.shared + c.top_k;
  const bool load_balancing = c.routing == MoeRouting::top_k_softmax;
  problem.tensors["logits"] = input(route_logits(c, seed));
  problem.tensors["experts"] = output(Tensor::empty(Shape{c.tokens, slots}, DType::int32));
  problem.tensors["experts"].tolerance = 0.0;
  problem.tensors["scores"] = output(Tensor::empty(Shape{c.tokens, slots}, DType::float32));
  problem.tensors["expert_counts"] = output(Tensor::empty(Shape{c.routed}, DType::float32));
  problem.tensors["expert_counts"].tolerance = 0.0;
  // Sums over up to 64k tokens: the reference adds them one by one in fp32.
  problem.tensors["z_loss_sum"] = accumulated_output(make_tensor({1.5}, Shape{1}, DType::float32));
  problem.tensors["z_loss_sum"].tolerance = 1e-4;
  if (load_balancing) {
    problem.tensors["load_balancing_loss_sum"] = accumulated_output(make_tensor({0.25}, Shape{1}, DType::float64));
    problem.tensors["load_balancing_loss_sum"].tolerance = 1e-4;
  }
  problem.call = [c, load_balancing](TensorMap& t, const auto& run) {
    run({.logits = t.at("logits"),
         .experts = t.at("experts"),
         .scores = t.at("scores"),
         .top_k = c.top_k,
         .shared_experts = c.shared,
         .routing = c.routing,
         .training = c.training,
         .expert_counts = &t.at("expert_counts"),
         .load_balancing_loss_sum = load_balancing ? &t.at("load_balancing_loss_sum") : nullptr,
         .z_loss_sum = &t.at("z_loss_sum"),
         .loss_weight = 0.7});
  };
  return problem;
}

// The backward at the experts and counts the reference's forward chose.
ConsistencyProblem<MoeRouteBackward> route_backward_problem(const RouteCase& c, uint64_t seed) {
  ConsistencyProblem<MoeRouteBackward> problem;
  problem.name = route_name(c);
  const int64_t slots = c.shared + c.top_k;
  const bool load_balancing = c.routing == MoeRouting::top_k_softmax;
  Tensor logits = route_logits(c, seed);
  Tensor experts = Tensor::empty(Shape{c.tokens, slots}, DType::int32);
  Tensor scores = Tensor::empty(Shape{c.tokens, slots}, DType::float32);
  Tensor counts = Tensor::empty(Shape{c.routed}, DType::float32);
  OpRegistry<MoeRouteForward>::instance().find("reference", Device::cpu()).run(
      {.logits = logits, .experts = experts, .scores = scores, .top_k = c.top_k, .shared_experts = c.shared,
       .routing = c.routing, .training = c.training, .expert_counts = &counts});
  problem.tensors["logits"] = input(logits);
  problem.tensors["experts"] = input(experts);
  problem.tensors["expert_counts"] = input(counts);
  problem.tensors["grad_scores"] = input(random_tensor(Shape{c.tokens, slots}, DType::float32, seed + 1));
  problem.tensors["grad_logits"] = output(Tensor::empty(Shape{c.tokens, c.routed}, DType::float32));
  problem.call = [c, load_balancing](TensorMap& t, const auto& run) {
    run({.logits = t.at("logits"),
         .experts = t.at("experts"),
         .grad_scores = t.at("grad_scores"),
         .grad_logits = t.at("grad_logits"),
         .top_k = c.top_k,
         .shared_experts = c.shared,
         .routing = c.routing,
         .load_balancing_gradient = load_balancing ? 0.3 : 0.0,
         .z_loss_gradient = 0.2,
         .expert_counts = &t.at("expert_counts")});
  };
  return problem;
}

const std::vector<RouteCase> kRouteCases = {
    {.tokens = 1, .routed = 8, .top_k = 2},
    {.tokens = 37, .routed = 8, .top_k = 2},
    {.tokens = 4096, .routed = 8, .top_k = 2, .ties = true},
    {.tokens = 65536, .routed = 128, .top_k = 8},
    {.tokens = 1000, .routed = 64, .top_k = 8, .shared = 2},
    {.tokens = 300, .routed = 256, .top_k = 8, .shared = 1},
    {.tokens = 513, .routed = 100, .top_k = 3, .ties = true},
    {.tokens = 70, .routed = 40, .top_k = 40},
    {.tokens = 37, .routed = 8, .top_k = 2, .nan = true},
    {.tokens = 256, .routed = 8, .top_k = 1, .routing = MoeRouting::sinkhorn},
    {.tokens = 256, .routed = 16, .top_k = 2, .routing = MoeRouting::sinkhorn},
    {.tokens = 200, .routed = 64, .top_k = 8, .shared = 1, .routing = MoeRouting::sinkhorn},
    {.tokens = 1000, .routed = 16, .top_k = 2, .routing = MoeRouting::sinkhorn},
    {.tokens = 300, .routed = 160, .top_k = 4, .routing = MoeRouting::sinkhorn},
    {.tokens = 128, .routed = 8, .top_k = 2, .routing = MoeRouting::sinkhorn, .training = false},
    {.tokens = 128, .routed = 8, .top_k = 1, .routing = MoeRouting::sinkhorn, .training = false},
};

TEST(MoeCudaConsistency, RouteForwardMatchesTheReference) {
  REQUIRE_GPU();
  uint64_t seed = 120000;
  for (const RouteCase& c : kRouteCases) expect_fused_matches(route_forward_problem(c, seed += 10));
}

TEST(MoeCudaConsistency, RouteBackwardMatchesTheReference) {
  REQUIRE_GPU();
  uint64_t seed = 121000;
  for (const RouteCase& c : kRouteCases) expect_fused_matches(route_backward_problem(c, seed += 10));
}

TEST(MoeCudaConsistency, RoutingDeclinesMoreThan256RoutedExperts) {
  REQUIRE_GPU();
  const RouteCase c{.tokens = 4, .routed = 257, .top_k = 2};
  const ConsistencyReport report = check_variants(route_forward_problem(c, 122000), DeviceType::cuda);
  ASSERT_FALSE(report.empty());
  for (const VariantOutcome& outcome : report) {
    ASSERT_TRUE(outcome.unsupported.has_value()) << outcome.id;
    EXPECT_NE(outcome.unsupported->find("at most 256"), std::string::npos) << *outcome.unsupported;
  }
}

TEST(MoeCudaConsistency, RoutingIsDeterministic) {
  REQUIRE_GPU();
  expect_deterministic(route_forward_problem({.tokens = 65536, .routed = 128, .top_k = 8}, 123000));
  expect_deterministic(
      route_forward_problem({.tokens = 4096, .routed = 64, .top_k = 8, .routing = MoeRouting::sinkhorn}, 123100));
  expect_deterministic(route_backward_problem({.tokens = 16384, .routed = 128, .top_k = 8}, 123200));
}

// ---------------------------------------------------------------------------------------------------------------------
// Dispatch map.

// (tokens, slots) experts in [0, num_experts); with `even_only` only the even experts get slots, so every odd one has
// none; with `single` every slot goes to that expert.
Tensor random_experts(int64_t tokens, int64_t slots, int64_t num_experts, uint64_t seed, bool even_only = false,
                      int single = -1) {
  std::vector<double> values = uniform_values(tokens * slots, seed, 0.0, double(num_experts));
  for (double& value : values) {
    value = std::floor(value);
    if (even_only) value = std::floor(value / 2) * 2;
    if (single >= 0) value = single;
  }
  return make_tensor(values, Shape{tokens, slots}, DType::int32);
}

struct MapCase {
  int64_t tokens, slots, num_experts;
  bool even_only = false;
  int single = -1;
};

ConsistencyProblem<MoeDispatchMap> dispatch_map_problem(const MapCase& c, uint64_t seed) {
  ConsistencyProblem<MoeDispatchMap> problem;
  problem.name = fmt::format("T={} slots={} E={}{}{}", c.tokens, c.slots, c.num_experts,
                             c.even_only ? " odd experts empty" : "",
                             c.single >= 0 ? fmt::format(" all on expert {}", c.single) : "");
  problem.exact = true;
  problem.tensors["experts"] =
      input(random_experts(c.tokens, c.slots, c.num_experts, seed, c.even_only, c.single));
  problem.tensors["expert_offsets"] = output(Tensor::empty(Shape{c.num_experts + 1}, DType::int32));
  problem.tensors["rows"] = output(Tensor::empty(Shape{c.tokens, c.slots}, DType::int32));
  problem.call = [](TensorMap& t, const auto& run) {
    run({.experts = t.at("experts"), .expert_offsets = t.at("expert_offsets"), .rows = t.at("rows")});
  };
  return problem;
}

TEST(MoeCudaConsistency, DispatchMapMatchesTheReference) {
  REQUIRE_GPU();
  const std::vector<MapCase> cases = {
      {.tokens = 1, .slots = 1, .num_experts = 1},
      {.tokens = 7, .slots = 3, .num_experts = 5},
      {.tokens = 4096, .slots = 2, .num_experts = 8},
      {.tokens = 16384, .slots = 2, .num_experts = 8, .even_only = true},
      {.tokens = 65536, .slots = 8, .num_experts = 128},
      {.tokens = 1000, .slots = 10, .num_experts = 72, .even_only = true},
      {.tokens = 3000, .slots = 2, .num_experts = 8, .single = 3},
      {.tokens = 300, .slots = 9, .num_experts = 8192},
  };
  uint64_t seed = 124000;
  for (const MapCase& c : cases) expect_fused_matches(dispatch_map_problem(c, seed += 10));
  expect_deterministic(dispatch_map_problem({.tokens = 65536, .slots = 8, .num_experts = 128}, 124500));
}

// ---------------------------------------------------------------------------------------------------------------------
// Row ops.

struct RowCase {
  int64_t tokens, slots, num_experts, hidden;
  int64_t padding = 0;  // extra elements per row of the (T, hidden) and (T * slots, hidden) tensors
};

// The rows of a dispatch map of random experts (odd experts empty), computed by the reference.
Tensor random_rows(const RowCase& c, uint64_t seed) {
  Tensor experts = random_experts(c.tokens, c.slots, c.num_experts, seed, /*even_only=*/true);
  Tensor offsets = Tensor::empty(Shape{c.num_experts + 1}, DType::int32);
  Tensor rows = Tensor::empty(Shape{c.tokens, c.slots}, DType::int32);
  OpRegistry<MoeDispatchMap>::instance().find("reference", Device::cpu()).run(
      {.experts = experts, .expert_offsets = offsets, .rows = rows});
  return rows;
}

// A random (rows, hidden) tensor, stored with `padding` extra elements per row when asked.
TensorSpec row_tensor(int64_t rows, const RowCase& c, DType dtype, uint64_t seed, bool is_output) {
  Tensor storage = random_tensor(Shape{rows, c.hidden + c.padding}, dtype, seed);
  std::function<Tensor(const Tensor&)> view = nullptr;
  if (c.padding > 0) view = [hidden = c.hidden](const Tensor& tensor) { return tensor.slice(1, 0, hidden); };
  return is_output ? output(storage, view) : input(storage, view);
}

std::string row_name(const RowCase& c, DType dtype) {
  return fmt::format("{} T={} slots={} E={} hidden={} padding={}", dtype_name(dtype), c.tokens, c.slots,
                     c.num_experts, c.hidden, c.padding);
}

const std::vector<RowCase> kRowCases = {
    {.tokens = 5, .slots = 3, .num_experts = 4, .hidden = 7},
    {.tokens = 64, .slots = 2, .num_experts = 8, .hidden = 1024},
    {.tokens = 33, .slots = 2, .num_experts = 8, .hidden = 1024, .padding = 1},
    {.tokens = 512, .slots = 8, .num_experts = 128, .hidden = 1024},
    {.tokens = 256, .slots = 2, .num_experts = 8, .hidden = 4096},
    {.tokens = 300, .slots = 9, .num_experts = 72, .hidden = 136},
};

TEST(MoeCudaConsistency, PermuteAndUnpermuteMatchTheReference) {
  REQUIRE_GPU();
  uint64_t seed = 125000;
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
    for (const RowCase& c : kRowCases) {
      const Tensor rows = random_rows(c, seed += 10);
      ConsistencyProblem<MoePermute> permute;
      permute.name = row_name(c, dtype);
      permute.dtype = dtype;
      permute.exact = true;
      permute.tensors["rows"] = input(rows);
      permute.tensors["input"] = row_tensor(c.tokens, c, dtype, ++seed, false);
      permute.tensors["output"] = row_tensor(c.tokens * c.slots, c, dtype, ++seed, true);
      permute.call = [](TensorMap& t, const auto& run) {
        run({.input = t.at("input"), .rows = t.at("rows"), .output = t.at("output")});
      };
      expect_fused_matches(permute);

      ConsistencyProblem<MoeUnpermute> unpermute;
      unpermute.name = row_name(c, dtype);
      unpermute.dtype = dtype;
      unpermute.tensors["rows"] = input(rows);
      unpermute.tensors["input"] = row_tensor(c.tokens * c.slots, c, dtype, ++seed, false);
      unpermute.tensors["output"] = row_tensor(c.tokens, c, dtype, ++seed, true);
      unpermute.call = [](TensorMap& t, const auto& run) {
        run({.input = t.at("input"), .rows = t.at("rows"), .output = t.at("output")});
      };
      expect_fused_matches(unpermute);
    }
}

TEST(MoeCudaConsistency, ScaleRowsMatchesTheReference) {
  REQUIRE_GPU();
  uint64_t seed = 126000;
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
    for (const RowCase& c : kRowCases)
      for (bool in_place : {false, true}) {
        ConsistencyProblem<MoeScaleRows> problem;
        problem.name = row_name(c, dtype) + (in_place ? " in place" : "");
        problem.dtype = dtype;
        problem.tensors["rows"] = input(random_rows(c, seed += 10));
        problem.tensors["scores"] = input(random_tensor(Shape{c.tokens, c.slots}, DType::float32, ++seed, 0.0, 1.0));
        problem.tensors["input"] = row_tensor(c.tokens * c.slots, c, dtype, ++seed, in_place);
        if (in_place) {
          problem.tensors["input"].keep_initial = true;
          problem.call = [](TensorMap& t, const auto& run) {
            run({.input = t.at("input"), .rows = t.at("rows"), .scores = t.at("scores"), .output = t.at("input")});
          };
        } else {
          problem.tensors["output"] = row_tensor(c.tokens * c.slots, c, dtype, ++seed, true);
          problem.call = [](TensorMap& t, const auto& run) {
            run({.input = t.at("input"), .rows = t.at("rows"), .scores = t.at("scores"), .output = t.at("output")});
          };
        }
        expect_fused_matches(problem);
      }
}

ConsistencyProblem<MoeScaleRowsBackward> scale_rows_backward_problem(const RowCase& c, DType dtype, bool in_place,
                                                                     uint64_t seed) {
  ConsistencyProblem<MoeScaleRowsBackward> problem;
  problem.name = row_name(c, dtype) + (in_place ? " in place" : "");
  problem.dtype = dtype;
  problem.tensors["rows"] = input(random_rows(c, seed));
  problem.tensors["scores"] = input(random_tensor(Shape{c.tokens, c.slots}, DType::float32, seed + 1, 0.0, 1.0));
  problem.tensors["input"] = row_tensor(c.tokens * c.slots, c, dtype, seed + 2, false);
  problem.tensors["grad_output"] = row_tensor(c.tokens * c.slots, c, dtype, seed + 3, in_place);
  problem.tensors["grad_scores"] = output(Tensor::empty(Shape{c.tokens, c.slots}, DType::float32));
  // Dot products of `hidden` products of rounded inputs, summed in different orders: fp32's tolerance, relaxed.
  problem.tensors["grad_scores"].tolerance = 1e-4;
  if (in_place) {
    problem.tensors["grad_output"].keep_initial = true;
    problem.call = [](TensorMap& t, const auto& run) {
      run({.grad_output = t.at("grad_output"), .input = t.at("input"), .rows = t.at("rows"),
           .scores = t.at("scores"), .grad_input = t.at("grad_output"), .grad_scores = t.at("grad_scores")});
    };
  } else {
    problem.tensors["grad_input"] = row_tensor(c.tokens * c.slots, c, dtype, seed + 4, true);
    problem.call = [](TensorMap& t, const auto& run) {
      run({.grad_output = t.at("grad_output"), .input = t.at("input"), .rows = t.at("rows"),
           .scores = t.at("scores"), .grad_input = t.at("grad_input"), .grad_scores = t.at("grad_scores")});
    };
  }
  return problem;
}

TEST(MoeCudaConsistency, ScaleRowsBackwardMatchesTheReference) {
  REQUIRE_GPU();
  uint64_t seed = 127000;
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
    for (const RowCase& c : kRowCases)
      for (bool in_place : {false, true})
        expect_fused_matches(scale_rows_backward_problem(c, dtype, in_place, seed += 10));
  expect_deterministic(scale_rows_backward_problem(
      {.tokens = 512, .slots = 8, .num_experts = 128, .hidden = 1024}, DType::bfloat16, false, 127900));
}

}  // namespace
}  // namespace fast_llm::kernels
