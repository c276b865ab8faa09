// Consistency of every policy_gradient_forward_backward variant with the CPU reference: GRPO and GSPO, with and
// without the metric sums, masked tokens, several documents per chunk (one with a single label), both clipping
// sides (old log-probs around the new ones), logits_scale_factor and softcap, fp32 / bf16 / fp16 (and fp64 on the
// CPU) logits, the gradient out of place, over the logits, or not at all, logits as column slices of wider rows; the
// loss and metric sums start non-zero (they are added to), the advantage extremes (with the metrics) inside the
// advantages' range (they are replaced) or beyond it (kept). And 8192 tokens in 64 documents (of 65: one has no
// label), contiguous or interleaved, over rows whose starts allow 16-byte loads with a tail of columns after the last
// full vector (the parallel CUDA variant's per-document and per-row paths). The reference is checked against formulas
// and finite differences in policy_gradient_test.cpp. Each CUDA variant run twice on the same 8192 tokens gives the
// same bytes in every output (the variants promise fixed-order sums).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "fast_llm/kernels/policy_gradient.h"
#include "kernels/consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

enum class GradientMode { out_of_place, in_place, none };

struct PolicyCase {
  int64_t tokens = 1, vocab = 1;
  DType dtype = DType::float32;
  bool sequence_level = false, metrics = true;
  double logits_scale_factor = 1.0;
  std::optional<double> softcap = std::nullopt;
  GradientMode gradient = GradientMode::out_of_place;
  bool strided = false;
  // 0: three documents, tokens [0, 1) (one label), [1, tokens / 2) and the rest; else `documents` + 1 documents, the
  // last without labels, in contiguous runs or interleaved token by token.
  int64_t documents = 0;
  bool interleaved = false;
};

