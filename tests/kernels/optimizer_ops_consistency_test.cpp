// Consistency of every adam_step, squared_norm and optimizer_decision variant with the CPU reference: sizes from 1 to
// past 2^16 (odd tails), first and later steps, with and without weight decay and grad_scale, fp32 (the optimizer's
// dtype) and fp64 / bf16 / fp16 buffers; Adam reading its hyper-parameters from a decision state, applied or skipped;
// Adam writing the bf16 / fp16 compute weights in the same pass (odd sizes, misaligned views, skipped steps);
// squared norms of every floating dtype into fp32 and fp64 results that start non-zero; decisions with and without
// clipping, loss scaling, first and later steps.
// A variant may decline some problems, but must run at least one. The references themselves are checked against
// scalar formulas in optimizer_ops_test.cpp.
//
// Non-finite inputs are left out: the harness treats NaN as an unwritten element. That a NaN or inf gradient reaches
// the squared norm is each variant's own test.
#include "fast_llm/kernels/optimizer_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <tuple>

#include "kernels/consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

constexpr DType kDTypes[] = {DType::float32, DType::float64, DType::bfloat16, DType::float16};
constexpr int64_t kSizes[] = {1, 1000, 65537};

void record(std::map<std::string, bool>& ran, const ConsistencyReport& report) {
  for (const VariantOutcome& outcome : report) ran[outcome.id] = ran[outcome.id] || !outcome.unsupported;
}

void check_adam_variants(DeviceType device_type) {
  std::map<std::string, bool> ran;
  uint64_t seed = 60000;
  for (DType dtype : kDTypes)
    for (int64_t size : kSizes)
      for (const auto& [step, weight_decay, grad_scale] :
           std::vector<std::tuple<int64_t, double, double>>{{1, 0.0, 1.0}, {1, 0.1, 0.3}, {25, 0.01, 0.7}}) {
        const Shape shape{size};
        ConsistencyProblem<AdamStep> problem{
            .name = fmt::format("{} n={} step={} weight_decay={} grad_scale={}", dtype_name(dtype), size, step,
                                weight_decay, grad_scale),
            .dtype = dtype, .exact = false, .tensors = {}, .call = {}};
        problem.tensors["parameters"] = accumulated_output(random_tensor(shape, dtype, ++seed));
        problem.tensors["gradients"] = input(random_tensor(shape, dtype, ++seed, -3, 3));
        // Later steps start from moments of the size training gives them; the first from zero.
        problem.tensors["exp_avg"] = accumulated_output(
            step == 1 ? filled(shape, dtype, 0) : random_tensor(shape, dtype, ++seed, -0.1, 0.1));
        problem.tensors["exp_avg_sq"] = accumulated_output(
            step == 1 ? filled(shape, dtype, 0) : random_tensor(shape, dtype, ++seed, 1e-4, 1e-2));
        problem.call = [step, weight_decay, grad_scale](TensorMap& t, const auto& run) {
          run({.parameters = t.at("parameters"), .gradients = t.at("gradients"), .exp_avg = t.at("exp_avg"),
               .exp_avg_sq = t.at("exp_avg_sq"), .learning_rate = 1e-3, .beta_1 = 0.9, .beta_2 = 0.95,
               .epsilon = 1e-8, .weight_decay = weight_decay, .step = step, .grad_scale = grad_scale});
        };
        record(ran, check_variants(problem, device_type));
      }
  for (const auto& [id, any] : ran) EXPECT_TRUE(any) << id << " declined every consistency problem";
}

void check_squared_norm_variants(DeviceType device_type) {
  std::map<std::string, bool> ran;
  uint64_t seed = 61000;
  for (DType dtype : kDTypes)
    for (int64_t size : kSizes)
      for (DType result_dtype : {DType::float32, DType::float64}) {
        // The result is a sum in fp32 (GPU) or fp64 (CPU): the tolerance is that of the result's dtype.
        ConsistencyProblem<SquaredNorm> problem{
            .name = fmt::format("{} n={} into {}", dtype_name(dtype), size, dtype_name(result_dtype)),
            .dtype = DType::float32, .exact = false, .tensors = {}, .call = {}};
        problem.tensors["input"] = input(random_tensor(Shape{size}, dtype, ++seed, -2, 2));
        problem.tensors["result"] = accumulated_output(filled(Shape{1}, result_dtype, 1.5));
        problem.call = [](TensorMap& t, const auto& run) { run({.input = t.at("input"), .result = t.at("result")}); };
        record(ran, check_variants(problem, device_type));
      }
  for (const auto& [id, any] : ran) EXPECT_TRUE(any) << id << " declined every consistency problem";
}

