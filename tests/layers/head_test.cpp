// Language-model head: names, tied weights, the loss against a direct computation, backward of the (normalised) loss
// against finite differences with splits / z-loss / softcap / logits scales / tied weights / the policy-gradient losses
// (alone and beside the label loss), splits that do not change anything, loss names (the policy metrics), the policy
// advantage extremes over chunks and micro-batches, refused losses; the head on the loss rows only (prompt masking,
// dpo, distillation) against the head on every row.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "fast_llm/core/error.h"
#include "fast_llm/layers/language_model/embedding.h"
#include "fast_llm/layers/language_model/head.h"
#include "fast_llm/layers/language_model/loss_rows.h"
#include "layer_test_util.h"

namespace fast_llm::layers {
namespace {

using namespace testing;

constexpr int64_t kHidden = 6;
constexpr int64_t kVocab = 11;

LanguageModelHeadConfig head_config(const std::string& yaml) { return load_config<LanguageModelHeadConfig>(yaml); }

double loss_value(const LossSums& losses, const std::string& name) {
  auto found = losses.all().find(name);
  if (found == losses.all().end()) {
    ADD_FAILURE() << "no loss named " << name;
    return 0.0;
  }
  return found->second.item();
}

// One training forward and backward of `head`, and the objective its gradients are of: the head's total loss times
// `scale` (the loss-gradient scale, 1 / labels in the step), recomputed by a forward without training. Checks that
// objective against the training forward's loss, and the gradients of the input and of every parameter against its
// finite differences.
struct HeadGradients {
  Tensor input;
  std::function<double()> objective;
};

HeadGradients expect_head_gradients(LanguageModelHead& head, const MicroBatch& batch, const Tensor& input,
                                    double scale) {
  LossSums losses;
  LayerContext training = make_context(batch, true, &losses, scale);
  head.forward(training, input);
  HeadGradients result{.input = head.backward(training, Tensor()), .objective = [&head, &batch, input, scale] {
                         LossSums sums;
                         LayerContext context = make_context(batch, false, &sums, scale);
                         head.forward(context, input);
                         return loss_value(sums, "lm_head_loss") * scale;
                       }};
  EXPECT_NEAR(result.objective(), loss_value(losses, "lm_head_loss") * scale, 1e-12);
  expect_gradient(result.objective, input, result.input, "input");
  for (Parameter* parameter : head.parameters())
    expect_gradient(result.objective, parameter->weight, parameter->grad, parameter->meta.name);
  return result;
}

TEST(Head, NamesAndTiedWeights) {
  LanguageModelHead head("head", head_config("{normalization: {type: rms_norm}}"), kHidden, kVocab, 1.0);
  // A module lists its own parameters before its sub-modules'.
  EXPECT_EQ(parameter_names(head), (std::vector<std::string>{"head.output_weights", "head.final_norm.weight"}));
  EXPECT_EQ(head.output_weights().meta.shape, (Shape{kVocab, kHidden}));

  LanguageModelEmbedding embeddings("embeddings", load_config<LanguageModelEmbeddingsConfig>("{vocab_size: 11}"),
                                    kHidden, 1.0);
  LanguageModelHead tied("head", head_config("{normalization: {type: rms_norm}}"), kHidden, kVocab, 1.0,
                         &embeddings.word_embeddings());
  EXPECT_EQ(parameter_names(tied), (std::vector<std::string>{"head.final_norm.weight"}));
  EXPECT_EQ(&tied.output_weights(), &embeddings.word_embeddings());
}

// Without a norm and with default settings, the label loss is sum_t logsumexp(z_t) - z_t[label_t] over labelled
// tokens, z = x W^T, computed here directly.
TEST(Head, CrossEntropyIsSumOfNegativeLogLikelihoods) {
  LanguageModelHead head("head", head_config("{normalization: {type: none}}"), kHidden, kVocab, 1.0);
  bind_parameters(head, 1);
  BatchData data = make_batch({4, 5}, kVocab, 2);
  Tensor input = random_tensor(Shape{9, kHidden}, 3);
  LossSums losses;
  LayerContext context = make_context(data.batch, false, &losses);
  EXPECT_FALSE(head.forward(context, input).defined());
  auto x = values_of(input), w = values_of(head.output_weights().weight);
  double expected = 0;
  for (size_t t = 0; t < 9; ++t) {
    if (data.labels[t] < 0) continue;
    std::vector<double> logits(kVocab);
    double max_logit = -1e300;
    for (int64_t v = 0; v < kVocab; ++v) {
      for (int64_t h = 0; h < kHidden; ++h) logits[size_t(v)] += x[t * kHidden + size_t(h)] * w[size_t(v * kHidden + h)];
      max_logit = std::max(max_logit, logits[size_t(v)]);
    }
    double sum = 0;
    for (double logit : logits) sum += std::exp(logit - max_logit);
    expected += max_logit + std::log(sum) - logits[size_t(data.labels[t])];
  }
  EXPECT_NEAR(loss_value(losses, "cross_entropy"), expected, 1e-10);
  EXPECT_NEAR(loss_value(losses, "lm_head_loss"), expected, 1e-10);
  EXPECT_EQ(losses.all().size(), 2u);
}

struct HeadCase {
  std::string name;
  std::string yaml;
  bool tied = false;
};

void PrintTo(const HeadCase& test_case, std::ostream* stream) { *stream << test_case.yaml; }


class HeadTest : public ::testing::TestWithParam<HeadCase> {};

// The objective is the head's total loss times the loss-gradient scale (the normalisation 1 / labels in the step),
// which is what the gradients are of.
TEST_P(HeadTest, BackwardMatchesFiniteDifferences) {
  const HeadCase& test_case = GetParam();
  LanguageModelEmbedding embeddings("embeddings", load_config<LanguageModelEmbeddingsConfig>("{vocab_size: 11}"),
                                    kHidden, 1.0);
  bind_parameters(embeddings, 4);
  LanguageModelHead head("head", head_config(test_case.yaml), kHidden, kVocab, 1.0,
                         test_case.tied ? &embeddings.word_embeddings() : nullptr);
  bind_parameters(head, 5);
  BatchData data = make_batch({3, 5, 4}, kVocab, 6, /*index=*/1);
  Tensor input = random_tensor(Shape{12, kHidden}, 7, 1.5);
  const double scale = 1.0 / 9.0;  // 9 labelled tokens

  const HeadGradients gradients = expect_head_gradients(head, data.batch, input, scale);
  ASSERT_EQ(gradients.input.shape(), input.shape());
  // Tied, the output weights are the embeddings' (not among the head's parameters).
  expect_gradient(gradients.objective, head.output_weights().weight, head.output_weights().grad, "output weights");
}

INSTANTIATE_TEST_SUITE_P(
    Variants, HeadTest,
    ::testing::Values(
        HeadCase{"default", "{normalization: {type: layer_norm}}"},
        HeadCase{"splits", "{normalization: {type: rms_norm}, cross_entropy_splits: 3}"},
        HeadCase{"z_loss", "{normalization: {type: rms_norm}, losses: {cross_entropy: {type: label, weight: 0.7}, "
                           "z_loss: {type: z_loss, weight: 0.1}}}"},
        HeadCase{"softcap", "{normalization: {type: rms_norm}, final_logit_softcap: 2.0}"},
        HeadCase{"logits_scale", "{normalization: {type: rms_norm}, logits_scale_factor: 0.5, "
                                 "losses: {cross_entropy: {type: label, logits_scale_factor: 3.0}}}"},
        HeadCase{"tied", "{normalization: {type: rms_norm}, cross_entropy_splits: 2}", true},
        HeadCase{"z_loss_only", "{normalization: {type: none}, losses: {z: {type: z_loss, weight: 0.5}}}"}),
    [](const auto& info) { return info.param.name; });

// Token data for a batch of make_batch: an advantage per document, old log-probs near log(1 / vocab) so that some
// ratios clip, each label's document.
void add_token_data(BatchData& data, const std::vector<int64_t>& document_lengths, uint64_t seed) {
  const int64_t count = int64_t(data.tokens.size());
  Tensor advantages = Tensor::empty(Shape{count}, DType::float32);
  Tensor old_log_probabilities = Tensor::empty(Shape{count}, DType::float32);
  Tensor label_documents = Tensor::empty(Shape{count}, DType::int32);
  int64_t token = 0;
  for (size_t document = 0; document < document_lengths.size(); ++document)
    for (int64_t position = 0; position < document_lengths[document]; ++position, ++token) {
      advantages.data_as<float>()[token] = float(document) - 0.8f;
      old_log_probabilities.data_as<float>()[token] = -2.4f + 0.5f * float(random_uniform(seed, uint64_t(token)) - 0.5);
      label_documents.data_as<int32_t>()[token] = int32_t(document);
    }
  data.batch.advantages = advantages;
  data.batch.old_log_probabilities = old_log_probabilities;
  data.batch.label_documents = label_documents;
  data.batch.num_documents = int64_t(document_lengths.size());
}

class PolicyHeadTest : public ::testing::TestWithParam<HeadCase> {};

// As HeadTest: the objective is the head total times 1 / labels (GSPO's part of the total is its per-document loss
// times the labels, so this is weight * GSPO's loss).
TEST_P(PolicyHeadTest, BackwardMatchesFiniteDifferences) {
  const HeadCase& test_case = GetParam();
  LanguageModelHead head("head", head_config(test_case.yaml), kHidden, kVocab, 1.0);
  bind_parameters(head, 5);
  const std::vector<int64_t> lengths{3, 5, 4};
  BatchData data = make_batch(lengths, kVocab, 6, /*index=*/1);
  add_token_data(data, lengths, 14);
  Tensor input = random_tensor(Shape{12, kHidden}, 7, 1.5);
  const double scale = 1.0 / 9.0;  // 9 labelled tokens

  expect_head_gradients(head, data.batch, input, scale);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, PolicyHeadTest,
    ::testing::Values(
        HeadCase{"grpo", "{normalization: {type: rms_norm}, losses: {grpo: {type: grpo, epsilon_low: 0.1, "
                         "epsilon_high: 0.15}}}"},
        HeadCase{"grpo_label_splits", "{normalization: {type: rms_norm}, cross_entropy_splits: 2, losses: {ce: "
                                      "{type: label, weight: 0.5}, grpo: {type: grpo, weight: 2.0}}}"},
        HeadCase{"gspo", "{normalization: {type: rms_norm}, losses: {gspo: {type: gspo, epsilon_high: 0.05}}}"},
        HeadCase{"gspo_label_softcap", "{normalization: {type: rms_norm}, final_logit_softcap: 3.0, losses: {ce: "
                                       "{type: label}, z: {type: z_loss, weight: 0.1}, gspo: {type: gspo, weight: "
                                       "0.7}}}"}),
    [](const auto& info) { return info.param.name; });

// Fast-LLM's names: the loss, `_new_logprobs` always, the metric family with `metrics: basic` (and auto), GSPO's
// `_num_segments`; per-document values divided by the documents; GSPO's loss is already the step's value.
TEST(Head, PolicyLossNamesAndNormalisation) {
  const std::vector<int64_t> lengths{4, 6};
  BatchData data = make_batch(lengths, kVocab, 12);
  add_token_data(data, lengths, 15);
  Tensor input = random_tensor(Shape{10, kHidden}, 13);
  auto names = [](const LossSums& losses) {
    std::vector<std::string> result;
    for (const auto& [name, sum] : losses.all()) result.push_back(name);
    return result;
  };
  LanguageModelHead quiet("head", head_config("{normalization: {type: none}, losses: {g: {type: grpo, metrics: none}}}"),
                          kHidden, kVocab, 1.0);
  bind_parameters(quiet, 11);
  LossSums quiet_losses;
  LayerContext quiet_context = make_context(data.batch, false, &quiet_losses);
  quiet.forward(quiet_context, input);
  EXPECT_EQ(names(quiet_losses), (std::vector<std::string>{"g", "g_new_logprobs", "lm_head_loss"}));

  LanguageModelHead gspo("head", head_config("{normalization: {type: none}, losses: {s: {type: gspo}}}"), kHidden,
                         kVocab, 1.0);
  bind_parameters(gspo, 11);
  LossSums losses;
  LayerContext context = make_context(data.batch, false, &losses);
  gspo.forward(context, input);
  EXPECT_EQ(names(losses),
            (std::vector<std::string>{"lm_head_loss", "s", "s_advantage", "s_clipped_ratio_fraction", "s_entropy",
                                      "s_kl_new_old", "s_max_advantage", "s_min_advantage", "s_new_logprobs",
                                      "s_num_segments", "s_num_tokens", "s_old_logprobs", "s_ratio_new_old",
                                      "s_ratio_new_old_squared_sum", "s_ratio_new_old_sum"}));
  EXPECT_EQ(losses.normalization("s"), LossNormalization::normalized);
  EXPECT_EQ(losses.normalization("s_max_advantage"), LossNormalization::maximum);
  EXPECT_EQ(losses.normalization("s_min_advantage"), LossNormalization::minimum);
  // The advantages are document - 0.8 in float32: -0.8 and 0.2.
  EXPECT_EQ(loss_value(losses, "s_max_advantage"), double(1.0f - 0.8f));
  EXPECT_EQ(loss_value(losses, "s_min_advantage"), double(0.0f - 0.8f));
  EXPECT_EQ(losses.normalization("lm_head_loss"), LossNormalization::per_label);
  EXPECT_NEAR(loss_value(losses, "s_num_tokens"), 8.0, 0.0);    // 3 + 5 labels
  EXPECT_NEAR(loss_value(losses, "s_num_segments"), 2.0, 1e-12);
  // Mean advantage over the two documents: (-0.8 + 0.2) / 2.
  EXPECT_NEAR(loss_value(losses, "s_advantage"), -0.3, 1e-6);
  // The head total (per label) is the GSPO loss times the labels.
  EXPECT_NEAR(loss_value(losses, "lm_head_loss"), loss_value(losses, "s") * 8.0, 1e-12);

  // A batch without token data: an error naming the loss.
  BatchData plain = make_batch(lengths, kVocab, 12);
  LayerContext plain_context = make_context(plain.batch, false, &losses);
  try {
    gspo.forward(plain_context, input);
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("loss 's' (gspo) needs advantages"), std::string::npos) << error.what();
  }
}

// Fast-LLM's `_max_advantage` / `_min_advantage`: the extremes of the unmasked labels' advantages over the chunks of a
// micro-batch (cross_entropy_splits) and over the micro-batches summed into one LossSums, by hand.
TEST(Head, PolicyAdvantageExtremesOverChunksAndMicroBatches) {
  const std::vector<int64_t> lengths{4, 6};  // labels 3 and 9 (document ends) are masked
  LanguageModelHead head("head", head_config("{normalization: {type: none}, cross_entropy_splits: 2, losses: {g: "
                                             "{type: grpo}}}"),
                         kHidden, kVocab, 1.0);
  bind_parameters(head, 11);
  Tensor input = random_tensor(Shape{10, kHidden}, 13);
  auto batch_with = [&](const std::vector<float>& advantages) {
    BatchData data = make_batch(lengths, kVocab, 12);
    add_token_data(data, lengths, 15);
    std::copy(advantages.begin(), advantages.end(), data.batch.advantages.data_as<float>());
    return data;
  };
  LossSums losses;
  // Chunk 0 (tokens 0-4) holds the smallest, -1, chunk 1 (tokens 5-9) the largest, 2; the masked 7 and -7 do not count.
  const BatchData first = batch_with({0.5f, -0.25f, 1.5f, 7.0f, -1.0f, 0.75f, 2.0f, -0.5f, 0.25f, -7.0f});
  LayerContext context = make_context(first.batch, false, &losses);
  head.forward(context, input);
  EXPECT_EQ(loss_value(losses, "g_max_advantage"), 2.0);
  EXPECT_EQ(loss_value(losses, "g_min_advantage"), -1.0);
  // A second micro-batch with a smaller minimum (and masked labels beyond both extremes).
  const BatchData second = batch_with({0.0f, 0.0f, 0.0f, 9.0f, -3.0f, 0.0f, 0.0f, 0.0f, 0.0f, -9.0f});
  LayerContext second_context = make_context(second.batch, false, &losses);
  head.forward(second_context, input);
  EXPECT_EQ(loss_value(losses, "g_max_advantage"), 2.0);
  EXPECT_EQ(loss_value(losses, "g_min_advantage"), -3.0);
}

// cross_entropy_splits only bounds memory: losses and every gradient are the same as with one split.
TEST(Head, SplitsChangeNothing) {
  std::vector<std::vector<double>> results;
  for (int splits : {1, 3}) {
    LanguageModelHead head("head",
                           head_config("{normalization: {type: rms_norm}, cross_entropy_splits: " +
                                       std::to_string(splits) + ", losses: {ce: {type: label}, z: {type: z_loss}}}"),
                           kHidden, kVocab, 1.0);
    bind_parameters(head, 8);
    BatchData data = make_batch({4, 6}, kVocab, 9);
    Tensor input = random_tensor(Shape{10, kHidden}, 10);
    LossSums losses;
    LayerContext context = make_context(data.batch, true, &losses, 0.25);
    head.forward(context, input);
    std::vector<double> result = values_of(head.backward(context, Tensor()));
    for (Parameter* parameter : head.parameters()) {
      auto grad = values_of(parameter->grad);
      result.insert(result.end(), grad.begin(), grad.end());
    }
    result.push_back(loss_value(losses, "ce"));
    result.push_back(loss_value(losses, "z"));
    result.push_back(loss_value(losses, "lm_head_loss"));
    results.push_back(result);
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  EXPECT_GT(max_abs(results[0]), 0.0);
  for (size_t i = 0; i < results[0].size(); ++i) EXPECT_NEAR(results[0][i], results[1][i], 1e-12) << i;
}

TEST(Head, LossNamesAndWeightedTotal) {
  LanguageModelHead head("head",
                         head_config("{normalization: {type: none}, losses: {cross_entropy: {type: label, weight: "
                                     "0.5}, z_loss: {type: z_loss, weight: 0.25}}}"),
                         kHidden, kVocab, 1.0);
  bind_parameters(head, 11);
  BatchData data = make_batch({4, 6}, kVocab, 12);
  Tensor input = random_tensor(Shape{10, kHidden}, 13);
  LossSums losses;
  LayerContext context = make_context(data.batch, false, &losses);
  head.forward(context, input);
  head.forward(context, input);  // sums accumulate over micro-batches
  ASSERT_EQ(losses.all().size(), 3u);
  const double label = loss_value(losses, "cross_entropy"), z = loss_value(losses, "z_loss");
  EXPECT_GT(label, 0.0);
  EXPECT_GT(z, 0.0);
  EXPECT_NEAR(loss_value(losses, "lm_head_loss"), 0.5 * label + 0.25 * z, 1e-12);

  LossSums once;
  LayerContext single = make_context(data.batch, false, &once);
  head.forward(single, input);
  EXPECT_NEAR(loss_value(once, "cross_entropy") * 2, label, 1e-12);
}

TEST(Head, RefusesUnsupportedLosses) {
  EXPECT_THROW(LanguageModelHead("head", head_config("{losses: {a: {type: distillation}, b: {type: distillation}}}"),
                                 kHidden, kVocab, 1.0),
               NotSupportedError);
  EXPECT_THROW(LanguageModelHead("head", head_config("{losses: {dpo: {type: dpo, reference_model: ref}}, "
                                                     "cross_entropy_splits: 2}"),
                                 kHidden, kVocab, 1.0),
               NotSupportedError);
  EXPECT_THROW(LanguageModelHead("head", head_config("{losses: {dpo: {type: dpo, reference_model: ref}}, "
                                                     "final_logit_softcap: 3.0}"),
                                 kHidden, kVocab, 1.0),
               NotSupportedError);
  EXPECT_THROW(LanguageModelHead("head", head_config("{losses: {a: {type: label}, b: {type: label}}}"), kHidden,
                                 kVocab, 1.0),
               NotSupportedError);
  EXPECT_THROW(LanguageModelHead("head", head_config("{losses: {a: {type: grpo}, b: {type: gspo}}}"), kHidden, kVocab,
                                 1.0),
               NotSupportedError);
  // GSPO's per-document ratio needs each document in one chunk of logits.
  try {
    head_config("{cross_entropy_splits: 2, losses: {s: {type: gspo}}}");
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("must be 1 with the gspo loss 's'"), std::string::npos) << error.what();
  }
}

// The losses that read a reference model (distillation, dpo), alone or with the label losses: the head's gradients are
// those of its total, whichever way their gradient goes (dpo's through the cross-entropy pass's row weights,
// distillation's as that pass's distillation term, also with no label loss).
class ReferenceLossHeadTest : public ::testing::TestWithParam<HeadCase> {};

TEST_P(ReferenceLossHeadTest, BackwardMatchesFiniteDifferences) {
  LanguageModelHead head("head", head_config(GetParam().yaml), kHidden, kVocab, 1.0);
  bind_parameters(head, 15);
  BatchData data = make_batch({3, 5, 4}, kVocab, 16, /*index=*/1);
  const double scale = 1.0 / 9.0;  // 9 labelled tokens
  data.batch.labels_in_step = 9;
  // Pairs of label rows (documents at 0, 3, 8); the step holds 3 pairs, this micro-batch 2.
  data.batch.preference_pairs = {{.chosen_begin = 0, .chosen_end = 2, .rejected_begin = 3, .rejected_end = 5},
                                 {.chosen_begin = 8, .chosen_end = 9, .rejected_begin = 9, .rejected_end = 11}};
  data.batch.preference_pairs_in_step = 3;
  attach_reference_outputs(data.batch, "teacher", random_tensor(Shape{12, kVocab}, 17, 2.0), data.batch.labels);
  add_token_data(data, {3, 5, 4}, 19);  // read by the cases with a policy-gradient loss only
  Tensor input = random_tensor(Shape{12, kHidden}, 18, 1.5);

  expect_head_gradients(head, data.batch, input, scale);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, ReferenceLossHeadTest,
    ::testing::Values(
        HeadCase{"distillation_only", "{normalization: {type: rms_norm}, losses: {d: {type: distillation, "
                                      "reference_model: teacher, loss_type: reverse_kl, temperature: 2.0}}}"},
        HeadCase{"distillation_with_label", "{normalization: {type: rms_norm}, cross_entropy_splits: 2, "
                                            "final_logit_softcap: 3.0, logits_scale_factor: 0.8, losses: {ce: {type: "
                                            "label, weight: 0.7}, d: {type: distillation, reference_model: teacher, "
                                            "loss_type: forward_kl, weight: 0.4, temperature: 0.5}}}"},
        HeadCase{"dpo_only", "{normalization: {type: rms_norm}, losses: {dpo: {type: dpo, reference_model: teacher, "
                             "beta: 0.7}}}"},
        HeadCase{"dpo_and_distillation", "{normalization: {type: rms_norm}, losses: {dpo: {type: dpo, "
                                         "reference_model: teacher, weight: 2.0}, d: {type: distillation, "
                                         "reference_model: teacher}}}"},
        HeadCase{"all", "{normalization: {type: rms_norm}, losses: {ce: {type: label, weight: 0.5}, z: {type: "
                        "z_loss, weight: 0.1}, dpo: {type: dpo, reference_model: teacher, beta: 0.3}, d: {type: "
                        "distillation, reference_model: teacher, loss_type: cross_entropy}}}"},
        // With a policy-gradient loss: the reference losses' gradient in its buffer, the policy's over the logits.
        HeadCase{"distillation_and_grpo", "{normalization: {type: rms_norm}, cross_entropy_splits: 2, losses: {d: "
                                          "{type: distillation, reference_model: teacher, weight: 0.6}, g: {type: "
                                          "grpo, weight: 1.5}}}"},
        // Every buffer: both reference losses, the policy loss and the label losses.
        HeadCase{"all_with_gspo", "{normalization: {type: rms_norm}, losses: {ce: {type: label, weight: 0.5}, z: "
                                  "{type: z_loss, weight: 0.1}, dpo: {type: dpo, reference_model: teacher, beta: 0.3}, "
                                  "d: {type: distillation, reference_model: teacher}, g: {type: gspo, weight: 0.7}}}"}),
    [](const auto& info) { return info.param.name; });

// The logged values: distillation per label, dpo per pair of the step, and the total their weighted sum per label.
TEST(Head, ReferenceLossNames) {
  LanguageModelHead head("head", head_config("{losses: {ce: {type: label}, dpo: {type: dpo, reference_model: t, "
                                             "weight: 2.0}, kd: {type: distillation, reference_model: t}}}"),
                         kHidden, kVocab, 1.0);
  bind_parameters(head, 25);
  BatchData data = make_batch({6, 6}, kVocab, 26);
  data.batch.labels_in_step = 10;
  data.batch.preference_pairs = {{.chosen_begin = 1, .chosen_end = 3, .rejected_begin = 7, .rejected_end = 9}};
  data.batch.preference_pairs_in_step = 4;
  attach_reference_outputs(data.batch, "t", random_tensor(Shape{12, kVocab}, 27), data.batch.labels);
  LossSums losses;
  LayerContext context = make_context(data.batch, false, &losses);
  head.forward(context, random_tensor(Shape{12, kHidden}, 28));
  EXPECT_EQ(losses.normalization("dpo"), LossNormalization::normalized);
  EXPECT_EQ(losses.normalization("kd"), LossNormalization::per_label);
  EXPECT_GT(loss_value(losses, "dpo"), 0.0);
  EXPECT_NEAR(loss_value(losses, "lm_head_loss"),
              loss_value(losses, "ce") + loss_value(losses, "kd") + 2.0 * loss_value(losses, "dpo") * 10, 1e-12);
  // A missing reference model's logits or label log-probabilities are an error naming it.
  MicroBatch without_logits = data.batch, without_log_probabilities = data.batch;
  without_logits.reference_logits.clear();
  without_log_probabilities.reference_label_log_probabilities.clear();
  for (const MicroBatch* batch : {&without_logits, &without_log_probabilities}) {
    LossSums again;
    LayerContext missing = make_context(*batch, false, &again);
    try {
      head.forward(missing, random_tensor(Shape{12, kHidden}, 28));
      ADD_FAILURE() << "a head ran without its reference model's outputs";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("reference model 't'"), std::string::npos) << error.what();
    }
  }
}