void check_policy_gradient(DeviceType device_type) {
  std::map<std::string, bool> ran;
  uint64_t seed = 73000;
  std::vector<PolicyCase> cases;
  for (DType dtype : {DType::bfloat16, DType::float16, DType::float32, DType::float64})
    for (const auto& [tokens, vocab] : std::vector<std::pair<int64_t, int64_t>>{{6, 7}, {13, 1000}, {5, 32003}})
      for (bool sequence_level : {false, true})
        for (GradientMode gradient : {GradientMode::out_of_place, GradientMode::in_place, GradientMode::none})
          cases.push_back({.tokens = tokens, .vocab = vocab, .dtype = dtype, .sequence_level = sequence_level,
                           .metrics = gradient != GradientMode::in_place,
                           .logits_scale_factor = vocab == 7 ? 0.5 : 1.0,
                           .softcap = vocab == 1000 ? std::optional<double>(15.0) : std::nullopt,
                           .gradient = gradient, .strided = vocab == 1000});
  for (DType dtype : {DType::bfloat16, DType::float32})
    for (bool interleaved : {false, true})
      for (bool sequence_level : {false, true})
        cases.push_back({.tokens = 8192, .vocab = 515, .dtype = dtype, .sequence_level = sequence_level,
                         .metrics = true, .gradient = interleaved ? GradientMode::none : GradientMode::out_of_place,
                         .strided = true, .documents = 64, .interleaved = interleaved});
  for (const PolicyCase& c : cases) {
    // Three-document cases: rows of vocab + 3 columns, the view from column 1; many-document cases: rows of 520
    // columns (16-byte aligned), the view from column 0.
    const int64_t stored_vocab = !c.strided ? c.vocab : c.documents > 0 ? 520 : c.vocab + 3;
    std::function<Tensor(const Tensor&)> view;
    if (c.strided)
      view = [vocab = c.vocab, begin = c.documents > 0 ? 0 : 1](const Tensor& t) {
        return t.slice(1, begin, begin + vocab);
      };
    // Every third token after the first masked. Old log-probs near log(1 / vocab) so that the ratios fall on both
    // sides of the clipping range.
    std::vector<double> labels, advantages, old_log_probs, documents;
    const double uniform = -std::log(double(c.vocab));
    for (int64_t token = 0; token < c.tokens; ++token) {
      labels.push_back(token % 3 == 2 ? -100.0 : double((token * 5 + 1) % c.vocab));
      const int64_t document = c.documents == 0 ? (token == 0 ? 0 : token < c.tokens / 2 ? 1 : 2)
                               : c.interleaved  ? (token * 7) % c.documents
                                                : token * c.documents / c.tokens;
      documents.push_back(double(document));
      const double document_advantage = c.documents == 0 ? 0.4 * double(document) - 0.5
                                                         : 0.9 * double(document % 3) / 2.0 - 0.5;
      advantages.push_back(document_advantage + 0.05 * double(token % 4));
      old_log_probs.push_back(uniform + 0.4 * double((token * 7) % 5 - 2));
    }
    const DType sum_dtype = c.dtype == DType::float64 ? DType::float64 : DType::float32;
    ConsistencyProblem<PolicyGradientForwardBackward> problem{
        .name = fmt::format("{} ({}, {}) {} metrics={} gradient={} documents={}{}", dtype_name(c.dtype), c.tokens,
                            c.vocab, c.sequence_level ? "gspo" : "grpo", c.metrics, int(c.gradient),
                            c.documents == 0 ? 3 : c.documents + 1, c.interleaved ? " interleaved" : ""),
        .dtype = c.dtype, .tolerance = std::nullopt, .exact = false, .tensors = {}, .call = {}};
    // The loss sum adds terms of both signs (advantages of both signs) whose log-probabilities carry fp32 rounding of
    // a few 1e-7 in absolute value: relative to the small sum that cancellation leaves, fp32 agrees to about 4e-5
    // (measured on the H200).
    if (c.dtype == DType::float32) problem.tolerance = 2e-4;
    const Tensor logits = random_tensor(Shape{c.tokens, stored_vocab}, c.dtype, ++seed, -4, 4);
    problem.tensors["logits"] = c.gradient == GradientMode::in_place ? accumulated_output(logits, view)
                                                                     : input(logits, view);
    problem.tensors["labels"] = input(make_tensor(labels, Shape{c.tokens}, DType::int64));
    problem.tensors["advantages"] = input(make_tensor(advantages, Shape{c.tokens}, DType::float32));
    problem.tensors["old_log_probabilities"] = input(make_tensor(old_log_probs, Shape{c.tokens}, DType::float32));
    problem.tensors["label_documents"] = input(make_tensor(documents, Shape{c.tokens}, DType::int32));
    problem.tensors["loss_sum"] = accumulated_output(filled(Shape{1}, sum_dtype, 0.25));
    if (c.metrics) {
      problem.tensors["metric_sums"] = accumulated_output(filled(Shape{kPolicyMetricCount}, sum_dtype, 0.5));
      // The labels' advantages span [-0.5, 0.45] ([-0.5, 0.55] with many documents): on alternate cases the maximum
      // is taken and the minimum kept.
      problem.tensors["max_advantage"] = accumulated_output(filled(Shape{1}, sum_dtype, seed % 2 ? 0.0 : -INFINITY));
      problem.tensors["min_advantage"] = accumulated_output(filled(Shape{1}, sum_dtype, seed % 2 ? -0.75 : INFINITY));
    }
    if (c.gradient == GradientMode::out_of_place)
      problem.tensors["grad_logits"] = output(Tensor::empty(Shape{c.tokens, stored_vocab}, c.dtype), view);
    problem.call = [c](TensorMap& t, const auto& run) {
      Tensor* grad = c.gradient == GradientMode::in_place ? &t.at("logits")
                     : c.gradient == GradientMode::none   ? nullptr
                                                          : &t.at("grad_logits");
      run({.logits = t.at("logits"), .labels = t.at("labels"), .advantages = t.at("advantages"),
           .old_log_probabilities = t.at("old_log_probabilities"), .label_documents = t.at("label_documents"),
           .num_documents = c.documents == 0 ? 3 : c.documents + 1, .sequence_level = c.sequence_level,
           .loss_sum = t.at("loss_sum"), .metric_sums = c.metrics ? &t.at("metric_sums") : nullptr,
           .grad_logits = grad, .grad_weight = 0.3,
           .epsilon_low = 0.2, .epsilon_high = 0.28, .logits_scale_factor = c.logits_scale_factor,
           .softcap = c.softcap, .max_advantage = c.metrics ? &t.at("max_advantage") : nullptr,
           .min_advantage = c.metrics ? &t.at("min_advantage") : nullptr});
    };
    for (const VariantOutcome& outcome : check_variants(problem, device_type))
      ran[outcome.id] = ran[outcome.id] || !outcome.unsupported;
  }
  for (const auto& [id, any] : ran) EXPECT_TRUE(any) << id << " declined every consistency problem";
}

