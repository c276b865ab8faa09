// The CUDA variants of label_log_probabilities (kernels/cuda/label_log_probabilities.cu) against the CPU reference,
// row by row: vocabularies 5, 50257 (rows not 16-byte aligned: element loads), 49152 and 128256 (16-byte loads),
// masked rows, rows of a wider tensor (aligned: vectors and a tail; unaligned), rows holding -inf logits (one at its
// label, one with a single finite logit), logits around 1e3, bf16 / fp16 logits, float64 output. Outputs start as NaN
// so a row left unwritten fails. A label not below the vocabulary gives 0 on the GPU (the CPU reference refuses it);
// two runs on the same inputs give the same bytes; logits whose columns are strided are declined with a reason. Every
// case skips itself without a GPU.
//
// Tolerance, from the error of the variant's arithmetic (the reference's fp64 error is far below): the output is
// logits[label] - (max + log(sum)) combined in fp64 from the row's fp32 statistics, so its error is the relative error
// of the fp32 sum of exponentials (it enters log(sum) as an absolute error) plus the output's rounding (half an ulp:
// 2^-24 |output| in float32). A host emulation of the variant's order of operations (256 per-thread online sums, the
// warp butterfly, the warps in order) on 1400 rows of these shapes put the sum's relative error at <= 2 ulps of 1
// (2^-23); the test allows 8, for the device expf's 2-ulp error against the host's < 1 ulp. A logsumexp computed in
// fp32 would miss it by half an ulp of the logsumexp (6e-5 for logits around 1e3).
#include "fast_llm/kernels/label_log_probabilities.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "kernels/consistency.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

constexpr double kFloat32Ulp = 0x1p-23;  // of 1
constexpr double kSumTolerance = 8 * kFloat32Ulp;

struct LabelCase {
  int64_t rows = 1, vocab = 1;
  DType dtype = DType::float32;
  DType output_dtype = DType::float32;
  int64_t stored_vocab = 0;  // the row stride; 0: vocab. The rows are viewed from column `first_column`.
  int64_t first_column = 0;
  double low = -4.0, high = 4.0;
  int mask_every = 0;  // every mask_every-th row (from row 1) is masked with -100; 0: none
  bool minus_infinity = false;
};

std::string case_name(const LabelCase& c) {
  return fmt::format("{} ({}, {}) row stride {} from column {} logits [{}, {}] output {}{}", dtype_name(c.dtype),
                     c.rows, c.vocab, c.stored_vocab == 0 ? c.vocab : c.stored_vocab, c.first_column, c.low, c.high,
                     dtype_name(c.output_dtype), c.minus_infinity ? " with -inf logits" : "");
}

// The case's logits storage (rows, stored vocab) on the CPU: uniform values, with -inf where the case asks: row 0 every
// seventh logit, row 1 its label's too, row 2 all but its label.
Tensor logits_storage(const LabelCase& c, const std::vector<int64_t>& labels, uint64_t seed) {
  const int64_t stored = c.stored_vocab == 0 ? c.vocab : c.stored_vocab;
  std::vector<double> values = uniform_values(c.rows * stored, seed, c.low, c.high);
  if (c.minus_infinity)
    for (int64_t column = 0; column < c.vocab; ++column) {
      double* row = values.data() + c.first_column + column;
      if (column % 7 == 0) row[0] = -INFINITY;
      if (column % 7 == 0 || column == labels[1]) row[stored] = -INFINITY;
      if (column != labels[2]) row[2 * stored] = -INFINITY;
    }
  return make_tensor(values, Shape{c.rows, stored}, c.dtype);
}

std::vector<int64_t> case_labels(const LabelCase& c) {
  std::vector<int64_t> labels;
  for (int64_t row = 0; row < c.rows; ++row)
    labels.push_back(c.mask_every > 0 && row % c.mask_every == 1 ? -100 : (row * 31 + 5) % c.vocab);
  return labels;
}

Tensor view_rows(const LabelCase& c, const Tensor& storage) {
  return storage.slice(1, c.first_column, c.first_column + c.vocab);
}

