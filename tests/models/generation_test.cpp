// Generation (models/gpt/generator.h, engine/inference/sampling.h) on small random models on the CPU in fp64:
//   - greedy decoding with the key/value cache gives the tokens of greedy decoding by re-running the whole forward on
//     the growing sequence (no cache), for rotary, sliding-window and absolute position-embedding models;
//   - a batch of prompts of different lengths gives each prompt's completion alone (greedy and sampled);
//   - sampling is reproducible per seed and differs across seeds; top_k = 1 is greedy; EOS stops a sequence only;
//   - the sampler's draws follow the softmax, and top-k / top-p keep only what they should.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "fast_llm/core/random.h"
#include "fast_llm/engine/inference/sampling.h"
#include "fast_llm/models/gpt/generator.h"
#include "fast_llm/models/gpt/model.h"
#include "layers/layer_test_util.h"

namespace fast_llm::models::gpt {
namespace {

using layers::testing::bind_parameters;

constexpr int64_t kVocab = 61;

GPTBaseModelConfig model_config(const std::string& mixer_extra = "", const std::string& embeddings_extra = "") {
  const std::string yaml = "hidden_size: 16\nembeddings: {vocab_size: " + std::to_string(kVocab) + embeddings_extra +
                           "}\nhead: {normalization: {type: rms_norm}}\n" + R"(
decoder:
  num_blocks: 2
  block:
    mixer: {heads: 4, head_groups: 2, head_size: 4, add_linear_biases: false)" +
                           mixer_extra + R"(}
    mlp: {intermediate_size: 24, gated: true, add_linear_biases: false}
    normalization: {type: rms_norm}
)";
  GPTBaseModelConfig config;
  config.load(YAML::Load(yaml), "model.base_model");
  config.validate("model.base_model");
  return config;
}

struct TestModel {
  explicit TestModel(const GPTBaseModelConfig& config, uint64_t seed = 11) : model(config) {
    for (layers::Layer* layer : model.layers()) bind_parameters(*layer, seed++);
  }
  GPTModel model;
};

// Greedy decoding without a cache: the whole forward over prompt + completion so far, for every new token.
std::vector<int64_t> greedy_without_cache(GPTModel& model, std::vector<int64_t> sequence, int64_t new_tokens) {
  std::vector<int64_t> completion;
  for (int64_t step = 0; step < new_tokens; ++step) {
    const int64_t length = int64_t(sequence.size());
    Tensor tokens = Tensor::empty(Shape{length}, DType::int64), positions = Tensor::empty(Shape{length}, DType::int64);
    for (int64_t index = 0; index < length; ++index) {
      tokens.data_as<int64_t>()[index] = sequence[size_t(index)];
      positions.data_as<int64_t>()[index] = index;
    }
    Tensor cu_seqlens = Tensor::empty(Shape{2}, DType::int32);
    cu_seqlens.data_as<int32_t>()[0] = 0;
    cu_seqlens.data_as<int32_t>()[1] = int32_t(length);
    layers::MicroBatch batch{.index = 0, .tokens = tokens, .labels = Tensor(), .positions = positions,
                             .cu_seqlens = cu_seqlens, .max_seqlen = length, .sequence_lengths = {length}};
    layers::LayerContext context{.batch = batch, .device = Device::cpu(), .compute_dtype = DType::float64,
                                 .stream = {}, .training = false};
    Tensor x = model.embeddings().forward(context, Tensor());
    for (int block = 0; block < model.block_count(); ++block) x = model.block(block).forward(context, x);
    const Tensor logits = model.head().logits(x.slice(0, length - 1, length), {});
    const double* row = logits.data_as<double>();
    int64_t best = 0;
    for (int64_t token = 1; token < kVocab; ++token)
      if (row[token] > row[best]) best = token;
    completion.push_back(best);
    sequence.push_back(best);
  }
  return completion;
}

const std::vector<std::vector<int64_t>> kPrompts{{3, 17, 40, 2, 9}, {44}, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}};

TEST(Generation, CachedGreedyEqualsGreedyOverTheWholeSequence) {
  for (const auto& [name, config] : std::vector<std::pair<std::string, GPTBaseModelConfig>>{
           {"rotary", model_config(", rotary: {type: default, theta: 100}")},
           {"rotary+window", model_config(", rotary: {type: default, theta: 100}, window_size: 4")},
           {"position embeddings",
            model_config("", ", position_embeddings: {enabled: true}, num_position_embeddings: 40")}}) {
    TestModel test(config);
    Generator generator(test.model, Device::cpu(), DType::float64);
    const GenerationSettings settings{.max_new_tokens = 12, .eos_token_ids = {}, .sampling = {}};
    const auto completions = generator.generate(kPrompts, settings);
    for (size_t index = 0; index < kPrompts.size(); ++index) {
      const std::vector<int64_t> expected = greedy_without_cache(test.model, kPrompts[index], 12);
      EXPECT_EQ(completions[index], expected) << name << ", prompt " << index;
      // The tokens differ in more than the first (the test would not notice a cache that is never read otherwise).
      EXPECT_GT(std::set<int64_t>(expected.begin(), expected.end()).size(), 2u) << name;
    }
  }
}