// A decision state as optimizer_decision leaves it (only the fields Adam reads matter).
Tensor decision_state(bool successful, double learning_rate, double grad_scale, int64_t step) {
  namespace field = optimizer_state;
  Tensor state = filled(Shape{field::size}, DType::float64, 0);
  double* values = state.data_as<double>();
  values[field::successful] = successful ? 1.0 : 0.0;
  values[field::learning_rate] = learning_rate;
  values[field::grad_scale] = grad_scale;
  values[field::step] = double(step);
  values[field::bias_correction_1] = 1.0 - std::pow(0.9, double(step));
  values[field::bias_correction_2] = 1.0 - std::pow(0.95, double(step));
  return state;
}

void check_adam_state_variants(DeviceType device_type) {
  std::map<std::string, bool> ran;
  uint64_t seed = 62000;
  for (int64_t size : kSizes)
    for (bool successful : {true, false}) {
      const Shape shape{size};
      ConsistencyProblem<AdamStep> problem{.name = fmt::format("n={} successful={}", size, successful),
                                           .dtype = DType::float32, .exact = false, .tensors = {}, .call = {}};
      problem.tensors["parameters"] = accumulated_output(random_tensor(shape, DType::float32, ++seed));
      problem.tensors["gradients"] = input(random_tensor(shape, DType::float32, ++seed, -3, 3));
      problem.tensors["exp_avg"] = accumulated_output(random_tensor(shape, DType::float32, ++seed, -0.1, 0.1));
      problem.tensors["exp_avg_sq"] = accumulated_output(random_tensor(shape, DType::float32, ++seed, 1e-4, 1e-2));
      problem.tensors["state"] = input(decision_state(successful, 2e-3, 0.6, 7));
      problem.call = [](TensorMap& t, const auto& run) {
        // learning_rate is the group's lr_scale; step and grad_scale are set to values the state must override.
        run({.parameters = t.at("parameters"), .gradients = t.at("gradients"), .exp_avg = t.at("exp_avg"),
             .exp_avg_sq = t.at("exp_avg_sq"), .learning_rate = 0.5, .beta_1 = 0.9, .beta_2 = 0.95, .epsilon = 1e-8,
             .weight_decay = 0.1, .step = 1, .grad_scale = 100.0, .state = &t.at("state")});
      };
      record(ran, check_variants(problem, device_type));
    }
  for (const auto& [id, any] : ran) EXPECT_TRUE(any) << id << " declined every consistency problem";
}

// Adam writing bf16 / fp16 compute weights beside the fp32 update. Sizes with tails after the last 4-element vector;
// views starting `offset` elements into their storage: all aligned, the weights alone misaligned (by 1 element: no
// vector access; by 4: 8-byte vectors still fit), everything misaligned. Hyper-parameters from the arguments or from
// a decision state that applies or skips the step; the weights start random, not as the cast of the parameters, so a
// variant that writes them on a skipped step fails. They are compared with the tolerance of their dtype: one ulp of
// fp32 between two devices can move a rounded element by one of bf16.
void check_adam_compute_weights_variants(DeviceType device_type) {
  enum class Decision { arguments, applied, skipped };
  struct Offsets {
    int64_t fp32, weights;
  };
  std::map<std::string, bool> ran;
  uint64_t seed = 63000;
  for (DType weight_dtype : {DType::bfloat16, DType::float16})
    for (int64_t size : {int64_t(1), int64_t(7), int64_t(1001), int64_t(65537)})
      for (const Offsets offsets : {Offsets{0, 0}, Offsets{0, 1}, Offsets{0, 4}, Offsets{1, 1}})
        for (Decision decision : {Decision::arguments, Decision::applied, Decision::skipped}) {
          ConsistencyProblem<AdamStep> problem{
              .name = fmt::format("{} n={} offsets fp32 {} weights {}, {}", dtype_name(weight_dtype), size,
                                  offsets.fp32, offsets.weights,
                                  decision == Decision::arguments ? "no state"
                                  : decision == Decision::applied ? "applied"
                                                                  : "skipped"),
              .dtype = DType::float32, .exact = false, .tensors = {}, .call = {}};
          auto view = [size](int64_t offset) -> std::function<Tensor(const Tensor&)> {
            if (offset == 0) return nullptr;
            return [size, offset](const Tensor& tensor) { return tensor.slice(0, offset, offset + size); };
          };
          const Shape fp32_shape{size + offsets.fp32}, weights_shape{size + offsets.weights};
          problem.tensors["parameters"] =
              accumulated_output(random_tensor(fp32_shape, DType::float32, ++seed), view(offsets.fp32));
          problem.tensors["gradients"] = input(random_tensor(fp32_shape, DType::float32, ++seed, -3, 3),
                                               view(offsets.fp32));
          problem.tensors["exp_avg"] =
              accumulated_output(random_tensor(fp32_shape, DType::float32, ++seed, -0.1, 0.1), view(offsets.fp32));
          problem.tensors["exp_avg_sq"] =
              accumulated_output(random_tensor(fp32_shape, DType::float32, ++seed, 1e-4, 1e-2), view(offsets.fp32));
          problem.tensors["compute_weights"] =
              accumulated_output(random_tensor(weights_shape, weight_dtype, ++seed), view(offsets.weights));
          problem.tensors["compute_weights"].tolerance = consistency_tolerance(weight_dtype);
          if (decision != Decision::arguments)
            problem.tensors["state"] = input(decision_state(decision == Decision::applied, 2e-3, 0.6, 7));
          problem.call = [decision](TensorMap& t, const auto& run) {
            run({.parameters = t.at("parameters"), .gradients = t.at("gradients"), .exp_avg = t.at("exp_avg"),
                 .exp_avg_sq = t.at("exp_avg_sq"), .learning_rate = decision == Decision::arguments ? 1e-3 : 0.5,
                 .beta_1 = 0.9, .beta_2 = 0.95, .epsilon = 1e-8, .weight_decay = 0.1, .step = 3, .grad_scale = 0.7,
                 .state = decision == Decision::arguments ? nullptr : &t.at("state"),
                 .compute_weights = &t.at("compute_weights")});
          };
          record(ran, check_variants(problem, device_type));
        }
  for (const auto& [id, any] : ran) EXPECT_TRUE(any) << id << " declined every consistency problem";
}

