// Consistency of every dpo_forward_backward variant with the CPU reference: pairs with overlapping spans, masked rows
// inside spans, rows in no span; fp32 / bf16 / fp16 (and fp64 on the CPU) logits with fp32 reference logits;
// logits_scale_factor; the gradient out of place, over the logits, added to an existing one, or not at all; logits as
// column slices of wider rows; the loss sum starts non-zero. The reference is checked against TRL's formula and finite
// differences in dpo_test.cpp.
#include "fast_llm/kernels/dpo.h"

#include <gtest/gtest.h>

#include <map>

#include "kernels/consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

enum class GradientMode { out_of_place, in_place, accumulated, none };

void check_dpo(DeviceType device_type) {
  std::map<std::string, bool> ran;
  uint64_t seed = 72000;
  for (DType dtype : {DType::bfloat16, DType::float16, DType::float32, DType::float64})
    for (const auto& [tokens, vocab] : std::vector<std::pair<int64_t, int64_t>>{{12, 7}, {40, 1000}, {9, 32003}})
      for (GradientMode gradient :
           {GradientMode::out_of_place, GradientMode::in_place, GradientMode::accumulated, GradientMode::none}) {
        const bool strided = vocab == 1000;
        const int64_t stored_vocab = strided ? vocab + 3 : vocab;
        std::function<Tensor(const Tensor&)> view;
        if (strided) view = [vocab = vocab](const Tensor& t) { return t.slice(1, 1, 1 + vocab); };
        std::vector<double> labels;
        for (int64_t token = 0; token < tokens; ++token)
          labels.push_back(token % 4 == 3 ? -100.0 : double((token * 31 + 5) % vocab));
        // Two pairs over the first 9 rows (the rejected span of the first overlaps the chosen span of the second),
        // and one more over the rest when there is room.
        std::vector<PreferencePair> pairs{{.chosen_begin = 0, .chosen_end = 3, .rejected_begin = 3, .rejected_end = 6},
                                          {.chosen_begin = 5, .chosen_end = 7, .rejected_begin = 7, .rejected_end = 9}};
        if (tokens > 20)
          pairs.push_back({.chosen_begin = 12, .chosen_end = 20, .rejected_begin = 25, .rejected_end = 38});
        const DType sum_dtype = dtype == DType::float64 ? DType::float64 : DType::float32;
        ConsistencyProblem<DpoForwardBackward> problem{
            .name = fmt::format("{} ({}, {}) gradient={}", dtype_name(dtype), tokens, vocab, int(gradient)),
            .dtype = dtype, .exact = false, .tensors = {}, .call = {}};
        const Tensor logits = random_tensor(Shape{tokens, stored_vocab}, dtype, ++seed, -4, 4);
        problem.tensors["logits"] =
            gradient == GradientMode::in_place ? accumulated_output(logits, view) : input(logits, view);
        problem.tensors["reference_logits"] =
            input(random_tensor(Shape{tokens, vocab}, DType::float32, ++seed, -4, 4));
        problem.tensors["labels"] = input(make_tensor(labels, Shape{tokens}, DType::int64));
        problem.tensors["loss_sum"] = accumulated_output(filled(Shape{1}, sum_dtype, 0.75));
        if (gradient == GradientMode::out_of_place)
          problem.tensors["grad_logits"] = output(Tensor::empty(Shape{tokens, stored_vocab}, dtype), view);
        if (gradient == GradientMode::accumulated)
          problem.tensors["grad_logits"] =
              accumulated_output(random_tensor(Shape{tokens, stored_vocab}, dtype, ++seed), view);
        problem.call = [gradient, pairs](TensorMap& t, const auto& run) {
          Tensor* grad = gradient == GradientMode::in_place ? &t.at("logits")
                         : gradient == GradientMode::none   ? nullptr
                                                            : &t.at("grad_logits");
          run({.logits = t.at("logits"), .reference_logits = t.at("reference_logits"), .labels = t.at("labels"),
               .pairs = pairs, .loss_sum = t.at("loss_sum"), .grad_logits = grad, .beta = 0.3, .weight = 0.5,
               .logits_scale_factor = 0.8, .accumulate_gradient = gradient == GradientMode::accumulated});
        };
        for (const VariantOutcome& outcome : check_variants(problem, device_type))
          ran[outcome.id] = ran[outcome.id] || !outcome.unsupported;
      }
  for (const auto& [id, any] : ran) EXPECT_TRUE(any) << id << " declined every consistency problem";
}

TEST(DpoConsistency, CpuVariantsMatchTheReference) { check_dpo(DeviceType::cpu); }

TEST(DpoConsistency, CudaVariantsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  check_dpo(DeviceType::cuda);
}

}  // namespace
}  // namespace fast_llm::kernels