// Loss rows: the rows with a label, each row's index among them (the count for a masked one), the pairs' spans counted
// in loss rows (a span [b, e) -> [loss rows before b, loss rows before e)).
TEST(Head, FindLossRows) {
  const std::vector<int64_t> labels{-100, 4, 5, -100, -100, 7, 2, -100};
  const std::vector<kernels::PreferencePair> pairs{
      {.chosen_begin = 0, .chosen_end = 3, .rejected_begin = 3, .rejected_end = 8}};
  const LossRows rows = find_loss_rows(labels, pairs);
  EXPECT_EQ(rows.rows, (std::vector<int64_t>{1, 2, 5, 6}));
  EXPECT_EQ(rows.labels, (std::vector<int64_t>{4, 5, 7, 2}));
  EXPECT_EQ(rows.positions, (std::vector<int64_t>{4, 0, 1, 4, 4, 2, 3, 4}));
  ASSERT_EQ(rows.preference_pairs.size(), 1u);
  EXPECT_EQ(rows.preference_pairs[0].chosen_begin, 0);
  EXPECT_EQ(rows.preference_pairs[0].chosen_end, 2);
  EXPECT_EQ(rows.preference_pairs[0].rejected_begin, 2);
  EXPECT_EQ(rows.preference_pairs[0].rejected_end, 4);
}

