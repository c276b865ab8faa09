// Consistency of every cross_entropy_forward_backward variant with the CPU reference: vocabularies from 7 to 32000,
// masked tokens, with and without z-loss, logits_scale_factor and softcap, fp32 / bf16 / fp16 / fp64 logits, the
// gradient written out of place, in place over the logits, or not at all, and logits / gradient as column slices of
// wider rows. The loss sums start non-zero (they are added to). A variant may decline some problems, but must run at
// least one. The reference itself is checked against formulas and finite differences in cross_entropy_test.cpp.
#include "fast_llm/kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <map>

#include "kernels/consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

enum class GradientMode { out_of_place, in_place, none };

struct CrossEntropyCase {
  int64_t tokens = 1, vocab = 1;
  DType dtype = DType::bfloat16;
  bool z_loss = false;
  double logits_scale_factor = 1.0;
  std::optional<double> softcap;
  GradientMode gradient = GradientMode::out_of_place;
  bool strided = false;  // logits (and gradient) are column slices of (tokens, vocab + 3) rows
};

std::string case_name(const CrossEntropyCase& c) {
  return fmt::format("{} ({}, {}) z_loss={} scale={} softcap={} gradient={}{}", dtype_name(c.dtype), c.tokens,
                     c.vocab, c.z_loss, c.logits_scale_factor, c.softcap.value_or(0), int(c.gradient),
                     c.strided ? " strided" : "");
}

std::vector<CrossEntropyCase> cross_entropy_cases() {
  struct Loss {
    bool z_loss;
    double scale;
    std::optional<double> softcap;
  };
  const std::vector<Loss> losses{{false, 1.0, std::nullopt}, {true, 1.0, std::nullopt}, {true, 0.5, 30.0}};
  std::vector<CrossEntropyCase> cases;
  for (DType dtype : {DType::bfloat16, DType::float16, DType::float32, DType::float64})
    for (const auto& [tokens, vocab] : std::vector<std::pair<int64_t, int64_t>>{{4, 7}, {9, 1000}, {3, 32000}})
      for (const Loss& loss : losses)
        for (GradientMode gradient : {GradientMode::out_of_place, GradientMode::in_place, GradientMode::none})
          for (bool strided : {false, true})
            cases.push_back({.tokens = tokens, .vocab = vocab, .dtype = dtype, .z_loss = loss.z_loss,
                             .logits_scale_factor = loss.scale, .softcap = loss.softcap, .gradient = gradient,
                             .strided = strided});
  return cases;
}

void check_all_variants(DeviceType device_type) {
  std::map<std::string, bool> ran;
  uint64_t seed = 50000;
  for (const CrossEntropyCase& c : cross_entropy_cases()) {
    const int64_t stored_vocab = c.strided ? c.vocab + 3 : c.vocab;
    std::function<Tensor(const Tensor&)> view;
    if (c.strided) view = [vocab = c.vocab](const Tensor& t) { return t.slice(1, 1, 1 + vocab); };
    const Tensor logits = random_tensor(Shape{c.tokens, stored_vocab}, c.dtype, ++seed, -8, 8);
    // Every third token masked; the others get labels spread over the vocabulary.
    std::vector<double> labels;
    for (int64_t token = 0; token < c.tokens; ++token)
      labels.push_back(token % 3 == 1 ? -100.0 : double((token * 7919 + int64_t(seed)) % c.vocab));
    const DType sum_dtype = c.dtype == DType::float64 ? DType::float64 : DType::float32;

    ConsistencyProblem<CrossEntropyForwardBackward> problem{.name = case_name(c), .dtype = c.dtype, .exact = false,
                                                            .tensors = {}, .call = {}};
    problem.tensors["logits"] =
        c.gradient == GradientMode::in_place ? accumulated_output(logits, view) : input(logits, view);
    problem.tensors["labels"] = input(make_tensor(labels, Shape{c.tokens}, DType::int64));
    problem.tensors["label_loss_sum"] = accumulated_output(filled(Shape{1}, sum_dtype, 0.25));
    if (c.z_loss) problem.tensors["z_loss_sum"] = accumulated_output(filled(Shape{1}, sum_dtype, 0.5));
    if (c.gradient == GradientMode::out_of_place)
      problem.tensors["grad_logits"] = output(Tensor::empty(Shape{c.tokens, stored_vocab}, c.dtype), view);
    problem.call = [c](TensorMap& t, const auto& run) {
      Tensor* grad = c.gradient == GradientMode::in_place       ? &t.at("logits")
                     : c.gradient == GradientMode::out_of_place ? &t.at("grad_logits")
                                                                : nullptr;
      run({.logits = t.at("logits"), .labels = t.at("labels"), .label_loss_sum = t.at("label_loss_sum"),
           .z_loss_sum = c.z_loss ? &t.at("z_loss_sum") : nullptr, .grad_logits = grad, .label_weight = 0.03,
           .z_loss_weight = c.z_loss ? 1e-3 : 0.0, .logits_scale_factor = c.logits_scale_factor,
           .softcap = c.softcap});
    };
    for (const VariantOutcome& outcome : check_variants(problem, device_type))
      ran[outcome.id] = ran[outcome.id] || !outcome.unsupported;
  }
  for (const auto& [id, any] : ran) EXPECT_TRUE(any) << id << " declined every consistency problem";
}

TEST(CrossEntropyConsistency, CpuVariantsMatchTheReference) { check_all_variants(DeviceType::cpu); }

TEST(CrossEntropyConsistency, CudaVariantsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  check_all_variants(DeviceType::cuda);
}

}  // namespace
}  // namespace fast_llm::kernels
