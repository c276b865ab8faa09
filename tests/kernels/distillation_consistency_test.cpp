// Consistency of every distillation_forward_backward and activation_distillation_forward_backward variant with the CPU
// reference: the three loss types, temperature, logits_scale_factor and softcap, masked tokens, fp32 / bf16 / fp16 (and
// fp64 on the CPU) values, the gradient written out of place, over the logits, added to an existing one, or not at all,
// and logits as column slices of wider rows; the loss sums start non-zero (they are added to). Teacher logits are fp32
// (the reference models' logits), teacher activations of the student's dtype (the compute dtype). The references are
// checked against formulas and finite differences in distillation_test.cpp and activation_distillation_test.cpp.
#include <gtest/gtest.h>

#include <map>

#include "fast_llm/kernels/activation_distillation.h"
#include "fast_llm/kernels/distillation.h"
#include "kernels/consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

enum class GradientMode { out_of_place, in_place, accumulated, none };

struct DistillationCase {
  int64_t tokens = 1, vocab = 1;
  DType dtype = DType::float32;
  DistillationLossType loss_type = DistillationLossType::cross_entropy;
  double temperature = 1.0, logits_scale_factor = 1.0;
  std::optional<double> softcap = std::nullopt;
  GradientMode gradient = GradientMode::out_of_place;
  bool strided = false;
};

void check_distillation(DeviceType device_type) {
  std::map<std::string, bool> ran;
  uint64_t seed = 70000;
  std::vector<DistillationCase> cases;
  for (DType dtype : {DType::bfloat16, DType::float16, DType::float32, DType::float64})
    for (const auto& [tokens, vocab] : std::vector<std::pair<int64_t, int64_t>>{{5, 7}, {9, 1000}, {3, 32003}})
      for (auto type : {DistillationLossType::cross_entropy, DistillationLossType::forward_kl,
                        DistillationLossType::reverse_kl})
        for (GradientMode gradient :
             {GradientMode::out_of_place, GradientMode::in_place, GradientMode::accumulated, GradientMode::none})
          cases.push_back({.tokens = tokens, .vocab = vocab, .dtype = dtype, .loss_type = type,
                           .temperature = type == DistillationLossType::forward_kl ? 2.0 : 1.0,
                           .logits_scale_factor = type == DistillationLossType::reverse_kl ? 0.5 : 1.0,
                           .softcap = type == DistillationLossType::cross_entropy ? std::optional<double>(20.0)
                                                                                  : std::nullopt,
                           .gradient = gradient, .strided = vocab == 1000});
  for (const DistillationCase& c : cases) {
    const int64_t stored_vocab = c.strided ? c.vocab + 3 : c.vocab;
    std::function<Tensor(const Tensor&)> view;
    if (c.strided) view = [vocab = c.vocab](const Tensor& t) { return t.slice(1, 1, 1 + vocab); };
    std::vector<double> labels;
    for (int64_t token = 0; token < c.tokens; ++token) labels.push_back(token % 3 == 1 ? -100.0 : double(token));
    const DType sum_dtype = c.dtype == DType::float64 ? DType::float64 : DType::float32;
    ConsistencyProblem<DistillationForwardBackward> problem{
        .name = fmt::format("{} ({}, {}) type={} gradient={}", dtype_name(c.dtype), c.tokens, c.vocab,
                            int(c.loss_type), int(c.gradient)),
        .dtype = c.dtype, .tolerance = std::nullopt, .exact = false, .tensors = {}, .call = {}};
    // fp32 rows of 32003 logits: the reference summed them one after the other in fp32 (its rounding grows with the
    // length, measured 3e-5 against the GPU's tree sums on the H200) and now sums them in fp64; the fp32 tolerance
    // stays that of a long sum.
    if (c.dtype == DType::float32 && c.vocab > 10000) problem.tolerance = 1e-4;
    const Tensor logits = random_tensor(Shape{c.tokens, stored_vocab}, c.dtype, ++seed, -6, 6);
    problem.tensors["logits"] = c.gradient == GradientMode::in_place ? accumulated_output(logits, view)
                                                                     : input(logits, view);
    problem.tensors["target_logits"] = input(random_tensor(Shape{c.tokens, c.vocab}, DType::float32, ++seed, -6, 6));
    problem.tensors["labels"] = input(make_tensor(labels, Shape{c.tokens}, DType::int64));
    problem.tensors["loss_sum"] = accumulated_output(filled(Shape{1}, sum_dtype, 0.25));
    if (c.gradient == GradientMode::out_of_place)
      problem.tensors["grad_logits"] = output(Tensor::empty(Shape{c.tokens, stored_vocab}, c.dtype), view);
    if (c.gradient == GradientMode::accumulated)
      problem.tensors["grad_logits"] =
          accumulated_output(random_tensor(Shape{c.tokens, stored_vocab}, c.dtype, ++seed), view);
    problem.call = [c](TensorMap& t, const auto& run) {
      Tensor* grad = c.gradient == GradientMode::in_place ? &t.at("logits")
                     : c.gradient == GradientMode::none   ? nullptr
                                                          : &t.at("grad_logits");
      run({.logits = t.at("logits"), .target_logits = t.at("target_logits"), .labels = t.at("labels"),
           .loss_sum = t.at("loss_sum"), .grad_logits = grad, .loss_type = c.loss_type,
           .temperature = c.temperature, .weight = 0.05, .logits_scale_factor = c.logits_scale_factor,
           .softcap = c.softcap, .accumulate_gradient = c.gradient == GradientMode::accumulated});
    };
    for (const VariantOutcome& outcome : check_variants(problem, device_type))
      ran[outcome.id] = ran[outcome.id] || !outcome.unsupported;
  }
  for (const auto& [id, any] : ran) EXPECT_TRUE(any) << id << " declined every consistency problem";
}