// With dpo alone the loss rows are the labelled rows inside a chosen or rejected span: the prompt rows before and
// between the spans are left out, and the spans count the kept rows.
TEST(Head, FindLossRowsInPreferenceSpans) {
  const std::vector<int64_t> labels{3, 4, 5, -100, 6, 7, 2, -100, 9, 1};
  const std::vector<kernels::PreferencePair> pairs{
      {.chosen_begin = 1, .chosen_end = 4, .rejected_begin = 5, .rejected_end = 8}};
  const LossRows rows = find_loss_rows(labels, pairs, LossRowRule::preference_spans);
  EXPECT_EQ(rows.rows, (std::vector<int64_t>{1, 2, 5, 6}));
  EXPECT_EQ(rows.labels, (std::vector<int64_t>{4, 5, 7, 2}));
  EXPECT_EQ(rows.positions, (std::vector<int64_t>{4, 0, 1, 4, 4, 2, 3, 4, 4, 4}));
  ASSERT_EQ(rows.preference_pairs.size(), 1u);
  EXPECT_EQ(rows.preference_pairs[0].chosen_begin, 0);
  EXPECT_EQ(rows.preference_pairs[0].chosen_end, 2);
  EXPECT_EQ(rows.preference_pairs[0].rejected_begin, 2);
  EXPECT_EQ(rows.preference_pairs[0].rejected_end, 4);
  // The head asks for this rule when dpo is its only loss.
  EXPECT_EQ(LanguageModelHead("head", head_config("{losses: {dpo: {type: dpo, reference_model: r}}}"), kHidden, kVocab,
                              1.0)
                .loss_row_rule(),
            LossRowRule::preference_spans);
  EXPECT_EQ(LanguageModelHead("head",
                              head_config("{losses: {dpo: {type: dpo, reference_model: r}, ce: {type: label}}}"),
                              kHidden, kVocab, 1.0)
                .loss_row_rule(),
            LossRowRule::labelled);
}