void check_decision_variants(DeviceType device_type) {
  std::map<std::string, bool> ran;
  for (const auto& [squared_norm, loss_scale, clipping, step] :
       std::vector<std::tuple<double, double, double, int64_t>>{
           {4.0, 1.0, 1.0, 0}, {0.25, 1.0, 1.0, 3}, {1e6, 1024.0, 0.5, 10}, {0.0, 1.0, 1.0, 9}}) {
    ConsistencyProblem<OptimizerDecision> problem{
        .name = fmt::format("squared_norm={} loss_scale={} clipping={} step={}", squared_norm, loss_scale, clipping,
                            step),
        .dtype = DType::float64, .exact = false, .tensors = {}, .call = {}};
    Tensor state = filled(Shape{optimizer_state::size}, DType::float64, 0);
    state.data_as<double>()[optimizer_state::squared_norm] = squared_norm;
    state.data_as<double>()[optimizer_state::step] = double(step);
    problem.tensors["state"] = accumulated_output(state);
    Tensor rates = Tensor::empty(Shape{16}, DType::float64);
    for (int64_t k = 0; k < 16; ++k) rates.data_as<double>()[k] = 1e-3 * double(k + 1);
    problem.tensors["learning_rates"] = input(rates);
    problem.call = [loss_scale, clipping](TensorMap& t, const auto& run) {
      run({.state = t.at("state"), .learning_rates = t.at("learning_rates"), .loss_scale = loss_scale,
           .gradient_norm_clipping = clipping, .beta_1 = 0.9, .beta_2 = 0.95});
    };
    record(ran, check_variants(problem, device_type));
  }
  for (const auto& [id, any] : ran) EXPECT_TRUE(any) << id << " declined every consistency problem";
}

TEST(AdamConsistency, CpuVariantsMatchTheReference) { check_adam_variants(DeviceType::cpu); }

TEST(AdamConsistency, CpuVariantsWithADecisionStateMatchTheReference) { check_adam_state_variants(DeviceType::cpu); }

TEST(AdamConsistency, CudaVariantsWithADecisionStateMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  check_adam_state_variants(DeviceType::cuda);
}

TEST(AdamConsistency, CpuVariantsWritingComputeWeightsMatchTheReference) {
  check_adam_compute_weights_variants(DeviceType::cpu);
}

TEST(AdamConsistency, CudaVariantsWritingComputeWeightsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  check_adam_compute_weights_variants(DeviceType::cuda);
}

TEST(OptimizerDecisionConsistency, CpuVariantsMatchTheReference) { check_decision_variants(DeviceType::cpu); }

TEST(OptimizerDecisionConsistency, CudaVariantsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  check_decision_variants(DeviceType::cuda);
}

TEST(AdamConsistency, CudaVariantsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  check_adam_variants(DeviceType::cuda);
}

TEST(SquaredNormConsistency, CpuVariantsMatchTheReference) { check_squared_norm_variants(DeviceType::cpu); }

TEST(SquaredNormConsistency, CudaVariantsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  check_squared_norm_variants(DeviceType::cuda);
}

}  // namespace
}  // namespace fast_llm::kernels
