// Consistency of every dpo_forward_backward variant with the CPU reference: pairs with overlapping spans, masked rows
// inside spans, rows in no span; fp32 / bf16 / fp16 (and fp64 on the CPU) logits with the reference's per-row
// log-probabilities in fp32 (fp64 with fp64 logits, as the head hands them; random values in a large vocabulary's
// range, as the op only adds them); logits_scale_factor; the gradient out of place, over the logits, added to an
// existing one, or not at all; the row coefficients added to; logits as column slices of wider rows; the loss sum
// starts non-zero. And 8192 tokens in 64 pairs of ragged spans (one empty, some overlapping), a ragged vocabulary
// over 16-byte aligned rows (vectors and a tail) and, on the GPU, vocabulary 49152 (the parallel CUDA variant's
// one-read rows and per-pair warps). The reference is checked against TRL's formula and finite differences in
// dpo_test.cpp. Each CUDA variant run twice on 8192 tokens x 49152 gives the same bytes in every output (the variants
// promise fixed-order sums).
#include "fast_llm/kernels/dpo.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "kernels/consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

enum class GradientMode { out_of_place, in_place, accumulated, none };

struct DpoCase {
  int64_t tokens = 1, vocab = 1;
  DType dtype = DType::float32;
  GradientMode gradient = GradientMode::out_of_place;
  bool row_coefficients = false;
  // The small cases: two or three pairs, rows of vocab + 3 columns viewed from column 1 where vocab is 1000; the
  // large: 64 pairs of ragged spans (many_pairs) over rows of `stored_vocab` columns viewed from column 0.
  int64_t stored_vocab = 0;  // 0: vocab
  bool strided = false;
  double beta = 0.3;
};

// 64 pairs over `tokens` rows (a region of tokens / 64 rows each, at least 128): chosen and rejected spans of
// ragged lengths at ragged offsets, rows of no span between them, every eighth pair's rejected span reaching into the
// next region (over the next pair's chosen span), and one pair with an empty rejected span.
std::vector<PreferencePair> many_pairs(int64_t tokens) {
  std::vector<PreferencePair> pairs;
  const int64_t region = tokens / 64;
  for (int64_t pair = 0; pair < 64; ++pair) {
    const int64_t base = pair * region;
    const int64_t chosen_begin = base + pair % 5, chosen_end = chosen_begin + 9 + (pair * 37) % 60;
    const int64_t rejected_begin = chosen_end + pair % 3;
    int64_t rejected_end = pair % 8 == 7 ? std::min(tokens, base + region + 12) : rejected_begin + 5 + (pair * 53) % 50;
    if (pair == 10) rejected_end = rejected_begin;
    pairs.push_back({.chosen_begin = chosen_begin, .chosen_end = chosen_end, .rejected_begin = rejected_begin,
                     .rejected_end = rejected_end});
  }
  return pairs;
}

