// Tests of the CPU references of the vocabulary-parallel cross-entropy passes (kernels/vocab_parallel_cross_entropy.h)
// and of the embeddings' `first_row` slice: the logits of a vocabulary split into slices, run through the three passes
// with the sums over the slices taken here (as the tensor-parallel group does), give the losses and gradients of
// cross_entropy_forward_backward on the whole logits, with and without z-loss, scale and softcap, with masked tokens;
// and the gathers of every slice of an embedding table add up to the whole table's.
#include "fast_llm/kernels/vocab_parallel_cross_entropy.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "fast_llm/kernels/cross_entropy.h"
#include "fast_llm/kernels/embedding.h"
#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

constexpr int64_t kTokens = 5, kVocab = 12, kSlices = 3;

struct Options {
  double z_loss_weight = 0.0;
  double logits_scale_factor = 1.0;
  std::optional<double> softcap = std::nullopt;
};

void expect_slices_match_whole(const Options& options) {
  SCOPED_TRACE(fmt::format("z_loss_weight={} scale={} softcap={}", options.z_loss_weight, options.logits_scale_factor,
                           options.softcap.value_or(0.0)));
  const Tensor logits = random_tensor(Shape{kTokens, kVocab}, DType::float64, 3, -3.0, 3.0);
  const Tensor labels = make_tensor({3, -100, 11, 0, 7}, Shape{kTokens}, DType::int64);
  const bool z_loss = options.z_loss_weight != 0.0;

  Tensor label_sum = filled(Shape{1}, DType::float64, 0), z_sum = filled(Shape{1}, DType::float64, 0);
  Tensor grad = filled(Shape{kTokens, kVocab}, DType::float64, NAN);
  run_reference<CrossEntropyForwardBackward>({.logits = logits,
                                              .labels = labels,
                                              .label_loss_sum = label_sum,
                                              .z_loss_sum = z_loss ? &z_sum : nullptr,
                                              .grad_logits = &grad,
                                              .label_weight = 0.5,
                                              .z_loss_weight = options.z_loss_weight,
                                              .logits_scale_factor = options.logits_scale_factor,
                                              .softcap = options.softcap});

  // Each slice's logits copied out, as a rank holds them.
  constexpr int64_t width = kVocab / kSlices;
  std::vector<Tensor> slices;
  for (int64_t slice = 0; slice < kSlices; ++slice) {
    Tensor part = Tensor::empty(Shape{kTokens, width}, DType::float64);
    for (int64_t token = 0; token < kTokens; ++token)
      for (int64_t column = 0; column < width; ++column)
        part.data_as<double>()[token * width + column] =
            logits.data_as<double>()[token * kVocab + slice * width + column];
    slices.push_back(part);
  }
  auto slice_of = [&](int64_t slice) {
    return VocabParallelLogits{.logits = slices[size_t(slice)],
                               .labels = labels,
                               .vocab_begin = slice * width,
                               .logits_scale_factor = options.logits_scale_factor,
                               .softcap = options.softcap};
  };
  // Pass 1 and the maximum over the slices.
  Tensor row_max = filled(Shape{kTokens}, DType::float64, -1e300);
  for (int64_t slice = 0; slice < kSlices; ++slice) {
    Tensor part_max = filled(Shape{kTokens}, DType::float64, NAN);
    run_reference<VocabParallelLogitsMax>({.slice = slice_of(slice), .row_max = part_max});
    for (int64_t token = 0; token < kTokens; ++token)
      row_max.data_as<double>()[token] = std::max(row_max.data_as<double>()[token], part_max.data_as<double>()[token]);
  }
  // Pass 2 and the sum over the slices.
  Tensor sums = filled(Shape{2, kTokens}, DType::float64, 0);
  for (int64_t slice = 0; slice < kSlices; ++slice) {
    Tensor part_sums = filled(Shape{2, kTokens}, DType::float64, NAN);
    run_reference<VocabParallelLogitsSums>({.slice = slice_of(slice), .row_max = row_max, .sums = part_sums});
    for (int64_t index = 0; index < 2 * kTokens; ++index)
      sums.data_as<double>()[index] += part_sums.data_as<double>()[index];
  }
  // Pass 3 on each slice: every slice gets the whole losses, and its part of the gradient (written over its logits).
  for (int64_t slice = 0; slice < kSlices; ++slice) {
    Tensor slice_label_sum = filled(Shape{1}, DType::float64, 0), slice_z_sum = filled(Shape{1}, DType::float64, 0);
    Tensor slice_grad = slices[size_t(slice)];
    run_reference<VocabParallelCrossEntropy>({.slice = slice_of(slice),
                                              .row_max = row_max,
                                              .sums = sums,
                                              .label_loss_sum = slice_label_sum,
                                              .z_loss_sum = z_loss ? &slice_z_sum : nullptr,
                                              .grad_logits = &slice_grad,
                                              .label_weight = 0.5,
                                              .z_loss_weight = options.z_loss_weight});
    expect_near(slice_label_sum, values_of(label_sum), 1e-12, 1e-12, "label loss");
    if (z_loss) expect_near(slice_z_sum, values_of(z_sum), 1e-12, 1e-12, "z-loss");
    std::vector<double> expected;
    const std::vector<double> whole = values_of(grad);
    for (int64_t token = 0; token < kTokens; ++token)
      for (int64_t column = 0; column < width; ++column)
        expected.push_back(whole[size_t(token * kVocab + slice * width + column)]);
    expect_near(slice_grad, expected, 1e-12, 1e-12, fmt::format("gradient of slice {}", slice));
  }
}