// Runs `variant` (it must support the arguments) into a NaN-filled output on the GPU and returns the output.
std::vector<double> run_on_gpu(const KernelVariant<LabelLogProbabilitiesArgs>& variant, const Tensor& logits,
                               const Tensor& labels, DType output_dtype) {
  Tensor output = filled(Shape{logits.size(0)}, output_dtype, NAN).to(Device::cuda(0));
  const LabelLogProbabilitiesArgs args{.logits = logits, .labels = labels, .output = output};
  check_label_log_probabilities(args);
  if (variant.supports != nullptr)
    if (const auto reason = variant.supports(args)) {
      ADD_FAILURE() << variant.info.id() << " declines: " << *reason;
      return {};
    }
  variant.run(args);
  synchronize_device(Device::cuda(0));
  return values_of(output.to(Device::cpu()));
}

void expect_rows_match(const std::vector<double>& actual, const std::vector<double>& expected,
                       const std::vector<int64_t>& labels, DType output_dtype, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  const double output_rounding = output_dtype == DType::float32 ? 0x1p-24 : 0x1p-53;
  int failures = 0;
  for (size_t row = 0; row < actual.size() && failures < 5; ++row) {
    if (labels[row] < 0 || std::isinf(expected[row])) {
      if (!(actual[row] == expected[row])) {
        ++failures;
        ADD_FAILURE() << what << " row " << row << ": " << actual[row] << ", reference " << expected[row];
      }
      continue;
    }
    const double tolerance = kSumTolerance + output_rounding * std::fabs(expected[row]);
    if (!(std::fabs(actual[row] - expected[row]) <= tolerance)) {
      ++failures;
      ADD_FAILURE() << what << " row " << row << " (label " << labels[row] << "): " << actual[row] << ", reference "
                    << expected[row] << ", error " << actual[row] - expected[row] << " > " << tolerance;
    }
  }
}

TEST(LabelLogProbabilitiesConsistency, CudaVariantsMatchTheReference) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const std::vector<LabelCase> cases{
      {.rows = 1, .vocab = 5},
      {.rows = 7, .vocab = 50257, .mask_every = 3},
      {.rows = 33, .vocab = 49152, .mask_every = 4},
      {.rows = 33, .vocab = 49152, .output_dtype = DType::float64, .mask_every = 4},
      {.rows = 300, .vocab = 128256, .mask_every = 5},
      // Rows of a wider tensor: from column 4 of rows of 1032 (16-byte aligned: 250 vectors and a tail of one), from
      // column 3 of rows of 1030 (not aligned).
      {.rows = 20, .vocab = 1001, .stored_vocab = 1032, .first_column = 4, .mask_every = 6},
      {.rows = 20, .vocab = 1000, .stored_vocab = 1030, .first_column = 3, .mask_every = 6},
      {.rows = 4, .vocab = 1000, .minus_infinity = true},
      {.rows = 16, .vocab = 32000, .low = 995.0, .high = 1005.0, .mask_every = 5},
      {.rows = 16, .vocab = 32000, .low = -1005.0, .high = -995.0},
      {.rows = 9, .vocab = 32003, .dtype = DType::bfloat16, .mask_every = 4},
      {.rows = 9, .vocab = 32003, .dtype = DType::float16, .output_dtype = DType::float64},
  };
  std::map<std::string, bool> ran;
  uint64_t seed = 81000;
  for (const LabelCase& c : cases) {
    SCOPED_TRACE(case_name(c));
    const std::vector<int64_t> labels = case_labels(c);
    const Tensor storage = logits_storage(c, labels, ++seed);
    const Tensor labels_cpu = labels_tensor(labels);
    Tensor expected = Tensor::empty(Shape{c.rows}, DType::float64);
    label_log_probabilities({.logits = view_rows(c, storage), .labels = labels_cpu, .output = expected});
    const std::vector<double> expected_values = values_of(expected);
    const Tensor logits = view_rows(c, storage.to(Device::cuda(0)));
    const Tensor labels_gpu = labels_cpu.to(Device::cuda(0));
    for (const auto& variant : OpRegistry<LabelLogProbabilities>::instance().variants()) {
      if (variant.info.device != DeviceType::cuda) continue;
      ran[variant.info.id()] = true;
      expect_rows_match(run_on_gpu(variant, logits, labels_gpu, c.output_dtype), expected_values, labels,
                        c.output_dtype, variant.info.id());
    }
  }
  EXPECT_FALSE(ran.empty()) << "no CUDA variant of label_log_probabilities is registered";
}

