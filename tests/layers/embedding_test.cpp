// Language-model embeddings: names, forward against the lookup formula (with position embeddings and a scale),
// backward against finite differences (with and without dropout).
#include <gtest/gtest.h>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/language_model/embedding.h"
#include "layer_test_util.h"

namespace fast_llm::layers {
namespace {

using namespace testing;

constexpr int64_t kHidden = 4;
constexpr int64_t kVocab = 7;

TEST(Embedding, NamesAndForwardFormula) {
  auto config = load_config<LanguageModelEmbeddingsConfig>(
      "{vocab_size: 7, num_position_embeddings: 9, position_embeddings: {enabled: true}, embedding_scale: 1.5}");
  LanguageModelEmbedding embeddings("embeddings", config, kHidden, 1.0);
  EXPECT_EQ(parameter_names(embeddings), (std::vector<std::string>{"embeddings.word_embeddings_weight",
                                                                   "embeddings.position_embeddings_weight"}));
  EXPECT_EQ(embeddings.word_embeddings().meta.shape, (Shape{kVocab, kHidden}));
  EXPECT_EQ(embeddings.position_embeddings()->meta.shape, (Shape{9, kHidden}));
  EXPECT_NEAR(embeddings.word_embeddings().meta.initialization.std, 0.5, 1e-15);
  bind_parameters(embeddings, 1);
  BatchData data = make_batch({4, 5}, kVocab, 2);
  LayerContext context = make_context(data.batch, false);
  auto output = values_of(embeddings.forward(context, Tensor()));
  auto word = values_of(embeddings.word_embeddings().weight);
  auto position = values_of(embeddings.position_embeddings()->weight);
  const std::vector<int64_t> positions{0, 1, 2, 3, 0, 1, 2, 3, 4};
  for (size_t t = 0; t < 9; ++t)
    for (int64_t h = 0; h < kHidden; ++h)
      EXPECT_NEAR(output[t * kHidden + size_t(h)],
                  1.5 * (word[size_t(data.tokens[t] * kHidden + h)] + position[size_t(positions[t] * kHidden + h)]),
                  1e-14);
}

class EmbeddingTest : public ::testing::TestWithParam<double> {};

TEST_P(EmbeddingTest, BackwardMatchesFiniteDifferences) {
  const double dropout = GetParam();
  auto config = load_config<LanguageModelEmbeddingsConfig>(
      "{vocab_size: 7, num_position_embeddings: 9, position_embeddings: {enabled: true}, embedding_scale: 2.0, "
      "dropout: " +
      std::to_string(dropout) + "}");
  LanguageModelEmbedding embeddings("embeddings", config, kHidden, 1.0);
  bind_parameters(embeddings, 3);
  BatchData data = make_batch({4, 5}, kVocab, 4, /*index=*/2);
  std::vector<double> output_weights = random_values(9 * kHidden, 5);
  LayerContext training = make_context(data.batch, true, nullptr, 1.0, /*dropout_seed=*/7);
  Tensor output = embeddings.forward(training, Tensor());
  Tensor grad_input = embeddings.backward(training, tensor_from(output_weights, output.shape()));
  EXPECT_FALSE(grad_input.defined());
  auto objective = [&] {
    LayerContext context = make_context(data.batch, true, nullptr, 1.0, 7);
    return dot(embeddings.forward(context, Tensor()), output_weights);
  };
  if (dropout > 0) {
    LayerContext evaluation = make_context(data.batch, false);
    EXPECT_GT(std::abs(dot(embeddings.forward(evaluation, Tensor()), output_weights) - objective()), 1e-6);
  }
  expect_gradient(objective, embeddings.word_embeddings().weight, embeddings.word_embeddings().grad, "word");
  expect_gradient(objective, embeddings.position_embeddings()->weight, embeddings.position_embeddings()->grad,
                  "position");
}

INSTANTIATE_TEST_SUITE_P(Dropout, EmbeddingTest, ::testing::Values(0.0, 0.3));

TEST(Embedding, NoPositionEmbeddingsByDefault) {
  auto config = load_config<LanguageModelEmbeddingsConfig>("{vocab_size: 7}");
  LanguageModelEmbedding embeddings("embeddings", config, kHidden, 1.0);
  EXPECT_EQ(parameter_names(embeddings), (std::vector<std::string>{"embeddings.word_embeddings_weight"}));
}

}  // namespace
}  // namespace fast_llm::layers