TEST(PolicyGradientConsistency, CpuVariantsMatchTheReference) { check_policy_gradient(DeviceType::cpu); }

TEST(PolicyGradientConsistency, CudaVariantsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  check_policy_gradient(DeviceType::cuda);
}

// Runs `variant` on fresh copies of the inputs (GSPO with metrics, extremes, row coefficients and the gradient, 8192
// tokens in 64 interleaved documents) and returns every output's bytes, in a fixed order.
std::vector<std::vector<char>> policy_outputs(const KernelVariant<PolicyGradientArgs>& variant) {
  const Device cuda = Device::cuda(0);
  const int64_t tokens = 8192, vocab = 1000;
  std::vector<double> labels, advantages, old_log_probs, documents;
  for (int64_t token = 0; token < tokens; ++token) {
    labels.push_back(token % 11 == 3 ? -100.0 : double((token * 37 + 5) % vocab));
    documents.push_back(double((token * 7) % 64));
    advantages.push_back(0.1 * double(token % 13) - 0.6);
    old_log_probs.push_back(-std::log(double(vocab)) + 0.3 * double(token % 5 - 2));
  }
  const Tensor logits = random_tensor(Shape{tokens, vocab}, DType::bfloat16, 74001, -4, 4).to(cuda);
  const Tensor label_tensor = make_tensor(labels, Shape{tokens}, DType::int64).to(cuda);
  const Tensor advantage_tensor = make_tensor(advantages, Shape{tokens}, DType::float32).to(cuda);
  const Tensor old_tensor = make_tensor(old_log_probs, Shape{tokens}, DType::float32).to(cuda);
  const Tensor document_tensor = make_tensor(documents, Shape{tokens}, DType::int32).to(cuda);
  Tensor loss = filled(Shape{1}, DType::float32, 0.0).to(cuda);
  Tensor metrics = filled(Shape{kPolicyMetricCount}, DType::float32, 0.0).to(cuda);
  Tensor largest = filled(Shape{1}, DType::float32, -INFINITY).to(cuda);
  Tensor smallest = filled(Shape{1}, DType::float32, INFINITY).to(cuda);
  Tensor row_coefficients = filled(Shape{tokens}, DType::float32, 0.0).to(cuda);
  Tensor grad = filled(Shape{tokens, vocab}, DType::bfloat16, 0.0).to(cuda);
  const PolicyGradientArgs args{.logits = logits, .labels = label_tensor, .advantages = advantage_tensor,
                                .old_log_probabilities = old_tensor, .label_documents = document_tensor,
                                .num_documents = 64, .sequence_level = true, .loss_sum = loss,
                                .metric_sums = &metrics, .grad_logits = &grad, .grad_weight = 0.5,
                                .row_coefficients = &row_coefficients, .max_advantage = &largest,
                                .min_advantage = &smallest};
  check_policy_gradient_forward_backward(args);
  if (variant.supports != nullptr)
    if (const auto reason = variant.supports(args)) {
      ADD_FAILURE() << variant.info.id() << " declines: " << *reason;
      return {};
    }
  variant.run(args);
  return host_bytes({&loss, &metrics, &largest, &smallest, &row_coefficients, &grad});
}

TEST(PolicyGradientConsistency, CudaVariantsAreBitwiseReproducible) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  for (const auto& variant : OpRegistry<PolicyGradientForwardBackward>::instance().variants()) {
    if (variant.info.device != DeviceType::cuda) continue;
    const auto first = policy_outputs(variant), second = policy_outputs(variant);
    ASSERT_EQ(first.size(), second.size()) << variant.info.id();
    for (size_t output = 0; output < first.size(); ++output)
      EXPECT_TRUE(first[output] == second[output]) << variant.info.id() << " output " << output << " differs";
  }
}

}  // namespace
}  // namespace fast_llm::kernels
