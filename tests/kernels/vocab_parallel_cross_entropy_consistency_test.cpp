// Consistency of every variant of the three vocabulary-parallel cross-entropy passes with the CPU reference: slices of
// 7 to 16032 logits starting at column 0 or further into the vocabulary (labels inside and outside the slice, masked
// tokens), with and without z-loss, logits_scale_factor and softcap, fp32 / bf16 / fp16 / fp64 logits, the gradient
// written out of place, in place over the logits, or not at all. The statistics each pass reads are the reference's
// results of the passes before it (on one slice: what the tensor-parallel sums would give with one rank). A variant may
// decline some problems, but must run at least one. The reference itself is checked against the whole-vocabulary
// cross-entropy in vocab_parallel_cross_entropy_test.cpp.
#include "fast_llm/kernels/vocab_parallel_cross_entropy.h"

#include <gtest/gtest.h>

#include <map>

#include "kernels/consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

enum class GradientMode { out_of_place, in_place, none };

struct Case {
  int64_t tokens = 1, vocab = 1, vocab_begin = 0;
  DType dtype = DType::bfloat16;
  bool z_loss = false;
  double logits_scale_factor = 1.0;
  std::optional<double> softcap = std::nullopt;
  GradientMode gradient = GradientMode::out_of_place;
};

std::string case_name(const Case& c) {
  return fmt::format("{} ({}, {} from {}) z_loss={} scale={} softcap={} gradient={}", dtype_name(c.dtype), c.tokens,
                     c.vocab, c.vocab_begin, c.z_loss, c.logits_scale_factor, c.softcap.value_or(0), int(c.gradient));
}

std::vector<Case> cases() {
  std::vector<Case> result;
  for (DType dtype : {DType::bfloat16, DType::float16, DType::float32, DType::float64})
    for (const auto& [tokens, vocab, begin] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{4, 7, 0}, {9, 1000, 1000}, {37, 16032, 48096}})
      for (int loss = 0; loss < 3; ++loss)
        for (GradientMode gradient : {GradientMode::out_of_place, GradientMode::in_place, GradientMode::none})
          result.push_back({.tokens = tokens, .vocab = vocab, .vocab_begin = begin, .dtype = dtype,
                            .z_loss = loss > 0, .logits_scale_factor = loss == 2 ? 0.5 : 1.0,
                            .softcap = loss == 2 ? std::optional(30.0) : std::nullopt, .gradient = gradient});
  return result;
}