void check_activation_distillation(DeviceType device_type) {
  std::map<std::string, bool> ran;
  uint64_t seed = 71000;
  for (DType dtype : {DType::bfloat16, DType::float16, DType::float32, DType::float64})
    for (const auto& [tokens, hidden] : std::vector<std::pair<int64_t, int64_t>>{{3, 5}, {17, 576}, {2, 4099}})
      for (bool gradient : {true, false}) {
        const DType sum_dtype = dtype == DType::float64 ? DType::float64 : DType::float32;
        ConsistencyProblem<ActivationDistillationForwardBackward> problem{
            .name = fmt::format("{} ({}, {}) gradient={}", dtype_name(dtype), tokens, hidden, gradient),
            .dtype = dtype, .exact = false, .tensors = {}, .call = {}};
        problem.tensors["student"] = input(random_tensor(Shape{tokens, hidden}, dtype, ++seed));
        problem.tensors["teacher"] = input(random_tensor(Shape{tokens, hidden}, dtype, ++seed));
        problem.tensors["loss_sum"] = accumulated_output(filled(Shape{1}, sum_dtype, 0.5));
        if (gradient) problem.tensors["grad"] = output(Tensor::empty(Shape{tokens, hidden}, dtype));
        problem.call = [gradient](TensorMap& t, const auto& run) {
          run({.student = t.at("student"), .teacher = t.at("teacher"), .loss_sum = t.at("loss_sum"),
               .grad = gradient ? &t.at("grad") : nullptr, .weight = 0.1});
        };
        for (const VariantOutcome& outcome : check_variants(problem, device_type))
          ran[outcome.id] = ran[outcome.id] || !outcome.unsupported;
      }
  for (const auto& [id, any] : ran) EXPECT_TRUE(any) << id << " declined every consistency problem";
}

TEST(DistillationConsistency, CpuVariantsMatchTheReference) {
  check_distillation(DeviceType::cpu);
  check_activation_distillation(DeviceType::cpu);
}

TEST(DistillationConsistency, CudaVariantsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  check_distillation(DeviceType::cuda);
  check_activation_distillation(DeviceType::cuda);
}

}  // namespace
}  // namespace fast_llm::kernels