// A batch of documents {3, 5, 4} whose first rows are masked as prompts would be (7 labels of 12 rows), with two
// preference pairs over label rows and a teacher's logits, its loss rows under `rule` attached (the span rule leaves
// out row 0, labelled but before the first chosen span).
struct MaskedBatch {
  BatchData data;
  Tensor teacher;          // (12, vocab)
  Tensor compact_teacher;  // the teacher's loss rows
  LossRowRule rule = LossRowRule::labelled;
};

MaskedBatch masked_batch(DType dtype, LossRowRule rule = LossRowRule::labelled) {
  MaskedBatch result{
      .data = make_batch({3, 5, 4}, kVocab, 16, /*index=*/1), .teacher = {}, .compact_teacher = {}, .rule = rule};
  BatchData& data = result.data;
  for (int64_t row : {3, 4}) data.labels[size_t(row)] = -100;
  std::copy(data.labels.begin(), data.labels.end(), data.batch.labels.data_as<int64_t>());
  data.batch.labels_in_step = 7;
  data.batch.preference_pairs = {{.chosen_begin = 0, .chosen_end = 2, .rejected_begin = 3, .rejected_end = 7},
                                 {.chosen_begin = 8, .chosen_end = 10, .rejected_begin = 10, .rejected_end = 11}};
  data.batch.preference_pairs_in_step = 3;
  // Under the span rule the chosen span of the first pair starts a row later: row 0 is a prompt row.
  if (rule == LossRowRule::preference_spans) data.batch.preference_pairs[0].chosen_begin = 1;
  const LossRows rows = find_loss_rows(data.labels, data.batch.preference_pairs, rule);
  EXPECT_EQ(rows.rows.size(), rule == LossRowRule::labelled ? 7u : 6u);
  attach_loss_rows(data.batch, rows);
  result.teacher = random_tensor(Shape{12, kVocab}, 17, 2.0, dtype);
  result.compact_teacher = Tensor::empty(Shape{int64_t(rows.rows.size()), kVocab}, dtype);
  for (size_t index = 0; index < rows.rows.size(); ++index)
    result.compact_teacher.slice(0, int64_t(index), int64_t(index) + 1)
        .copy_bytes_from(result.teacher.slice(0, rows.rows[index], rows.rows[index] + 1), Stream{});
  return result;
}