void check_dpo(DeviceType device_type) {
  std::map<std::string, bool> ran;
  uint64_t seed = 72000;
  std::vector<DpoCase> cases;
  for (DType dtype : {DType::bfloat16, DType::float16, DType::float32, DType::float64})
    for (const auto& [tokens, vocab] : std::vector<std::pair<int64_t, int64_t>>{{12, 7}, {40, 1000}, {9, 32003}})
      for (GradientMode gradient :
           {GradientMode::out_of_place, GradientMode::in_place, GradientMode::accumulated, GradientMode::none})
        cases.push_back({.tokens = tokens, .vocab = vocab, .dtype = dtype, .gradient = gradient,
                         .row_coefficients = gradient == GradientMode::none && vocab == 1000,
                         .stored_vocab = vocab == 1000 ? vocab + 3 : vocab, .strided = vocab == 1000});
  // 8192 tokens in 64 pairs. A ragged vocabulary (rows of 1008 columns, 16-byte aligned, viewed as 1003: vectors and
  // a tail) everywhere; SmolLM2's 49152 (whole vectors) on the GPU only, where the CPU reference's time and memory are
  // the host's (the gradient in bf16 only).
  for (DType dtype : {DType::bfloat16, DType::float32}) {
    for (const auto& [gradient, coefficients] : std::vector<std::pair<GradientMode, bool>>{
             {GradientMode::out_of_place, true}, {GradientMode::in_place, false}, {GradientMode::none, true}})
      cases.push_back({.tokens = 8192, .vocab = 1003, .dtype = dtype, .gradient = gradient,
                       .row_coefficients = coefficients, .stored_vocab = 1008, .strided = true, .beta = 0.05});
    if (device_type == DeviceType::cuda)
      cases.push_back({.tokens = 8192, .vocab = 49152, .dtype = dtype,
                       .gradient = dtype == DType::bfloat16 ? GradientMode::out_of_place : GradientMode::none,
                       .row_coefficients = true, .stored_vocab = 49152, .strided = false, .beta = 0.05});
  }
  for (const DpoCase& c : cases) {
    const bool large = c.tokens >= 8192;
    std::function<Tensor(const Tensor&)> view;
    if (c.strided) view = [vocab = c.vocab, begin = large ? 0 : 1](const Tensor& t) {
      return t.slice(1, begin, begin + vocab);
    };
    std::vector<double> labels;
    for (int64_t token = 0; token < c.tokens; ++token)
      labels.push_back((large ? token % 7 == 3 : token % 4 == 3) ? -100.0 : double((token * 31 + 5) % c.vocab));
    // Small: two pairs over the first 9 rows (the rejected span of the first overlaps the chosen span of the second),
    // and one more over the rest when there is room.
    std::vector<PreferencePair> pairs;
    if (large) {
      pairs = many_pairs(c.tokens);
    } else {
      pairs = {{.chosen_begin = 0, .chosen_end = 3, .rejected_begin = 3, .rejected_end = 6},
               {.chosen_begin = 5, .chosen_end = 7, .rejected_begin = 7, .rejected_end = 9}};
      if (c.tokens > 20)
        pairs.push_back({.chosen_begin = 12, .chosen_end = 20, .rejected_begin = 25, .rejected_end = 38});
    }
    const DType sum_dtype = c.dtype == DType::float64 ? DType::float64 : DType::float32;
    ConsistencyProblem<DpoForwardBackward> problem{
        .name = fmt::format("{} ({}, {}) pairs={} gradient={} row_coefficients={}", dtype_name(c.dtype), c.tokens,
                            c.vocab, pairs.size(), int(c.gradient), c.row_coefficients),
        .dtype = c.dtype, .exact = false, .tensors = {}, .call = {}};
    const Shape stored{c.tokens, c.stored_vocab};
    const Tensor logits = random_tensor(stored, c.dtype, ++seed, -4, 4);
    problem.tensors["logits"] =
        c.gradient == GradientMode::in_place ? accumulated_output(logits, view) : input(logits, view);
    problem.tensors["reference_log_probabilities"] =
        input(random_tensor(Shape{c.tokens}, sum_dtype, ++seed, -12, -0.5));
    problem.tensors["labels"] = input(make_tensor(labels, Shape{c.tokens}, DType::int64));
    problem.tensors["loss_sum"] = accumulated_output(filled(Shape{1}, sum_dtype, 0.75));
    if (c.gradient == GradientMode::out_of_place)
      problem.tensors["grad_logits"] = output(Tensor::empty(stored, c.dtype), view);
    if (c.gradient == GradientMode::accumulated)
      problem.tensors["grad_logits"] = accumulated_output(random_tensor(stored, c.dtype, ++seed), view);
    if (c.row_coefficients)
      problem.tensors["row_coefficients"] =
          accumulated_output(random_tensor(Shape{c.tokens}, DType::float32, ++seed, -0.01, 0.01));
    problem.call = [c, pairs](TensorMap& t, const auto& run) {
      Tensor* grad = c.gradient == GradientMode::in_place ? &t.at("logits")
                     : c.gradient == GradientMode::none   ? nullptr
                                                          : &t.at("grad_logits");
      run({.logits = t.at("logits"), .reference_log_probabilities = t.at("reference_log_probabilities"),
           .labels = t.at("labels"),
           .pairs = pairs, .loss_sum = t.at("loss_sum"), .grad_logits = grad,
           .row_coefficients = c.row_coefficients ? &t.at("row_coefficients") : nullptr, .beta = c.beta,
           .weight = 0.5, .logits_scale_factor = 0.8, .accumulate_gradient = c.gradient == GradientMode::accumulated});
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

// The inputs of the reproducibility test, on the GPU: 8192 tokens x 49152 bf16 logits, fp32 reference
// log-probabilities, every eleventh label masked, 64 pairs.
struct DpoInputs {
  Tensor logits, reference, labels;
  std::vector<PreferencePair> pairs;
};

DpoInputs dpo_inputs() {
  const Device cuda = Device::cuda(0);
  const int64_t tokens = 8192, vocab = 49152;
  std::vector<double> labels;
  for (int64_t token = 0; token < tokens; ++token)
    labels.push_back(token % 11 == 3 ? -100.0 : double((token * 37 + 5) % vocab));
  return {.logits = random_tensor(Shape{tokens, vocab}, DType::bfloat16, 74101, -4, 4).to(cuda),
          .reference = random_tensor(Shape{tokens}, DType::float32, 74102, -12, -0.5).to(cuda),
          .labels = make_tensor(labels, Shape{tokens}, DType::int64).to(cuda),
          .pairs = many_pairs(tokens)};
}

// Runs `variant` on `inputs` into fresh outputs (loss sum, row coefficients, gradient) and returns their bytes, in a
// fixed order.
std::vector<std::vector<char>> dpo_outputs(const KernelVariant<DpoArgs>& variant, const DpoInputs& inputs) {
  const Device cuda = Device::cuda(0);
  const int64_t tokens = inputs.logits.size(0);
  Tensor loss = filled(Shape{1}, DType::float32, 0.0).to(cuda);
  Tensor row_coefficients = filled(Shape{tokens}, DType::float32, 0.0).to(cuda);
  Tensor grad = Tensor::empty(inputs.logits.shape(), DType::bfloat16, cuda);
  const DpoArgs args{.logits = inputs.logits, .reference_log_probabilities = inputs.reference,
                     .labels = inputs.labels, .pairs = inputs.pairs, .loss_sum = loss, .grad_logits = &grad,
                     .row_coefficients = &row_coefficients, .beta = 0.05, .weight = 1.0 / 64.0};
  check_dpo_forward_backward(args);
  if (variant.supports != nullptr)
    if (const auto reason = variant.supports(args)) {
      ADD_FAILURE() << variant.info.id() << " declines: " << *reason;
      return {};
    }
  variant.run(args);
  return host_bytes({&loss, &row_coefficients, &grad});
}

TEST(DpoConsistency, CudaVariantsAreBitwiseReproducible) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const DpoInputs inputs = dpo_inputs();
  for (const auto& variant : OpRegistry<DpoForwardBackward>::instance().variants()) {
    if (variant.info.device != DeviceType::cuda) continue;
    const auto first = dpo_outputs(variant, inputs), second = dpo_outputs(variant, inputs);
    ASSERT_EQ(first.size(), second.size()) << variant.info.id();
    for (size_t output = 0; output < first.size(); ++output)
      EXPECT_TRUE(first[output] == second[output]) << variant.info.id() << " output " << output << " differs";
  }
}

}  // namespace
}  // namespace fast_llm::kernels
