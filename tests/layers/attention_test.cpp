// Attention mixer: parameter layout and names, backward against finite differences for MHA / GQA / MQA with rotary
// variants, windows, query/key norms and per-layer biases, packed documents against each document alone, a sequence
// run as consecutive splits (micro_batch_splits: keys carried between them) against the whole sequence, FLOPs, and
// refused settings.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/attention/attention.h"
#include "layer_test_util.h"

namespace fast_llm::layers {
namespace {

using namespace testing;

constexpr int64_t kHidden = 8;

struct AttentionCase {
  std::string name;
  std::string yaml;
};

void PrintTo(const AttentionCase& test_case, std::ostream* stream) { *stream << test_case.yaml; }


std::string case_name(const ::testing::TestParamInfo<AttentionCase>& info) { return info.param.name; }

class AttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionTest, BackwardMatchesFiniteDifferences) {
  AttentionConfig config = load_config<AttentionConfig>(GetParam().yaml);
  Attention attention("mixer", config, kHidden, 1.0);
  bind_parameters(attention, 7);
  BatchData data = make_batch({3, 5, 4}, 10, 8);
  const int64_t tokens = 12;
  Tensor input = random_tensor(Shape{tokens, kHidden}, 9);

  Attention::Saved saved;
  Tensor output = attention.forward(input, data.batch, &saved, {});
  ASSERT_EQ(output.shape(), (Shape{tokens, kHidden}));
  std::vector<double> output_weights = random_values(tokens * kHidden, 10);
  Tensor grad_input = attention.backward(tensor_from(output_weights, output.shape()), saved, {});