TEST(VocabParallelCrossEntropyReference, SlicesMatchTheWholeVocabulary) {
  expect_slices_match_whole({});
  expect_slices_match_whole({.z_loss_weight = 0.1});
  expect_slices_match_whole({.z_loss_weight = 0.1, .logits_scale_factor = 0.7, .softcap = 2.0});
}

TEST(VocabParallelCrossEntropyReference, Errors) {
  const Tensor logits = filled(Shape{2, 4}, DType::float64, 0);
  const Tensor labels = make_tensor({1, 2}, Shape{2}, DType::int64);
  Tensor wrong = filled(Shape{3}, DType::float64, 0);
  expect_error([&] { vocab_parallel_logits_max({.slice = {.logits = logits, .labels = labels}, .row_max = wrong}); },
               "row_max");
  Tensor row_max = filled(Shape{2}, DType::float32, 0);
  expect_error([&] { vocab_parallel_logits_max({.slice = {.logits = logits, .labels = labels}, .row_max = row_max}); },
               "row_max");
}

TEST(EmbeddingReference, SlicesOfTheTableAddUpToTheWholeTable) {
  const Tensor weight = random_tensor(Shape{6, 3}, DType::float64, 5);
  const Tensor indices = make_tensor({5, 0, 3, 3, 1}, Shape{5}, DType::int64);
  Tensor whole = filled(Shape{5, 3}, DType::float64, NAN);
  run_reference<EmbeddingForward>({.indices = indices, .weight = weight, .output = whole, .scale = 2.0});
  Tensor grad_output = random_tensor(Shape{5, 3}, DType::float64, 6);
  Tensor whole_grad = filled(Shape{6, 3}, DType::float64, 0);
  run_reference<EmbeddingBackward>({.indices = indices, .grad_output = grad_output, .grad_weight = whole_grad,
                                    .scale = 2.0});
  std::vector<double> sum(15, 0.0);
  const std::vector<double> weights = values_of(weight), grads = values_of(whole_grad);
  for (int64_t first_row : {0, 3}) {
    Tensor part = make_tensor(std::span(weights).subspan(size_t(first_row) * 3, 9), Shape{3, 3}, DType::float64);
    Tensor output = filled(Shape{5, 3}, DType::float64, NAN);
    run_reference<EmbeddingForward>(
        {.indices = indices, .weight = part, .output = output, .scale = 2.0, .first_row = first_row});
    const std::vector<double> values = values_of(output);
    for (size_t index = 0; index < sum.size(); ++index) sum[index] += values[index];
    // The backward adds only the slice's rows, as the whole table's backward does to them.
    Tensor part_grad = filled(Shape{3, 3}, DType::float64, 0);
    run_reference<EmbeddingBackward>({.indices = indices, .grad_output = grad_output, .grad_weight = part_grad,
                                      .scale = 2.0, .first_row = first_row});
    expect_near(part_grad, std::span(grads).subspan(size_t(first_row) * 3, 9), 1e-15, 0, "slice gradient");
  }
  expect_near(values_of(whole), sum, 1e-15, 0, "sum of the slices' gathers");
}

}  // namespace
}  // namespace fast_llm::kernels