TEST(Generation, BatchedPromptsEqualEachPromptAlone) {
  TestModel test(model_config(", rotary: {type: default, theta: 100}"));
  Generator generator(test.model, Device::cpu(), DType::float64);
  for (double temperature : {0.0, 1.0}) {
    const GenerationSettings settings{.max_new_tokens = 9, .eos_token_ids = {},
                                      .sampling = {.temperature = temperature, .top_k = 0, .top_p = 0.95, .seed = 5}};
    const auto together = generator.generate(kPrompts, settings);
    for (size_t index = 0; index < kPrompts.size(); ++index) {
      const auto alone = generator.generate({kPrompts[index]}, settings, /*first_index=*/index);
      EXPECT_EQ(together[index], alone[0]) << "temperature " << temperature << ", prompt " << index;
    }
  }
}

TEST(Generation, SamplingIsReproduciblePerSeedAndTopKOneIsGreedy) {
  TestModel test(model_config(", rotary: {type: default, theta: 100}"));
  Generator generator(test.model, Device::cpu(), DType::float64);
  auto run = [&](double temperature, int64_t top_k, uint64_t seed) {
    return generator.generate(kPrompts, {.max_new_tokens = 16, .eos_token_ids = {},
                                         .sampling = {.temperature = temperature, .top_k = top_k, .seed = seed}});
  };
  EXPECT_EQ(run(1.0, 0, 1), run(1.0, 0, 1));
  EXPECT_NE(run(1.0, 0, 1), run(1.0, 0, 2));
  EXPECT_NE(run(1.0, 0, 1), run(0.0, 0, 1));
  EXPECT_EQ(run(1.0, 1, 1), run(0.0, 0, 1));
  EXPECT_EQ(run(0.7, 1, 9), run(0.0, 0, 3));
}

TEST(Generation, EndOfSequenceStopsOnlyItsSequence) {
  TestModel test(model_config(", rotary: {type: default, theta: 100}"));
  Generator generator(test.model, Device::cpu(), DType::float64);
  const GenerationSettings free{.max_new_tokens = 10, .eos_token_ids = {}, .sampling = {}};
  const auto unstopped = generator.generate(kPrompts, free);
  // The EOS: the first token of the first completion, after its first, that is new in it.
  size_t stop = 1;
  while (std::find(unstopped[0].begin(), unstopped[0].begin() + stop, unstopped[0][stop]) != unstopped[0].begin() + stop)
    ++stop;
  const int64_t eos = unstopped[0][stop];
  GenerationSettings settings = free;
  settings.eos_token_ids = {kVocab - 1, eos};
  std::vector<std::vector<int64_t>> streamed(kPrompts.size());
  const auto stopped =
      generator.generate(kPrompts, settings, 0, [&](size_t index, int64_t token) { streamed[index].push_back(token); });
  for (size_t index = 0; index < kPrompts.size(); ++index) {
    const auto& full = unstopped[index];
    const auto end = std::find(full.begin(), full.end(), eos);
    const std::vector<int64_t> expected(full.begin(), end == full.end() ? end : end + 1);
    EXPECT_EQ(stopped[index], expected) << "prompt " << index;
    EXPECT_EQ(streamed[index], expected) << "prompt " << index << " (streamed)";
  }
  EXPECT_EQ(stopped[0].size(), stop + 1);
  EXPECT_GT(stopped[1].size(), 1u) << "the test needs another sequence that goes on";
}

TEST(Generation, PositionsBeyondThePositionEmbeddingsAreAnError) {
  TestModel test(model_config("", ", position_embeddings: {enabled: true}, num_position_embeddings: 12"));
  Generator generator(test.model, Device::cpu(), DType::float64);
  EXPECT_NO_THROW(generator.generate({{1, 2}}, {.max_new_tokens = 10, .eos_token_ids = {}, .sampling = {}}));
  try {
    generator.generate({{1, 2, 3}}, {.max_new_tokens = 10, .eos_token_ids = {}, .sampling = {}});
    ADD_FAILURE() << "13 positions were accepted for 12 position embeddings";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("need 13 positions; the model's position embeddings have 12"),
              std::string::npos)
        << error.what();
  }
}

