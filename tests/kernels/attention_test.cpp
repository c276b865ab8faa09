// Tests of the CPU reference attention_forward / attention_backward (kernels/cpu/attention.cpp): a hand-computed case;
// forward and logsumexp against a dense fp64 implementation written here (full score matrix, mask from document ids,
// causality and window); packed documents against each document alone; grouped-query attention against multi-head
// attention on explicitly repeated keys and values; backward against central finite differences of the dense
// implementation in fp64; a query range inside a longer key range (query_offset) against the rows of the whole
// attention, forward and backward; 16-bit and fp32 inputs against fp64; strided inputs; errors.
#include "fast_llm/kernels/attention.h"
#include "fast_llm/kernels/rotary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/reference_test_util.h"

namespace fast_llm::kernels {
namespace {

using namespace testing;

// ---------------------------------------------------------------------------------------------------------------------
// Problem description and the dense fp64 implementation.

struct Problem {
  std::vector<int64_t> document_lengths;
  int64_t heads = 4;
  int64_t head_groups = 2;
  int64_t head_size = 8;
  bool causal = true;
  std::optional<int64_t> window = std::nullopt;
  double softmax_scale = 1.0 / std::sqrt(8.0);

  int64_t tokens() const { return std::accumulate(document_lengths.begin(), document_lengths.end(), int64_t(0)); }
  int64_t longest() const {
    int64_t longest = 0;
    for (int64_t length : document_lengths) longest = std::max(longest, length);
    return longest;
  }
  Tensor cu_seqlens() const {
    std::vector<double> offsets{0};
    for (int64_t length : document_lengths) offsets.push_back(offsets.back() + double(length));
    return make_tensor(offsets, Shape{int64_t(offsets.size())}, DType::int32);
  }
  Shape query_shape() const { return Shape{tokens(), heads, head_size}; }
  Shape key_shape() const { return Shape{tokens(), head_groups, head_size}; }
};

// (tokens, groups, head_size) -> (tokens, heads, head_size): head h gets group h / (heads / groups).
std::vector<double> repeat_key_value(const std::vector<double>& values, int64_t tokens, int64_t groups, int64_t heads,
                                     int64_t head_size) {
  std::vector<double> repeated(size_t(tokens * heads * head_size));
  for (int64_t token = 0; token < tokens; ++token)
    for (int64_t head = 0; head < heads; ++head)
      for (int64_t channel = 0; channel < head_size; ++channel)
        repeated[size_t((token * heads + head) * head_size + channel)] =
            values[size_t((token * groups + head / (heads / groups)) * head_size + channel)];
  return repeated;
}

struct DenseResult {
  std::vector<double> output;     // (tokens, heads, head_size)
  std::vector<double> logsumexp;  // (heads, tokens)
};

// Multi-head attention (as many key/value heads as query heads) with an explicit (tokens, tokens) score matrix per
// head and a mask built from document ids.
DenseResult dense_attention(const Problem& problem, const std::vector<double>& query, const std::vector<double>& key,
                            const std::vector<double>& value) {
  const int64_t tokens = problem.tokens(), heads = problem.heads, head_size = problem.head_size;
  std::vector<int64_t> document_of;
  for (size_t document = 0; document < problem.document_lengths.size(); ++document)
    for (int64_t index = 0; index < problem.document_lengths[document]; ++index)
      document_of.push_back(int64_t(document));
  auto allowed = [&](int64_t i, int64_t j) {
    return document_of[size_t(i)] == document_of[size_t(j)] && (!problem.causal || j <= i) &&
           (!problem.window || (0 <= i - j && i - j < *problem.window));
  };
  auto at = [&](const std::vector<double>& x, int64_t token, int64_t head, int64_t channel) {
    return x[size_t((token * heads + head) * head_size + channel)];
  };
  DenseResult result{std::vector<double>(size_t(tokens * heads * head_size), 0.0),
                     std::vector<double>(size_t(heads * tokens), -std::numeric_limits<double>::infinity())};
  for (int64_t head = 0; head < heads; ++head) {
    std::vector<double> scores(size_t(tokens * tokens));  // (tokens, tokens)
    for (int64_t i = 0; i < tokens; ++i)
      for (int64_t j = 0; j < tokens; ++j) {
        double dot = 0;
        for (int64_t channel = 0; channel < head_size; ++channel)
          dot += at(query, i, head, channel) * at(key, j, head, channel);
        scores[size_t(i * tokens + j)] = problem.softmax_scale * dot;
      }
    for (int64_t i = 0; i < tokens; ++i) {
      double normaliser = 0;
      for (int64_t j = 0; j < tokens; ++j)
        if (allowed(i, j)) normaliser += std::exp(scores[size_t(i * tokens + j)]);
      if (normaliser == 0) continue;
      result.logsumexp[size_t(head * tokens + i)] = std::log(normaliser);
      for (int64_t j = 0; j < tokens; ++j) {
        if (!allowed(i, j)) continue;
        const double probability = std::exp(scores[size_t(i * tokens + j)]) / normaliser;
        for (int64_t channel = 0; channel < head_size; ++channel)
          result.output[size_t((i * heads + head) * head_size + channel)] +=
              probability * at(value, j, head, channel);
      }
    }
  }
  return result;
}

// The dense implementation on grouped keys / values: repeats them first.
DenseResult dense_grouped_attention(const Problem& problem, const Tensor& query, const Tensor& key,
                                    const Tensor& value) {
  const auto repeat = [&](const Tensor& tensor) {
    return repeat_key_value(values_of(tensor), problem.tokens(), problem.head_groups, problem.heads,
                            problem.head_size);
  };
  return dense_attention(problem, values_of(query), repeat(key), repeat(value));
}

// ---------------------------------------------------------------------------------------------------------------------
// Calls of the reference variant.

struct Inputs {
  Tensor query, key, value;
};

Inputs random_inputs(const Problem& problem, DType dtype, uint64_t seed, double range = 2.0) {
  return {random_tensor(problem.query_shape(), dtype, seed, -range, range),
          random_tensor(problem.key_shape(), dtype, seed + 1, -range, range),
          random_tensor(problem.key_shape(), dtype, seed + 2, -range, range)};
}

struct Forward {
  Tensor output, logsumexp;
};

Forward forward(const Problem& problem, const Tensor& query, const Tensor& key, const Tensor& value,
                DType logsumexp_dtype = DType::float32) {
  Forward result{Tensor::empty(problem.query_shape(), query.dtype()),
                 Tensor::empty(Shape{problem.heads, problem.tokens()}, logsumexp_dtype)};
  const Tensor cu_seqlens = problem.cu_seqlens();
  attention_forward({.query = query,
                     .key = key,
                     .value = value,
                     .cu_seqlens = cu_seqlens,
                     .max_seqlen = problem.longest(),
                     .output = result.output,
                     .logsumexp = result.logsumexp,
                     .softmax_scale = problem.softmax_scale,
                     .causal = problem.causal,
                     .window_size = problem.window});
  return result;
}

struct Gradients {
  Tensor query, key, value;
};

// With rotary tables, the gradients before the rotation of the query and key (kernels/attention.h).
Gradients backward(const Problem& problem, const Tensor& grad_output, const Inputs& inputs, const Forward& saved,
                   const Tensor* rotary_cos = nullptr, const Tensor* rotary_sin = nullptr) {
  const DType dtype = inputs.query.dtype();
  Gradients gradients{Tensor::empty(problem.query_shape(), dtype), Tensor::empty(problem.key_shape(), dtype),
                      Tensor::empty(problem.key_shape(), dtype)};
  const Tensor cu_seqlens = problem.cu_seqlens();
  attention_backward({.grad_output = grad_output,
                      .query = inputs.query,
                      .key = inputs.key,
                      .value = inputs.value,
                      .output = saved.output,
                      .logsumexp = saved.logsumexp,
                      .cu_seqlens = cu_seqlens,
                      .max_seqlen = problem.longest(),
                      .grad_query = gradients.query,
                      .grad_key = gradients.key,
                      .grad_value = gradients.value,
                      .softmax_scale = problem.softmax_scale,
                      .causal = problem.causal,
                      .window_size = problem.window,
                      .rotary_cos = rotary_cos,
                      .rotary_sin = rotary_sin});
  return gradients;
}

std::string describe(const Problem& problem) {
  return fmt::format("causal={} window={}", problem.causal,
                     problem.window ? std::to_string(*problem.window) : std::string("none"));
}

// Every mask configuration the tests run: causal or not, with no window and with windows of 1 and 2.
std::vector<Problem> mask_variants(Problem base) {
  std::vector<Problem> problems;
  for (bool causal : {true, false})
    for (std::optional<int64_t> window : {std::optional<int64_t>(), std::optional<int64_t>(1),
                                          std::optional<int64_t>(2)}) {
      base.causal = causal;
      base.window = window;
      problems.push_back(base);
    }
  return problems;
}

// ---------------------------------------------------------------------------------------------------------------------
// Forward

TEST(AttentionReference, ForwardHandChecked) {
  // One document of two tokens, one head, head_size 1, scale 1, causal. q = (1, 1), k = (0, ln 3), v = (4, 8).
  // Token 0 sees only key 0: out = 4, lse = 0. Token 1 scores (0, ln 3): p = (1/4, 3/4), out = 1 + 6 = 7, lse = ln 4.
  Problem problem{.document_lengths = {2}, .heads = 1, .head_groups = 1, .head_size = 1, .softmax_scale = 1.0};
  for (DType dtype : {DType::float64, DType::float32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor query = make_tensor({1, 1}, Shape{2, 1, 1}, dtype);
    const Tensor key = make_tensor({0, std::log(3.0)}, Shape{2, 1, 1}, dtype);
    const Tensor value = make_tensor({4, 8}, Shape{2, 1, 1}, dtype);
    const Forward result = forward(problem, query, key, value, dtype);
    expect_near(result.output, {4, 7}, 0, dtype_tolerance(dtype), "output");
    expect_near(result.logsumexp, {0, std::log(4.0)}, dtype_tolerance(dtype), dtype_tolerance(dtype), "logsumexp");
  }
}

TEST(AttentionReference, ForwardMatchesDense) {
  // Three documents (one of a single token, one empty), grouped-query heads, every mask configuration.
  for (const Problem& problem : mask_variants(Problem{.document_lengths = {1, 4, 0, 3}})) {
    SCOPED_TRACE(describe(problem));
    const Inputs inputs = random_inputs(problem, DType::float64, 11);
    const Forward result = forward(problem, inputs.query, inputs.key, inputs.value, DType::float64);
    const DenseResult expected = dense_grouped_attention(problem, inputs.query, inputs.key, inputs.value);
    expect_near(result.output, expected.output, 1e-13, 1e-12, "output");
    expect_near(result.logsumexp, expected.logsumexp, 1e-13, 1e-12, "logsumexp");
  }
}

TEST(AttentionReference, WindowLongerThanDocumentsChangesNothing) {
  // A window of 4 tokens over documents of at most 4 tokens masks nothing a causal mask does not.
  Problem problem{.document_lengths = {1, 4, 3}};
  const Inputs inputs = random_inputs(problem, DType::float64, 12);
  const Forward without_window = forward(problem, inputs.query, inputs.key, inputs.value, DType::float64);
  problem.window = 4;
  const Forward with_window = forward(problem, inputs.query, inputs.key, inputs.value, DType::float64);
  expect_near(with_window.output, values_of(without_window.output), 0, 0, "output");
  // ... while a window of 3 does change the last token of the 4-token document (it loses key 1).
  problem.window = 3;
  const Forward shorter = forward(problem, inputs.query, inputs.key, inputs.value, DType::float64);
  const std::vector<double> a = values_of(shorter.output), b = values_of(without_window.output);
  const size_t last_row = size_t(4 * problem.heads * problem.head_size);  // token 4, head 0
  EXPECT_NE(a[last_row], b[last_row]);
}

TEST(AttentionReference, WindowNeverShowsLaterKeys) {
  // As Fast-LLM's flash-attn window (window - 1, 0): with a window, a bidirectional layer sees what a causal one does.
  Problem problem{.document_lengths = {1, 4, 3}, .causal = false, .window = 2};
  const Inputs inputs = random_inputs(problem, DType::float64, 13);
  const Forward bidirectional = forward(problem, inputs.query, inputs.key, inputs.value, DType::float64);
  problem.causal = true;
  const Forward causal = forward(problem, inputs.query, inputs.key, inputs.value, DType::float64);
  expect_near(bidirectional.output, values_of(causal.output), 0, 0, "output");
  // Without a window the two differ (the bidirectional one sees later keys).
  problem.window.reset();
  const Forward causal_full = forward(problem, inputs.query, inputs.key, inputs.value, DType::float64);
  problem.causal = false;
  const Forward bidirectional_full = forward(problem, inputs.query, inputs.key, inputs.value, DType::float64);
  EXPECT_NE(values_of(causal_full.output), values_of(bidirectional_full.output));
}

TEST(AttentionReference, PackedDocumentsEqualSeparateDocuments) {
  for (const Problem& packed : mask_variants(Problem{.document_lengths = {3, 5, 2}})) {
    SCOPED_TRACE(describe(packed));
    const Inputs inputs = random_inputs(packed, DType::float32, 21);
    const Forward saved = forward(packed, inputs.query, inputs.key, inputs.value);
    const Tensor grad_output = random_tensor(packed.query_shape(), DType::float32, 24);
    const Gradients gradients = backward(packed, grad_output, inputs, saved);
    int64_t begin = 0;
    for (int64_t length : packed.document_lengths) {
      SCOPED_TRACE(fmt::format("document [{}, {})", begin, begin + length));
      Problem alone = packed;
      alone.document_lengths = {length};
      const auto rows = [&](const Tensor& tensor) { return tensor.slice(0, begin, begin + length); };
      const Inputs document{rows(inputs.query), rows(inputs.key), rows(inputs.value)};
      const Forward document_saved = forward(alone, document.query, document.key, document.value);
      // Same arithmetic on the same values: identical results.
      expect_near(document_saved.output, values_of(rows(saved.output)), 0, 0, "output");
      expect_near(document_saved.logsumexp, values_of(saved.logsumexp.slice(1, begin, begin + length)), 0, 0,
                  "logsumexp");
      const Gradients document_gradients = backward(alone, rows(grad_output), document, document_saved);
      expect_near(document_gradients.query, values_of(rows(gradients.query)), 0, 0, "grad_query");
      expect_near(document_gradients.key, values_of(rows(gradients.key)), 0, 0, "grad_key");
      expect_near(document_gradients.value, values_of(rows(gradients.value)), 0, 0, "grad_value");
      begin += length;
    }
  }
}

TEST(AttentionReference, GroupedQueryEqualsRepeatedKeyValues) {
  // Six query heads in two groups against six key/value heads holding copies of the groups.
  for (const Problem& grouped :
       mask_variants(Problem{.document_lengths = {2, 5}, .heads = 6, .head_groups = 2, .head_size = 4})) {
    SCOPED_TRACE(describe(grouped));
    Problem multi_head = grouped;
    multi_head.head_groups = grouped.heads;
    const Inputs inputs = random_inputs(grouped, DType::float64, 31);
    const auto repeat = [&](const Tensor& tensor) {
      return make_tensor(repeat_key_value(values_of(tensor), grouped.tokens(), grouped.head_groups, grouped.heads,
                                          grouped.head_size),
                         multi_head.key_shape(), DType::float64);
    };
    const Inputs repeated{inputs.query, repeat(inputs.key), repeat(inputs.value)};
    const Forward grouped_saved = forward(grouped, inputs.query, inputs.key, inputs.value, DType::float64);
    const Forward multi_head_saved = forward(multi_head, repeated.query, repeated.key, repeated.value, DType::float64);
    expect_near(grouped_saved.output, values_of(multi_head_saved.output), 0, 0, "output");
    expect_near(grouped_saved.logsumexp, values_of(multi_head_saved.logsumexp), 0, 0, "logsumexp");

    // Backward: dQ is the same; dK and dV of a group are the sums over the heads that share it.
    const Tensor grad_output = random_tensor(grouped.query_shape(), DType::float64, 34);
    const Gradients grouped_gradients = backward(grouped, grad_output, inputs, grouped_saved);
    const Gradients multi_head_gradients = backward(multi_head, grad_output, repeated, multi_head_saved);
    expect_near(grouped_gradients.query, values_of(multi_head_gradients.query), 1e-14, 1e-13, "grad_query");
    const auto sum_over_group = [&](const Tensor& per_head) {
      const std::vector<double> values = values_of(per_head);
      std::vector<double> sums(size_t(grouped.key_shape().numel()), 0.0);
      const int64_t per_group = grouped.heads / grouped.head_groups;
      for (int64_t token = 0; token < grouped.tokens(); ++token)
        for (int64_t head = 0; head < grouped.heads; ++head)
          for (int64_t channel = 0; channel < grouped.head_size; ++channel)
            sums[size_t((token * grouped.head_groups + head / per_group) * grouped.head_size + channel)] +=
                values[size_t((token * grouped.heads + head) * grouped.head_size + channel)];
      return sums;
    };
    expect_near(grouped_gradients.key, sum_over_group(multi_head_gradients.key), 1e-14, 1e-13, "grad_key");
    expect_near(grouped_gradients.value, sum_over_group(multi_head_gradients.value), 1e-14, 1e-13, "grad_value");
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Backward

TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  // Documents of 1, 4 and 3 tokens, 4 heads in 2 groups, head_size 8. Loss = sum(output * W), so grad_output = W;
  // the finite differences are of the dense implementation, not of the kernel.
  for (const Problem& problem : mask_variants(Problem{.document_lengths = {1, 4, 3}})) {
    SCOPED_TRACE(describe(problem));
    const Inputs inputs = random_inputs(problem, DType::float64, 41);
    const Tensor weights = random_tensor(problem.query_shape(), DType::float64, 44);
    const std::vector<double> weight_values = values_of(weights);
    const auto loss = [&] {
      return dot(dense_grouped_attention(problem, inputs.query, inputs.key, inputs.value).output, weight_values);
    };
    const Forward saved = forward(problem, inputs.query, inputs.key, inputs.value, DType::float64);
    const Gradients gradients = backward(problem, weights, inputs, saved);
    expect_near(gradients.query, finite_difference_gradient(inputs.query, loss), 1e-8, 1e-7, "grad_query");
    expect_near(gradients.key, finite_difference_gradient(inputs.key, loss), 1e-8, 1e-7, "grad_key");
    expect_near(gradients.value, finite_difference_gradient(inputs.value, loss), 1e-8, 1e-7, "grad_value");
  }
}

TEST(AttentionReference, BackwardWithRotaryTablesGivesTheGradientsBeforeTheRotation) {
  // Loss = sum(attention(rotate(q), rotate(k), v) * W) as a function of the unrotated q and k, over the whole head and
  // over half of it (partial rotary); the backward gets the rotated q and k and the tables.
  const Problem problem{.document_lengths = {1, 4, 3}};
  for (const int64_t half : {problem.head_size / 2, problem.head_size / 4}) {
    SCOPED_TRACE(fmt::format("rotary_dims={}", 2 * half));
    const Inputs inputs = random_inputs(problem, DType::float64, 61);
    const Tensor weights = random_tensor(problem.query_shape(), DType::float64, 64);
    const auto [cos, sin] = random_rotary_tables(problem.tokens(), half, DType::float32, 65, 1.1);
    // The forward rotation, by the CPU reference rotary_apply (kernels/rotary_test.cpp checks it by hand), on a copy.
    const auto rotate = [&](const Tensor& x) {
      Tensor result = make_tensor(values_of(x), x.shape(), DType::float64);
      run_reference<RotaryApply>({.tensor = result, .cos = cos, .sin = sin, .inverse = false});
      return result;
    };
    const auto loss = [&] {
      return dot(dense_grouped_attention(problem, rotate(inputs.query), rotate(inputs.key), inputs.value).output,
                 values_of(weights));
    };
    const Inputs rotated_inputs{rotate(inputs.query), rotate(inputs.key), inputs.value};
    const Forward saved =
        forward(problem, rotated_inputs.query, rotated_inputs.key, rotated_inputs.value, DType::float64);
    const Gradients gradients = backward(problem, weights, rotated_inputs, saved, &cos, &sin);
    expect_near(gradients.query, finite_difference_gradient(inputs.query, loss), 1e-8, 1e-7, "grad_query");
    expect_near(gradients.key, finite_difference_gradient(inputs.key, loss), 1e-8, 1e-7, "grad_key");
    expect_near(gradients.value, finite_difference_gradient(inputs.value, loss), 1e-8, 1e-7, "grad_value");
  }
}

TEST(AttentionReference, BackwardRefusesBadRotaryTables) {
  const Problem problem{.document_lengths = {3}};
  const Inputs inputs = random_inputs(problem, DType::float32, 71);
  const Forward saved = forward(problem, inputs.query, inputs.key, inputs.value);
  const Tensor grad_output = random_tensor(problem.query_shape(), DType::float32, 73);
  const int64_t tokens = problem.tokens(), half = problem.head_size / 2;
  const Tensor table = random_tensor(Shape{tokens, half}, DType::float32, 72);
  const Tensor narrow = random_tensor(Shape{tokens, half / 2}, DType::float32, 74);
  const Tensor float64_table = random_tensor(Shape{tokens, half}, DType::float64, 75);
  const Tensor short_table = random_tensor(Shape{tokens - 1, half}, DType::float32, 76);
  const Tensor wide_table = random_tensor(Shape{tokens, half + 1}, DType::float32, 77);
  const auto run = [&](const Tensor* cos, const Tensor* sin) { backward(problem, grad_output, inputs, saved, cos, sin); };
  expect_error([&] { run(&table, nullptr); }, "only rotary_cos is given");
  expect_error([&] { run(nullptr, &table); }, "only rotary_sin is given");
  expect_error([&] { run(&float64_table, &table); }, "rotary_cos has dtype float64, expected float32");
  expect_error([&] { run(&table, &short_table); }, "rotary_sin has shape (2, 4), expected (key_tokens, rotary_dims / 2)");
  expect_error([&] { run(&wide_table, &wide_table); }, "rotary_cos has shape (3, 5)");
  expect_error([&] { run(&table, &narrow); }, "rotary_cos has shape (3, 4), rotary_sin (3, 2)");
}

TEST(AttentionReference, BackwardGradientsAreNotTrivial) {
  // Guards the finite-difference test against a degenerate setup: the gradients it compares are far from zero.
  Problem problem{.document_lengths = {1, 4, 3}};
  const Inputs inputs = random_inputs(problem, DType::float64, 41);
  const Forward saved = forward(problem, inputs.query, inputs.key, inputs.value, DType::float64);
  const Tensor grad_output = random_tensor(problem.query_shape(), DType::float64, 44);
  const Gradients gradients = backward(problem, grad_output, inputs, saved);
  for (const Tensor* gradient : {&gradients.query, &gradients.key, &gradients.value}) {
    double largest = 0;
    for (double value : values_of(*gradient)) largest = std::max(largest, std::abs(value));
    EXPECT_GT(largest, 0.1);
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// A query range inside a longer key range

// Rows [begin, end) of a (tokens, ...) tensor, as a contiguous copy.
Tensor rows(const Tensor& tensor, int64_t begin, int64_t end) {
  const Tensor view = tensor.slice(0, begin, end);
  return make_tensor(values_of(view), view.shape(), tensor.dtype());
}

TEST(AttentionReference, QueryRangeAgainstLongerKeysEqualsRowsOfTheWholeAttention) {
  // A 12-token sequence of documents of 3, 5 and 4 tokens (two cross the piece boundaries at 4 and 8) cut into pieces
  // of 4 queries. Each piece attends to the keys of the pieces up to its own (micro_batch_splits) or to all of them
  // (sequence_data_parallel; the only choice without causality): its output and logsumexp are its rows of the whole
  // attention, its grad_query its rows, and its key / value gradients those of the whole attention when only its
  // rows get an output gradient. With rotary tables for the keys' rows.
  const Problem base{.document_lengths = {3, 5, 4}};
  const int64_t tokens = base.tokens(), piece = 4, half = base.head_size / 2;
  const auto [cos, sin] = random_rotary_tables(tokens, half, DType::float32, 95, 1.1);
  for (const Problem& problem : mask_variants(base)) {
    const Inputs inputs = random_inputs(problem, DType::float64, 91);
    const Forward whole = forward(problem, inputs.query, inputs.key, inputs.value, DType::float64);
    const Tensor cu_seqlens = problem.cu_seqlens();
    for (int64_t begin = 0; begin < tokens; begin += piece) {
      for (const int64_t key_tokens : {begin + piece, tokens}) {
        if (!problem.causal && key_tokens < tokens) continue;  // later keys are visible: they must all be there
        SCOPED_TRACE(fmt::format("{} queries [{}, {}) keys [0, {})", describe(problem), begin, begin + piece,
                                 key_tokens));
        // Keys beyond the last query are never seen causally: cu_seqlens cut there.
        std::vector<double> offsets{0};
        int64_t covered = 0;
        for (int64_t length : problem.document_lengths) {
          covered = std::min(covered + length, key_tokens);
          if (covered > int64_t(offsets.back())) offsets.push_back(double(covered));
        }
        const Tensor piece_cu_seqlens = make_tensor(offsets, Shape{int64_t(offsets.size())}, DType::int32);
        const Tensor query = rows(inputs.query, begin, begin + piece), key = rows(inputs.key, 0, key_tokens),
                     value = rows(inputs.value, 0, key_tokens);
        Tensor output = Tensor::empty(query.shape(), DType::float64);
        Tensor logsumexp = Tensor::empty(Shape{problem.heads, piece}, DType::float64);
        attention_forward({.query = query,
                           .key = key,
                           .value = value,
                           .cu_seqlens = piece_cu_seqlens,
                           .max_seqlen = problem.longest(),
                           .output = output,
                           .logsumexp = logsumexp,
                           .softmax_scale = problem.softmax_scale,
                           .causal = problem.causal,
                           .window_size = problem.window,
                           .query_offset = begin});
        expect_near(output, values_of(whole.output.slice(0, begin, begin + piece)), 1e-12, 1e-12, "output");
        expect_near(logsumexp, values_of(whole.logsumexp.slice(1, begin, begin + piece)), 1e-12, 1e-12, "logsumexp");

        // The output gradient of the piece's rows only, in the whole attention.
        const Tensor grad_output = random_tensor(query.shape(), DType::float64, 93 + uint64_t(begin));
        std::vector<double> whole_grad_output(size_t(problem.query_shape().numel()), 0.0);
        const std::vector<double> piece_grad_output = values_of(grad_output);
        std::copy(piece_grad_output.begin(), piece_grad_output.end(),
                  whole_grad_output.begin() + begin * problem.heads * problem.head_size);
        const Gradients expected = backward(problem, make_tensor(whole_grad_output, problem.query_shape(),
                                                                 DType::float64),
                                            inputs, whole, &cos, &sin);
        Tensor grad_query = Tensor::empty(query.shape(), DType::float64);
        Tensor grad_key = Tensor::empty(key.shape(), DType::float64);
        Tensor grad_value = Tensor::empty(key.shape(), DType::float64);
        const Tensor key_cos = cos.slice(0, 0, key_tokens), key_sin = sin.slice(0, 0, key_tokens);
        attention_backward({.grad_output = grad_output,
                            .query = query,
                            .key = key,
                            .value = value,
                            .output = output,
                            .logsumexp = logsumexp,
                            .cu_seqlens = piece_cu_seqlens,
                            .max_seqlen = problem.longest(),
                            .grad_query = grad_query,
                            .grad_key = grad_key,
                            .grad_value = grad_value,
                            .softmax_scale = problem.softmax_scale,
                            .causal = problem.causal,
                            .window_size = problem.window,
                            .query_offset = begin,
                            .rotary_cos = &key_cos,
                            .rotary_sin = &key_sin});
        expect_near(grad_query, values_of(expected.query.slice(0, begin, begin + piece)), 1e-12, 1e-12,
                    "grad_query");
        expect_near(grad_key, values_of(expected.key.slice(0, 0, key_tokens)), 1e-12, 1e-12, "grad_key");
        expect_near(grad_value, values_of(expected.value.slice(0, 0, key_tokens)), 1e-12, 1e-12, "grad_value");
      }
    }
  }
}

TEST(AttentionReference, QueryRangeOutsideTheKeysIsRefused) {
  const Problem problem{.document_lengths = {8}};
  const Inputs inputs = random_inputs(problem, DType::float32, 97);
  const Tensor query = inputs.query.slice(0, 0, 4);
  Tensor output = Tensor::empty(query.shape(), DType::float32);
  Tensor logsumexp = Tensor::empty(Shape{problem.heads, 4}, DType::float32);
  const Tensor cu_seqlens = problem.cu_seqlens();
  expect_error(
      [&] {
        attention_forward({.query = query,
                           .key = inputs.key,
                           .value = inputs.value,
                           .cu_seqlens = cu_seqlens,
                           .max_seqlen = 8,
                           .output = output,
                           .logsumexp = logsumexp,
                           .query_offset = 5});
      },
      "query rows [5, 9) (query_offset 5, query of shape (4, 4, 8)) lie outside the 8 key rows");
}

// ---------------------------------------------------------------------------------------------------------------------
// Precision, layouts

TEST(AttentionReference, LowPrecisionMatchesFloat64) {
  // 16-bit and fp32 inputs against fp64 on the same (rounded) values: forward against the dense implementation,
  // backward against the fp64 kernel (checked by finite differences above).
  const Problem problem{.document_lengths = {1, 4, 3}, .window = 3};
  for (DType dtype : kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Inputs inputs = random_inputs(problem, dtype, 51);
    const Inputs exact{converted(inputs.query, DType::float64), converted(inputs.key, DType::float64),
                       converted(inputs.value, DType::float64)};
    const Forward saved = forward(problem, inputs.query, inputs.key, inputs.value);
    const DenseResult expected = dense_grouped_attention(problem, exact.query, exact.key, exact.value);
    const double tolerance = dtype_tolerance(dtype);
    expect_near(saved.output, expected.output, tolerance, tolerance, "output");
    expect_near(saved.logsumexp, expected.logsumexp, 1e-5, 1e-5, "logsumexp");  // fp32 math whatever the inputs

    const Tensor grad_output = random_tensor(problem.query_shape(), dtype, 54);
    const Gradients gradients = backward(problem, grad_output, inputs, saved);
    const Forward exact_saved = forward(problem, exact.query, exact.key, exact.value, DType::float64);
    const Gradients exact_gradients =
        backward(problem, converted(grad_output, DType::float64), exact, exact_saved);
    // Inputs, saved output and gradients are all rounded to the dtype; measured errors stay under a quarter of this.
    expect_near(gradients.query, values_of(exact_gradients.query), tolerance, tolerance, "grad_query");
    expect_near(gradients.key, values_of(exact_gradients.key), tolerance, tolerance, "grad_key");
    expect_near(gradients.value, values_of(exact_gradients.value), tolerance, tolerance, "grad_value");
  }
}

TEST(AttentionReference, StridedInputsEqualContiguous) {
  // Query, key and value as views into fused buffers (extra heads between rows), as a fused QKV projection makes.
  const Problem problem{.document_lengths = {3, 4}, .causal = false, .window = 2};
  const Tensor fused_query = random_tensor(Shape{problem.tokens(), problem.heads + 3, problem.head_size},
                                           DType::float32, 61);
  const Tensor fused_key_value = random_tensor(Shape{problem.tokens(), 2 * problem.head_groups + 1, problem.head_size},
                                               DType::float32, 62);
  const Inputs strided{fused_query.slice(1, 2, 2 + problem.heads), fused_key_value.slice(1, 0, problem.head_groups),
                       fused_key_value.slice(1, problem.head_groups, 2 * problem.head_groups)};
  ASSERT_FALSE(strided.query.is_contiguous());
  ASSERT_FALSE(strided.key.is_contiguous());
  const Inputs contiguous{converted(strided.query, DType::float32), converted(strided.key, DType::float32),
                          converted(strided.value, DType::float32)};
  const Forward strided_saved = forward(problem, strided.query, strided.key, strided.value);
  const Forward contiguous_saved = forward(problem, contiguous.query, contiguous.key, contiguous.value);
  expect_near(strided_saved.output, values_of(contiguous_saved.output), 0, 0, "output");

  // Gradients written into strided views of fused buffers too.
  const Tensor grad_output = random_tensor(problem.query_shape(), DType::float32, 63);
  const Gradients contiguous_gradients = backward(problem, grad_output, contiguous, contiguous_saved);
  const Tensor fused_grad = filled(Shape{problem.tokens(), 3 * problem.heads, problem.head_size}, DType::float32, 7);
  Tensor grad_query = fused_grad.slice(1, 0, problem.heads);
  Tensor grad_key = fused_grad.slice(1, problem.heads, problem.heads + problem.head_groups);
  Tensor grad_value = fused_grad.slice(1, 2 * problem.heads, 2 * problem.heads + problem.head_groups);
  const Tensor cu_seqlens = problem.cu_seqlens();
  attention_backward({.grad_output = grad_output,
                      .query = strided.query,
                      .key = strided.key,
                      .value = strided.value,
                      .output = strided_saved.output,
                      .logsumexp = strided_saved.logsumexp,
                      .cu_seqlens = cu_seqlens,
                      .max_seqlen = problem.longest(),
                      .grad_query = grad_query,
                      .grad_key = grad_key,
                      .grad_value = grad_value,
                      .softmax_scale = problem.softmax_scale,
                      .causal = problem.causal,
                      .window_size = problem.window});
  expect_near(grad_query, values_of(contiguous_gradients.query), 0, 0, "grad_query");
  expect_near(grad_key, values_of(contiguous_gradients.key), 0, 0, "grad_key");
  expect_near(grad_value, values_of(contiguous_gradients.value), 0, 0, "grad_value");
  // Heads between the views are left alone.
  EXPECT_EQ(fused_grad.slice(1, problem.heads + problem.head_groups, 2 * problem.heads).item_as_double(
                std::vector<int64_t>{0, 0, 0}),
            7.0);
}

// ---------------------------------------------------------------------------------------------------------------------
// Errors

TEST(AttentionReference, ShapeErrors) {
  const Problem problem{.document_lengths = {1, 4, 3}};
  const Inputs inputs = random_inputs(problem, DType::float32, 71);
  Tensor output = Tensor::empty(problem.query_shape(), DType::float32);
  Tensor logsumexp = Tensor::empty(Shape{problem.heads, problem.tokens()}, DType::float32);
  const Tensor cu_seqlens = problem.cu_seqlens();
  const auto run = [&](const Tensor& key, const Tensor& value, const Tensor& cu, int64_t max_seqlen,
                       std::optional<int64_t> window, const Tensor& lse) {
    Tensor lse_handle = lse;
    attention_forward({.query = inputs.query,
                       .key = key,
                       .value = value,
                       .cu_seqlens = cu,
                       .max_seqlen = max_seqlen,
                       .output = output,
                       .logsumexp = lse_handle,
                       .window_size = window});
  };
  const Tensor flat_key = inputs.key.reshape(Shape{problem.tokens(), problem.head_groups * problem.head_size});
  expect_error([&] { run(flat_key, inputs.value, cu_seqlens, 4, {}, logsumexp); },
               "[attention_forward] key has shape (8, 16), expected (key_tokens, head_groups, head_size)");
  const Tensor three_groups = random_tensor(Shape{problem.tokens(), 3, problem.head_size}, DType::float32, 72);
  expect_error([&] { run(three_groups, three_groups, cu_seqlens, 4, {}, logsumexp); },
               "query has 4 heads, key has 3 head groups");
  expect_error([&] { run(inputs.key, inputs.value.slice(0, 0, 7), cu_seqlens, 4, {}, logsumexp); },
               "value has shape (7, 2, 8), expected (8, 2, 8)");
  expect_error([&] { run(inputs.key, inputs.value, make_tensor({0, 1, 5}, Shape{3}, DType::int32), 4, {}, logsumexp); },
               "cu_seqlens runs from 0 to 5, expected 0 to the number of keys 8");
  expect_error(
      [&] { run(inputs.key, inputs.value, make_tensor({0, 5, 3, 8}, Shape{4}, DType::int32), 5, {}, logsumexp); },
      "cu_seqlens decreases at document 1");
  expect_error([&] { run(inputs.key, inputs.value, cu_seqlens, 3, {}, logsumexp); },
               "max_seqlen is 3, the longest document has 4 tokens");
  expect_error([&] { run(inputs.key, inputs.value, cu_seqlens, 4, 0, logsumexp); },
               "window_size is 0, expected a positive number of tokens");
  expect_error(
      [&] {
        run(inputs.key, inputs.value, cu_seqlens, 4, {},
            Tensor::empty(Shape{problem.tokens(), problem.heads}, DType::float32));
      },
      "logsumexp has shape (8, 4), expected (4, 8)");
}

TEST(AttentionReference, DtypeErrors) {
  const Problem problem{.document_lengths = {2}};
  const Inputs inputs = random_inputs(problem, DType::float32, 81);
  Tensor output = Tensor::empty(problem.query_shape(), DType::float32);
  Tensor logsumexp = Tensor::empty(Shape{problem.heads, problem.tokens()}, DType::float32);
  Tensor bf16_logsumexp = Tensor::empty(Shape{problem.heads, problem.tokens()}, DType::bfloat16);
  const Tensor cu_int64 = make_tensor({0, 2}, Shape{2}, DType::int64);
  const Tensor cu_int32 = problem.cu_seqlens();
  const Tensor bf16_value = converted(inputs.value, DType::bfloat16);
  const auto run = [&](const Tensor& value, const Tensor& cu, Tensor& lse) {
    attention_forward({.query = inputs.query,
                       .key = inputs.key,
                       .value = value,
                       .cu_seqlens = cu,
                       .max_seqlen = 2,
                       .output = output,
                       .logsumexp = lse});
  };
  run(inputs.value, cu_int32, logsumexp);
  expect_error([&] { run(inputs.value, cu_int64, logsumexp); },
               "[attention_forward] cu_seqlens has dtype int64; supported: int32");
  expect_error([&] { run(bf16_value, cu_int32, logsumexp); },
               "[attention_forward] value has dtype bfloat16, query has float32; they must match");
  expect_error([&] { run(inputs.value, cu_int32, bf16_logsumexp); },
               "[attention_forward] logsumexp has dtype bfloat16; supported: float32, float64");
}

}  // namespace
}  // namespace fast_llm::kernels