// The losses, the gradient of the input and of every parameter of one training step of a fresh head built from `yaml`
// on `batch`, on its loss rows only or on every row.
std::vector<double> head_step(const std::string& yaml, MaskedBatch& masked, bool loss_rows_only, DType dtype) {
  LanguageModelHead head("head", head_config(yaml), kHidden, kVocab, 1.0);
  EXPECT_EQ(head.loss_row_rule(), masked.rule);
  bind_parameters(head, 15, dtype);
  head.enable_loss_rows_only(loss_rows_only);
  MicroBatch& batch = masked.data.batch;
  EXPECT_EQ(head.computes_loss_rows_only(batch), loss_rows_only);
  attach_reference_outputs(batch, "teacher", loss_rows_only ? masked.compact_teacher : masked.teacher,
                           loss_rows_only ? batch.loss_labels : batch.labels);
  const double weights = double(kVocab * kHidden);
  EXPECT_EQ(head.flops(batch), 6.0 * double(loss_rows_only ? batch.loss_rows.numel() : 12) * weights);
  Tensor input = random_tensor(Shape{12, kHidden}, 18, 1.5, dtype);
  LossSums losses;
  LayerContext context = make_context(batch, true, &losses, 1.0 / 7.0, 0, dtype);
  head.forward(context, input);
  std::vector<double> result = values_of(head.backward(context, Tensor()));
  for (Parameter* parameter : head.parameters()) {
    const std::vector<double> grad = values_of(parameter->grad);
    result.insert(result.end(), grad.begin(), grad.end());
  }
  for (const auto& [name, sum] : losses.all()) result.push_back(sum.item());
  return result;
}