TEST(Generation, BadPromptsAreErrors) {
  TestModel test(model_config());
  Generator generator(test.model, Device::cpu(), DType::float64);
  const GenerationSettings settings{.max_new_tokens = 2, .eos_token_ids = {}, .sampling = {}};
  EXPECT_THROW(generator.generate({{1, 2}, {}}, settings), Error);
  try {
    generator.generate({{1, kVocab}}, settings, 4);
    ADD_FAILURE() << "a token outside the vocabulary was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("prompt 4 has token 61, outside the model's vocabulary of 61"),
              std::string::npos)
        << error.what();
  }
}

// The sampler alone, on fixed logits.
TEST(Sampling, DrawsFollowTheSoftmaxAndFiltersKeepWhatTheyShould) {
  const std::vector<float> logits{1.0f, 3.0f, 0.0f, 2.5f, -1.0f, 2.0f};
  std::vector<double> probabilities;
  double total = 0;
  for (float logit : logits) total += std::exp(double(logit) / 2.0);
  for (float logit : logits) probabilities.push_back(std::exp(double(logit) / 2.0) / total);
  std::map<int64_t, int> counts, top_k_counts, top_p_counts;
  const int draws = 40000;
  for (int step = 0; step < draws; ++step) {
    ++counts[engine::sample_token(logits, {.temperature = 2.0, .seed = 3}, 0, uint64_t(step))];
    ++top_k_counts[engine::sample_token(logits, {.temperature = 2.0, .top_k = 2, .seed = 3}, 1, uint64_t(step))];
    // Probabilities (temperature 1): 0.48, 0.29, 0.18 for tokens 1, 3, 5: top_p 0.7 keeps 1 and 3.
    ++top_p_counts[engine::sample_token(logits, {.temperature = 1.0, .top_p = 0.7, .seed = 3}, 2, uint64_t(step))];
  }
  for (size_t token = 0; token < logits.size(); ++token)
    EXPECT_NEAR(counts[int64_t(token)] / double(draws), probabilities[token], 0.01) << "token " << token;
  EXPECT_EQ(top_k_counts.size(), 2u);
  EXPECT_NEAR(top_k_counts[1] / double(draws), 1.0 / (1.0 + std::exp(-0.25)), 0.01);
  EXPECT_EQ((std::set<int64_t>{top_p_counts.begin()->first, std::next(top_p_counts.begin())->first}),
            (std::set<int64_t>{1, 3}));
  EXPECT_EQ(top_p_counts.size(), 2u);
  // Greedy: the first largest; a softcap does not change it.
  EXPECT_EQ(engine::sample_token(logits, {}, 0, 0), 1);
  EXPECT_EQ(engine::sample_token(std::vector<float>{2.0f, 5.0f, 5.0f}, {.softcap = 3.0}, 0, 0), 1);
  // Every logit -inf but one: that one, whatever the draw.
  const std::vector<float> one{-INFINITY, -INFINITY, 0.0f};
  for (uint64_t step = 0; step < 100; ++step) EXPECT_EQ(engine::sample_token(one, {.temperature = 1.0}, 0, step), 2);
}

// Top-p and top-k on a vocabulary larger than the sampler's first sorted piece (64): every draw is in the set a plain
// full sort gives, and the draws cover it.
TEST(Sampling, NucleusOfALargeVocabularyIsTheSortedPrefix) {
  std::vector<float> logits(3000);
  for (size_t index = 0; index < logits.size(); ++index)
    logits[index] = float(fast_llm::random_normal(77, index));
  for (const auto& [top_k, top_p] : std::vector<std::pair<int64_t, double>>{{0, 0.9}, {300, 0.95}, {150, 1.0}}) {
    std::vector<size_t> order(logits.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
    const size_t candidates = top_k > 0 ? size_t(top_k) : logits.size();
    double total = 0;
    for (size_t rank = 0; rank < candidates; ++rank) total += std::exp(double(logits[order[rank]] - logits[order[0]]));
    std::set<int64_t> nucleus;
    double cumulative = 0;
    for (size_t rank = 0; rank < candidates && (rank == 0 || cumulative < top_p * total); ++rank) {
      cumulative += std::exp(double(logits[order[rank]] - logits[order[0]]));
      nucleus.insert(int64_t(order[rank]));
    }
    ASSERT_GT(nucleus.size(), 64u) << "the case must need more than the first sorted piece";
    std::set<int64_t> drawn;
    for (uint64_t step = 0; step < 2000; ++step)
      drawn.insert(engine::sample_token(logits, {.temperature = 1.0, .top_k = top_k, .top_p = top_p, .seed = 2}, 0,
                                        step));
    for (int64_t token : drawn) EXPECT_TRUE(nucleus.contains(token)) << "token " << token << " is outside the nucleus";
    EXPECT_GT(drawn.size(), nucleus.size() / 4) << "top_k " << top_k << ", top_p " << top_p;
  }
}

}  // namespace
}  // namespace fast_llm::models::gpt
