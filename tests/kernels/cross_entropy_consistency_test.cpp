// Consistency of every cross_entropy_forward_backward variant with the CPU reference: vocabularies from 7 to 32000,
// masked tokens, with and without z-loss, logits_scale_factor and softcap, fp32 / bf16 / fp16 / fp64 logits, the
// gradient written out of place, in place over the logits, or not at all, and logits / gradient as column slices of
// wider rows. The loss sums start non-zero (they are added to). A variant may decline some problems, but must run at
// least one. The reference itself is checked against formulas and finite differences in cross_entropy_test.cpp.
//
// CUDA variants also get the shapes that pick their paths, with fewer combinations each: vocabularies that are not a
// multiple of a 16-byte vector (the elements past the last whole vector), rows split over 2, 3 and 7 blocks of a
// cluster, rows too long for 8 blocks' shared memory (read twice), and more rows than the clusters that fit on the GPU
// at once (a block walks several rows through its two stages, masked rows in between, with a mask period that does not
// divide the cluster count). Labels include the first and the last logit of the row.
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
  std::optional<double> softcap = std::nullopt;
  GradientMode gradient = GradientMode::out_of_place;
  bool strided = false;  // logits (and gradient) are column slices of (tokens, vocab + 3) rows
  int64_t mask_period = 3;  // token t is masked when t % mask_period == 1
  bool cuda_paths = false;  // a shape for the CUDA variants' paths: not run on the CPU (where only the reference is)
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
  const DType bf16 = DType::bfloat16, fp16 = DType::float16, fp32 = DType::float32;
  const GradientMode in_place = GradientMode::in_place, none = GradientMode::none;
  for (CrossEntropyCase c : std::vector<CrossEntropyCase>{
           // Past the last whole 16-byte vector: 1 element (bf16), 3 (fp16), 3 (fp32); one block per row.
           {.tokens = 5, .vocab = 50257, .dtype = bf16, .z_loss = true, .gradient = in_place},
           {.tokens = 3, .vocab = 1003, .dtype = fp16, .softcap = 5.0},
           {.tokens = 4, .vocab = 4099, .dtype = fp32, .gradient = none},
           // Llama-3: 3 blocks of a cluster per row; 200003 fp32: 7.
           {.tokens = 3, .vocab = 128256, .dtype = bf16, .z_loss = true, .logits_scale_factor = 0.5, .softcap = 30.0,
            .gradient = in_place},
           {.tokens = 2, .vocab = 200003, .dtype = fp32, .softcap = 10.0},
           // More than 8 blocks' shared memory (bf16 vocab above ~464000): read twice, 8 blocks per row.
           {.tokens = 2, .vocab = 500000, .dtype = bf16, .z_loss = true, .gradient = in_place},
           // Several rows per cluster: one block per SM (two stages of 58.6 KiB), one or two blocks per row.
           {.tokens = 1100, .vocab = 15001, .dtype = fp32, .z_loss = true, .gradient = in_place, .mask_period = 7},
           {.tokens = 600, .vocab = 30001, .dtype = fp32, .softcap = 20.0, .mask_period = 7},
       }) {
    c.cuda_paths = true;
    cases.push_back(c);
  }
  return cases;
}

void check_all_variants(DeviceType device_type) {
  std::map<std::string, bool> ran;
  uint64_t seed = 50000;
  for (const CrossEntropyCase& c : cross_entropy_cases()) {
    if (c.cuda_paths && device_type == DeviceType::cpu) continue;
    const int64_t stored_vocab = c.strided ? c.vocab + 3 : c.vocab;
    std::function<Tensor(const Tensor&)> view;
    if (c.strided) view = [vocab = c.vocab](const Tensor& t) { return t.slice(1, 1, 1 + vocab); };
    const Tensor logits = random_tensor(Shape{c.tokens, stored_vocab}, c.dtype, ++seed, -8, 8);
    // Masked tokens; labels at both ends of the row and spread over it.
    std::vector<double> labels;
    for (int64_t token = 0; token < c.tokens; ++token) {
      const int64_t label = token % 5 == 0   ? c.vocab - 1
                            : token % 5 == 2 ? 0
                                             : (token * 7919 + int64_t(seed)) % c.vocab;
      labels.push_back(token % c.mask_period == 1 ? -100.0 : double(label));
    }
    const DType sum_dtype = c.dtype == DType::float64 ? DType::float64 : DType::float32;

    ConsistencyProblem<CrossEntropyForwardBackward> problem{.name = case_name(c), .dtype = c.dtype, .exact = false,
                                                            .tensors = {}, .call = {}};
    // fp32 sums over a vocabulary of 10^5 round differently on the two sides by up to ~sqrt(vocab) ulps.
    if (c.dtype == DType::float32 && c.vocab > 100000) problem.tolerance = 5e-5;
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