struct LossRowsCase {
  std::string name;
  std::string yaml;
  LossRowRule rule = LossRowRule::labelled;
};

void PrintTo(const LossRowsCase& test_case, std::ostream* stream) { *stream << test_case.yaml; }

class LossRowsHeadTest : public ::testing::TestWithParam<LossRowsCase> {};

// The head on its loss rows only gives every row's losses and gradients: exactly in fp64 up to the order of sums,
// within fp32 rounding in fp32. The masked rows' input gradient is zero (checked by the comparison).
TEST_P(LossRowsHeadTest, SameAsEveryRow) {
  for (DType dtype : {DType::float64, DType::float32}) {
    MaskedBatch masked = masked_batch(dtype, GetParam().rule);
    const std::vector<double> every_row = head_step(GetParam().yaml, masked, false, dtype);
    const std::vector<double> loss_rows = head_step(GetParam().yaml, masked, true, dtype);
    ASSERT_EQ(every_row.size(), loss_rows.size());
    EXPECT_GT(max_abs(every_row), 0.0);
    const double tolerance = dtype == DType::float64 ? 1e-12 : 2e-5;
    for (size_t index = 0; index < every_row.size(); ++index)
      EXPECT_NEAR(every_row[index], loss_rows[index], tolerance * std::max(1.0, std::abs(every_row[index])))
          << dtype_name(dtype) << " value " << index;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, LossRowsHeadTest,
    ::testing::Values(
        LossRowsCase{"label", "{normalization: {type: rms_norm}}"},
        LossRowsCase{"label_z_splits", "{normalization: {type: layer_norm}, cross_entropy_splits: 3, losses: {ce: "
                                       "{type: label, weight: 0.7}, z: {type: z_loss, weight: 0.1}}}"},
        LossRowsCase{"dpo", "{normalization: {type: rms_norm}, losses: {dpo: {type: dpo, reference_model: teacher, "
                            "beta: 0.7}}}",
                     LossRowRule::preference_spans},
        LossRowsCase{"distillation", "{normalization: {type: rms_norm}, cross_entropy_splits: 2, final_logit_softcap: "
                                     "3.0, losses: {ce: {type: label, weight: 0.7}, d: {type: distillation, "
                                     "reference_model: teacher, loss_type: forward_kl, temperature: 0.5}}}"},
        LossRowsCase{"all", "{normalization: {type: rms_norm}, losses: {ce: {type: label, weight: 0.5}, z: {type: "
                            "z_loss, weight: 0.1}, dpo: {type: dpo, reference_model: teacher, beta: 0.3}, d: {type: "
                            "distillation, reference_model: teacher, loss_type: reverse_kl}}}"}),
    [](const auto& info) { return info.param.name; });

// Every row is computed when compacting would not be exact or the batch does not allow it: a policy-gradient loss, no
// loss rows attached (hand-built batches, sequence pieces), every row or none carrying a label.
TEST(Head, LossRowsOnlyWhenAllowed) {
  MaskedBatch masked = masked_batch(DType::float64);
  LanguageModelHead label("head", head_config("{normalization: {type: rms_norm}}"), kHidden, kVocab, 1.0);
  EXPECT_TRUE(label.computes_loss_rows_only(masked.data.batch));
  LanguageModelHead policy("head", head_config("{losses: {ce: {type: label}, g: {type: grpo}}}"), kHidden, kVocab,
                           1.0);
  EXPECT_FALSE(policy.computes_loss_rows_only(masked.data.batch));
  MicroBatch piece = masked.data.batch;
  piece.sequence_piece.emplace();
  EXPECT_FALSE(label.computes_loss_rows_only(piece));
  BatchData plain = make_batch({3, 5, 4}, kVocab, 16);
  EXPECT_FALSE(label.computes_loss_rows_only(plain.batch));
  attach_loss_rows(plain.batch, find_loss_rows(plain.labels, {}));  // 9 of 12 rows: compacted
  EXPECT_TRUE(label.computes_loss_rows_only(plain.batch));
  const std::vector<int64_t> all_labelled(12, 1), none_labelled(12, -100);
  attach_loss_rows(plain.batch, find_loss_rows(all_labelled, {}));
  EXPECT_FALSE(label.computes_loss_rows_only(plain.batch));
  attach_loss_rows(plain.batch, find_loss_rows(none_labelled, {}));
  EXPECT_FALSE(label.computes_loss_rows_only(plain.batch));
}

}  // namespace
}  // namespace fast_llm::layers