void check_all_variants(DeviceType device_type) {
  std::map<std::string, bool> ran;
  uint64_t seed = 70000;
  for (const Case& c : cases()) {
    const Tensor logits = random_tensor(Shape{c.tokens, c.vocab}, c.dtype, ++seed, -8, 8);
    // Masked tokens, labels in the slice (both ends) and outside it.
    std::vector<double> labels;
    for (int64_t token = 0; token < c.tokens; ++token) {
      const int64_t label = token % 4 == 0   ? c.vocab_begin + c.vocab - 1
                            : token % 4 == 2 ? c.vocab_begin
                                             : c.vocab_begin + c.vocab + token;  // another rank's
      labels.push_back(token % 3 == 1 ? -100.0 : double(label));
    }
    const Tensor label_tensor = make_tensor(labels, Shape{c.tokens}, DType::int64);
    const DType statistics = c.dtype == DType::float64 ? DType::float64 : DType::float32;
    auto slice = [c](const Tensor& logits_view, const Tensor& labels_view) {
      return VocabParallelLogits{.logits = logits_view,
                                 .labels = labels_view,
                                 .vocab_begin = c.vocab_begin,
                                 .logits_scale_factor = c.logits_scale_factor,
                                 .softcap = c.softcap};
    };
    // The statistics the later passes read: the reference's.
    Tensor row_max = Tensor::empty(Shape{c.tokens}, statistics), sums = Tensor::empty(Shape{2, c.tokens}, statistics);
    vocab_parallel_logits_max({.slice = slice(logits, label_tensor), .row_max = row_max});
    vocab_parallel_logits_sums({.slice = slice(logits, label_tensor), .row_max = row_max, .sums = sums});

    ConsistencyProblem<VocabParallelLogitsMax> max_problem{.name = "max " + case_name(c), .dtype = c.dtype};
    max_problem.tensors["logits"] = input(logits);
    max_problem.tensors["labels"] = input(label_tensor);
    max_problem.tensors["row_max"] = output(Tensor::empty(Shape{c.tokens}, statistics));
    max_problem.call = [slice](TensorMap& t, const auto& run) {
      run({.slice = slice(t.at("logits"), t.at("labels")), .row_max = t.at("row_max")});
    };
    for (const VariantOutcome& outcome : check_variants(max_problem, device_type))
      ran[outcome.id] = ran[outcome.id] || !outcome.unsupported;

    ConsistencyProblem<VocabParallelLogitsSums> sums_problem{.name = "sums " + case_name(c), .dtype = c.dtype};
    // fp32 slices of 16032 logits: the reference adds the exponentials one after the other in fp32, whose rounding
    // grows with the length (1.4e-5 against the GPU's tree sums, measured on the H200).
    if (c.dtype == DType::float32 && c.vocab > 10000) sums_problem.tolerance = 1e-4;
    sums_problem.tensors["logits"] = input(logits);
    sums_problem.tensors["labels"] = input(label_tensor);
    sums_problem.tensors["row_max"] = input(row_max);
    sums_problem.tensors["sums"] = output(Tensor::empty(Shape{2, c.tokens}, statistics));
    sums_problem.call = [slice](TensorMap& t, const auto& run) {
      run({.slice = slice(t.at("logits"), t.at("labels")), .row_max = t.at("row_max"), .sums = t.at("sums")});
    };
    for (const VariantOutcome& outcome : check_variants(sums_problem, device_type))
      ran[outcome.id] = ran[outcome.id] || !outcome.unsupported;

    ConsistencyProblem<VocabParallelCrossEntropy> problem{.name = case_name(c), .dtype = c.dtype};
    problem.tensors["logits"] = c.gradient == GradientMode::in_place ? accumulated_output(logits) : input(logits);
    problem.tensors["labels"] = input(label_tensor);
    problem.tensors["row_max"] = input(row_max);
    problem.tensors["sums"] = input(sums);
    problem.tensors["label_loss_sum"] = accumulated_output(filled(Shape{1}, statistics, 0.25));
    if (c.z_loss) problem.tensors["z_loss_sum"] = accumulated_output(filled(Shape{1}, statistics, 0.5));
    if (c.gradient == GradientMode::out_of_place)
      problem.tensors["grad_logits"] = output(Tensor::empty(Shape{c.tokens, c.vocab}, c.dtype));
    problem.call = [c, slice](TensorMap& t, const auto& run) {
      Tensor* grad = c.gradient == GradientMode::in_place       ? &t.at("logits")
                     : c.gradient == GradientMode::out_of_place ? &t.at("grad_logits")
                                                                : nullptr;
      run({.slice = slice(t.at("logits"), t.at("labels")), .row_max = t.at("row_max"), .sums = t.at("sums"),
           .label_loss_sum = t.at("label_loss_sum"), .z_loss_sum = c.z_loss ? &t.at("z_loss_sum") : nullptr,
           .grad_logits = grad, .label_weight = 0.03, .z_loss_weight = c.z_loss ? 1e-3 : 0.0});
    };
    for (const VariantOutcome& outcome : check_variants(problem, device_type))
      ran[outcome.id] = ran[outcome.id] || !outcome.unsupported;
  }
  for (const auto& [id, any] : ran) EXPECT_TRUE(any) << id << " declined every consistency problem";
}

TEST(VocabParallelCrossEntropyConsistency, CpuVariantsMatchTheReference) { check_all_variants(DeviceType::cpu); }

TEST(VocabParallelCrossEntropyConsistency, CudaVariantsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  check_all_variants(DeviceType::cuda);
}

}  // namespace
}  // namespace fast_llm::kernels