  auto objective = [&] { return dot(attention.forward(input, data.batch, nullptr, {}), output_weights); };
  expect_gradient(objective, input, grad_input, "input");
  for (Parameter* parameter : attention.parameters())
    expect_gradient(objective, parameter->weight, parameter->grad, parameter->meta.name);
}

// Documents of a packed micro-batch do not see each other: each one run alone gives the same output and the same
// input gradient, and the parameter gradients of the packed run are the sums over the documents.
TEST_P(AttentionTest, PackedDocumentsEqualEachDocumentAlone) {
  AttentionConfig config = load_config<AttentionConfig>(GetParam().yaml);
  Attention attention("mixer", config, kHidden, 1.0);
  bind_parameters(attention, 17);
  const std::vector<int64_t> lengths{3, 5, 4};
  BatchData packed = make_batch(lengths, 10, 18);
  const int64_t tokens = 12;
  Tensor input = random_tensor(Shape{tokens, kHidden}, 19);
  Tensor grad_output = random_tensor(Shape{tokens, kHidden}, 20);

  Attention::Saved saved;
  auto packed_output = values_of(attention.forward(input, packed.batch, &saved, {}));
  auto packed_grad_input = values_of(attention.backward(grad_output, saved, {}));
  std::vector<std::vector<double>> packed_grads;
  for (Parameter* parameter : attention.parameters()) packed_grads.push_back(values_of(parameter->grad));
  zero_gradients(attention);

  int64_t begin = 0;
  for (int64_t length : lengths) {
    BatchData alone = make_batch({length}, 10, 21);
    Tensor document_input = Tensor::empty(Shape{length, kHidden}, DType::float64);
    document_input.copy_bytes_from(input.slice(0, begin, begin + length));
    Tensor document_grad = Tensor::empty(Shape{length, kHidden}, DType::float64);
    document_grad.copy_bytes_from(grad_output.slice(0, begin, begin + length));
    Attention::Saved document_saved;
    auto output = values_of(attention.forward(document_input, alone.batch, &document_saved, {}));
    auto grad_input = values_of(attention.backward(document_grad, document_saved, {}));
    // Rotary tables are fp32, so relative positions agree to fp32 precision only.
    for (int64_t i = 0; i < length * kHidden; ++i) {
      EXPECT_NEAR(output[size_t(i)], packed_output[size_t(begin * kHidden + i)], 1e-5);
      EXPECT_NEAR(grad_input[size_t(i)], packed_grad_input[size_t(begin * kHidden + i)], 1e-5);
    }
    begin += length;
  }
  auto parameters = attention.parameters();
  for (size_t p = 0; p < parameters.size(); ++p) {
    auto summed = values_of(parameters[p]->grad);
    for (size_t i = 0; i < summed.size(); ++i)
      EXPECT_NEAR(summed[i], packed_grads[p][i], 1e-5) << parameters[p]->meta.name << "[" << i << "]";
  }
}

// Rows [begin, end) of a packed micro-batch of documents `lengths`, as the schedule cuts it: split `split` of
// `splits` (sequence_pieces.h builds the same on the engine's side).
MicroBatch split_of(const MicroBatch& whole, const std::vector<int64_t>& lengths, int split, int splits, int64_t index) {
  const int64_t tokens = whole.num_tokens(), split_tokens = tokens / splits;
  const int64_t begin = split * split_tokens, end = begin + split_tokens;
  // The documents cut to rows [first, last), as (offsets, longest).
  auto documents = [&](int64_t first, int64_t last, std::vector<int64_t>* kept) {
    std::vector<int32_t> offsets{0};
    int64_t document_begin = 0, longest = 0;
    for (int64_t length : lengths) {
      const int64_t from = std::max(document_begin, first), to = std::min(document_begin + length, last);
      if (to > from) {
        offsets.push_back(offsets.back() + int32_t(to - from));
        longest = std::max(longest, to - from);
        if (kept != nullptr) kept->push_back(to - from);
      }
      document_begin += length;
    }
    Tensor cu_seqlens = Tensor::empty(Shape{int64_t(offsets.size())}, DType::int32);
    std::copy(offsets.begin(), offsets.end(), cu_seqlens.data_as<int32_t>());
    return std::pair{cu_seqlens, longest};
  };
  MicroBatch piece{.index = index,
                   .tokens = whole.tokens.slice(0, begin, end),
                   .labels = whole.labels.slice(0, begin, end),
                   .positions = whole.positions.slice(0, begin, end)};
  std::tie(piece.cu_seqlens, piece.max_seqlen) = documents(begin, end, &piece.sequence_lengths);
  SequencePiece where{.sequence = 0,
                      .split = split,
                      .splits = splits,
                      .sequence_tokens = tokens,
                      .split_tokens = split_tokens,
                      .begin = begin};
  std::tie(where.key_cu_seqlens, where.key_max_seqlen) = documents(0, end, &where.key_sequence_lengths);
  piece.sequence_piece = where;
  return piece;
}

// A sequence of documents 3, 5 and 4 (two of them cross the split boundaries) run as 3 or 2 consecutive splits, forward
// in order and backward in reverse, each split attending to the keys of those before it: the outputs, input gradients
// and parameter gradients of the whole sequence (only the order of the sums differs). Attention without causality
// refuses splits (later keys).
TEST_P(AttentionTest, SplitsOfASequenceEqualTheWholeSequence) {
  AttentionConfig config = load_config<AttentionConfig>(GetParam().yaml);
  Attention attention("mixer", config, kHidden, 1.0);
  bind_parameters(attention, 27);
  const std::vector<int64_t> lengths{3, 5, 4};
  BatchData whole = make_batch(lengths, 10, 28);
  const int64_t tokens = 12;
  Tensor input = random_tensor(Shape{tokens, kHidden}, 29);
  Tensor grad_output = random_tensor(Shape{tokens, kHidden}, 30);

  Attention::Saved saved;
  const auto whole_output = values_of(attention.forward(input, whole.batch, &saved, {}));
  const auto whole_grad_input = values_of(attention.backward(grad_output, saved, {}));
  std::vector<std::vector<double>> whole_grads;
  for (Parameter* parameter : attention.parameters()) whole_grads.push_back(values_of(parameter->grad));

  for (const int splits : {3, 2}) {
    SCOPED_TRACE(fmt::format("{} splits", splits));
    zero_gradients(attention);
    const int64_t split_tokens = tokens / splits;
    std::vector<MicroBatch> pieces;
    for (int split = 0; split < splits; ++split) pieces.push_back(split_of(whole.batch, lengths, split, splits, split));
    if (!config.causal) {
      Attention::Saved refused;
      EXPECT_THROW(attention.forward(input.slice(0, 0, split_tokens), pieces[0], &refused, {}), NotSupportedError);
      continue;
    }
    std::vector<Attention::Saved> piece_saved(static_cast<size_t>(splits));
    std::vector<double> output, grad_input(size_t(tokens * kHidden));
    for (int split = 0; split < splits; ++split) {
      const Tensor rows = input.slice(0, split * split_tokens, (split + 1) * split_tokens);
      const auto values = values_of(attention.forward(rows, pieces[size_t(split)], &piece_saved[size_t(split)], {}));
      output.insert(output.end(), values.begin(), values.end());
    }
    for (int split = splits; split-- > 0;) {
      const Tensor rows = grad_output.slice(0, split * split_tokens, (split + 1) * split_tokens);
      const auto values = values_of(attention.backward(rows, std::move(piece_saved[size_t(split)]), {}));
      std::copy(values.begin(), values.end(), grad_input.begin() + split * split_tokens * kHidden);
    }
    ASSERT_EQ(output.size(), whole_output.size());
    for (size_t i = 0; i < output.size(); ++i) {
      EXPECT_NEAR(output[i], whole_output[i], 1e-12) << "output[" << i << "]";
      EXPECT_NEAR(grad_input[i], whole_grad_input[i], 1e-12) << "grad_input[" << i << "]";
    }
    auto parameters = attention.parameters();
    for (size_t p = 0; p < parameters.size(); ++p) {
      auto summed = values_of(parameters[p]->grad);
      for (size_t i = 0; i < summed.size(); ++i)
        EXPECT_NEAR(summed[i], whole_grads[p][i], 1e-12) << parameters[p]->meta.name << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, AttentionTest,
    ::testing::Values(
        AttentionCase{"mha_biases", "{heads: 4, head_groups: 4, head_size: 4, add_linear_biases: true}"},
        AttentionCase{"gqa_default_rotary",
                      "{heads: 4, head_groups: 2, head_size: 4, add_linear_biases: false, "
                      "rotary: {type: default, theta: 100}}"},
        AttentionCase{"mqa_window_llama3_rms_qk_norms",
                      "{heads: 4, head_groups: 1, head_size: 4, add_linear_biases: false, window_size: 2, "
                      "rotary: {type: llama3, theta: 100, scale_factor: 4, original_context_length: 16}, "
                      "query_norm: {type: rms_norm}, key_norm: {type: rms_norm}}"},
        AttentionCase{"gqa_yarn_layer_norm_qk_per_layer_biases",
                      "{heads: 4, head_groups: 2, head_size: 4, add_linear_biases: false, "
                      "query_layer: {bias: {enabled: true}}, dense_layer: {bias: {enabled: true}}, "
                      "rotary: {type: yarn, theta: 100, scale_factor: 4, original_context_length: 16}, "
                      "query_norm: {type: layer_norm}, key_norm: {type: layer_norm}}"},
        AttentionCase{"bidirectional_default_rotary",
                      "{heads: 2, head_groups: 2, head_size: 4, causal: false, rotary: {type: default}}"},
        AttentionCase{"softmax_scale_power_one", "{heads: 2, head_groups: 1, head_size: 4, softmax_scale_power: 1}"}),
    case_name);

TEST(Attention, ParameterLayoutNamesAndSettings) {
  AttentionConfig config = load_config<AttentionConfig>(
      "{heads: 4, head_groups: 2, head_size: 3, add_linear_biases: false, lr_scale: 2, "
      "query_layer: {bias: {enabled: true}, lr_scale: 3}, key_layer: {weight: {initialization: {type: normal, std: "
      "0.5}}}, query_norm: {type: rms_norm}}");
  Attention attention("decoder.1.mixer", config, 10, 0.5);
  auto names = parameter_names(attention);
  EXPECT_EQ(names, (std::vector<std::string>{"decoder.1.mixer.query.weight", "decoder.1.mixer.query.bias",
                                             "decoder.1.mixer.key_value.weight", "decoder.1.mixer.dense.weight",
                                             "decoder.1.mixer.q_norm.weight"}));
  auto parameters = attention.parameters();
  EXPECT_EQ(parameters[0]->meta.shape, (Shape{12, 10}));  // [heads * head_size, hidden]
  EXPECT_EQ(parameters[2]->meta.shape, (Shape{12, 10}));  // [2 * head_groups * head_size, hidden]
  EXPECT_EQ(parameters[3]->meta.shape, (Shape{10, 12}));  // [hidden, heads * head_size]
  EXPECT_EQ(parameters[4]->meta.shape, (Shape{3}));       // per head
  // Weights N(0, hidden^-0.5) unless configured; biases zeros without weight decay; lr scales multiply.
  EXPECT_EQ(parameters[0]->meta.initialization.kind, Initialization::Kind::normal);
  EXPECT_NEAR(parameters[0]->meta.initialization.std, 1.0 / std::sqrt(10.0), 1e-15);
  EXPECT_EQ(parameters[2]->meta.initialization.std, 0.5);
  EXPECT_EQ(parameters[1]->meta.initialization.kind, Initialization::Kind::fill);
  EXPECT_FALSE(parameters[1]->meta.weight_decay);
  EXPECT_TRUE(parameters[0]->meta.weight_decay);
  EXPECT_FALSE(parameters[4]->meta.weight_decay);
  EXPECT_DOUBLE_EQ(parameters[0]->meta.lr_scale, 0.5 * 2 * 3);
  EXPECT_DOUBLE_EQ(parameters[1]->meta.lr_scale, 0.5 * 2 * 3);
  EXPECT_DOUBLE_EQ(parameters[2]->meta.lr_scale, 0.5 * 2);
  EXPECT_DOUBLE_EQ(parameters[4]->meta.lr_scale, 0.5 * 2);
}

TEST(Attention, FlopsCountMatmulsAndAttendedPairs) {
  const std::vector<int64_t> lengths{3, 5, 4};
  EXPECT_EQ(attention_pair_count(lengths, true, std::nullopt), 6 + 15 + 10);
  EXPECT_EQ(attention_pair_count(lengths, true, 2), (1 + 2 + 2) + (1 + 2 + 2 + 2 + 2) + (1 + 2 + 2 + 2));
  EXPECT_EQ(attention_pair_count(lengths, false, std::nullopt), 9 + 25 + 16);
  AttentionConfig config = load_config<AttentionConfig>("{heads: 4, head_groups: 2, head_size: 3}");
  Attention attention("mixer", config, 10, 1.0);
  BatchData data = make_batch(lengths, 10, 1);
  const double matmul_weights = 10.0 * 12 + 10.0 * 12 + 12.0 * 10;
  EXPECT_DOUBLE_EQ(attention.flops(data.batch), 6.0 * 12 * matmul_weights + 12.0 * 4 * 3 * 31);
}

TEST(Attention, RefusesAttentionDropout) {
  AttentionConfig config = load_config<AttentionConfig>("{heads: 2, head_groups: 1, head_size: 4, dropout: 0.1}");
  try {
    Attention attention("mixer", config, 8, 1.0);
    FAIL() << "attention dropout was accepted";
  } catch (const NotSupportedError& error) {
    EXPECT_NE(std::string(error.what()).find("dropout"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace fast_llm::layers