// Labels at or past the vocabulary give 0 on the GPU, like masked ones (cross_entropy.cu and dpo.cu treat them so);
// the other rows are unaffected.
TEST(LabelLogProbabilitiesConsistency, CudaTreatsLabelsPastTheVocabularyAsMasked) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const LabelCase c{.rows = 4, .vocab = 100};
  const std::vector<int64_t> labels{5, 100, 1000, -1}, valid_labels{5, -100, -100, -1};
  const Tensor logits = random_tensor(Shape{c.rows, c.vocab}, DType::float32, 81100, -4, 4);
  Tensor expected = Tensor::empty(Shape{c.rows}, DType::float64);
  label_log_probabilities({.logits = logits, .labels = labels_tensor(valid_labels), .output = expected});
  for (const auto& variant : OpRegistry<LabelLogProbabilities>::instance().variants()) {
    if (variant.info.device != DeviceType::cuda) continue;
    expect_rows_match(run_on_gpu(variant, logits.to(Device::cuda(0)), labels_tensor(labels).to(Device::cuda(0)),
                                 DType::float32),
                      values_of(expected), valid_labels, DType::float32, variant.info.id());
  }
}

TEST(LabelLogProbabilitiesConsistency, CudaVariantsAreBitwiseReproducible) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  for (const LabelCase& c : {LabelCase{.rows = 512, .vocab = 128256, .mask_every = 9},
                             LabelCase{.rows = 64, .vocab = 50257, .mask_every = 9}}) {
    SCOPED_TRACE(case_name(c));
    const std::vector<int64_t> labels = case_labels(c);
    const Tensor logits = logits_storage(c, labels, 81200 + uint64_t(c.vocab)).to(Device::cuda(0));
    const Tensor labels_gpu = labels_tensor(labels).to(Device::cuda(0));
    for (const auto& variant : OpRegistry<LabelLogProbabilities>::instance().variants()) {
      if (variant.info.device != DeviceType::cuda) continue;
      auto run_once = [&] {
        Tensor output = filled(Shape{c.rows}, DType::float32, NAN).to(Device::cuda(0));
        variant.run({.logits = logits, .labels = labels_gpu, .output = output});
        return host_bytes({&output});
      };
      EXPECT_TRUE(run_once() == run_once()) << variant.info.id() << " gives other bytes in a second run";
    }
  }
}

// Logits whose columns are not contiguous (a transposed view) and float64 logits are declined with a reason.
TEST(LabelLogProbabilitiesConsistency, CudaVariantsDeclineStridedColumns) {
  if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const Tensor stored = random_tensor(Shape{50, 8}, DType::float32, 81300).to(Device::cuda(0));
  const Tensor transposed = stored.transpose(0, 1);  // (8, 50), column stride 8
  const Tensor wide = random_tensor(Shape{8, 50}, DType::float64, 81301).to(Device::cuda(0));
  const Tensor labels = labels_tensor({0, 1, 2, 3, 4, 5, 6, 7}).to(Device::cuda(0));
  Tensor output = filled(Shape{8}, DType::float32, 0.0).to(Device::cuda(0));
  for (const auto& variant : OpRegistry<LabelLogProbabilities>::instance().variants()) {
    if (variant.info.device != DeviceType::cuda) continue;
    ASSERT_NE(variant.supports, nullptr) << variant.info.id();
    const auto strided = variant.supports({.logits = transposed, .labels = labels, .output = output});
    ASSERT_TRUE(strided.has_value()) << variant.info.id() << " accepts logits with column stride 8";
    EXPECT_NE(strided->find("contiguous"), std::string::npos) << *strided;
    const auto float64 = variant.supports({.logits = wide, .labels = labels, .output = output});
    ASSERT_TRUE(float64.has_value()) << variant.info.id() << " accepts float64 logits";
    EXPECT_NE(float64->find("float64"), std::string::npos) << *float64;
  }
}

}  // namespace
}  // namespace fast_llm::kernels
