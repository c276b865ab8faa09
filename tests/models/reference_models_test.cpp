// `train gpt` with reference models (models/gpt/reference_models.h) and the head's distillation and dpo losses, on the
// CPU: a model whose reference is itself (both freshly initialised with the run's seed) has a distillation KL of 0 and
// a DPO loss of log(2) at its first step, and then learns (also on prompt-masked SFT data, computing the loss rows
// only); the reference's weights never change; the head's total is
// the weighted sum of its losses; activation distillation of a model by itself starts at 0; a reference model loaded
// from a checkpoint takes its architecture from it; and the config errors (unknown reference model, a reference model
// no loss reads, dpo with truncated documents, vocabularies that differ).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "data/data_test_util.h"
#include "fast_llm/config/merge.h"
#include "fast_llm/engine/checkpoint/loading.h"
#include "fast_llm/layers/language_model/loss_rows.h"
#include "fast_llm/models/gpt/model_type.h"
#include "fast_llm/models/gpt/reference_models.h"
#include "fast_llm/models/gpt/training.h"
#include "layers/layer_test_util.h"
#include "models/config_test_util.h"

namespace fast_llm::models::gpt {
namespace {

namespace fs = std::filesystem;

constexpr const char* kArchitecture = R"(
hidden_size: 16
embeddings: {vocab_size: 40}
decoder:
  num_blocks: 2
  block:
    mixer: {heads: 2, head_groups: 1, head_size: 8, rotary: {type: default}}
    mlp: {intermediate_size: 24, gated: true}
    normalization: {type: rms_norm}
head: {normalization: {type: rms_norm}}
)";

// A trainer config: kArchitecture for the trained model and, under `reference_models.reference`, for its reference,
// with `losses` as the head's losses and `extra` merged on top.
YAML::Node trainer_tree(const std::string& losses, const std::string& extra = "{}") {
  YAML::Node tree = YAML::Load(R"(
training: {train_iters: 4, logs: {interval: 1}, num_workers: 1}
data: {datasets: {training: {type: random}}, micro_batch_size: 32}
optimizer: {learning_rate: {base: 0.01}}
model: {distributed: {compute_dtype: fp64, use_cuda: false, seed: 4321}}
)");
  tree["model"]["base_model"] = YAML::Load(kArchitecture);
  tree["model"]["base_model"]["head"]["losses"] = YAML::Load(losses);
  tree["reference_models"]["reference"]["model"]["base_model"] = YAML::Load(kArchitecture);
  return config::merge_config_trees(tree, YAML::Load(extra));
}

GPTTrainerConfig load(const YAML::Node& tree) {
  GPTTrainerConfig config;
  engine::load_config_with_pretrained(config, tree, gpt_model_type());
  return config;
}

std::string config_error(const YAML::Node& tree) {
  try {
    load(tree);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

class ReferenceModelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = fs::temp_directory_path() /
                 ("fast_llm_reference_models_test_" + std::to_string(getpid()) + "_" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(directory_);
    fs::create_directories(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }

  // Trains with `tree` in `name` and returns the training records of its metrics file.
  std::vector<nlohmann::json> train_records(YAML::Node tree, const std::string& name,
                                            const std::function<void(ReferenceModels&)>& inspect = {}) {
    tree["run"]["experiment_dir"] = (directory_ / name).string();
    testing::ScopedEnvironment environment(testing::single_process());
    train(load(tree), {}, inspect);
    std::vector<nlohmann::json> result;
    std::ifstream file(directory_ / name / "runs" / "0" / "metrics.jsonl");
    for (std::string line; std::getline(file, line);) {
      nlohmann::json record = nlohmann::json::parse(line);
      if (record["phase"] == "training") result.push_back(std::move(record));
    }
    return result;
  }

  fs::path directory_;
};

// The values of every parameter of a model's weights, by name.
std::map<std::string, std::vector<double>> weights(engine::MultiStage& multi_stage) {
  std::map<std::string, std::vector<double>> result;
  for (const char* name : {"embeddings.word_embeddings_weight", "decoder.0.mixer.query.weight",
                           "decoder.1.mlp.layer_2.weight", "head.final_norm.weight", "head.output_weights"}) {
    const layers::Parameter* parameter = multi_stage.find_parameter(name);
    EXPECT_NE(parameter, nullptr) << name;
    if (parameter == nullptr) continue;
    const Tensor& weight = parameter->weight;
    result[name].assign(weight.data_as<double>(), weight.data_as<double>() + weight.numel());
  }
  return result;
}

TEST_F(ReferenceModelsTest, SelfDistillationStartsAtZeroAndTheReferenceStaysFrozen) {
  const YAML::Node tree = trainer_tree(R"(
cross_entropy: {type: label, weight: 0.5}
distillation: {type: distillation, reference_model: reference, loss_type: forward_kl, weight: 2.0}
)");
  std::map<std::string, std::vector<double>> after;
  const auto records = train_records(tree, "run", [&](ReferenceModels& references) {
    after = weights(references.multi_stage("reference"));
  });
  ASSERT_EQ(records.size(), 4u);
  // The same seed and names give the same initial weights: the first step's KL is 0; the model then moves away.
  EXPECT_NEAR(records[0]["distillation"].get<double>(), 0.0, 1e-12);
  EXPECT_GT(records[3]["distillation"].get<double>(), 1e-8);
  for (const auto& record : records)
    EXPECT_NEAR(record["lm_head_loss"].get<double>(),
                0.5 * record["cross_entropy"].get<double>() + 2.0 * record["distillation"].get<double>(), 1e-12);
  // The reference after training holds the weights a fresh one starts with.
  testing::ScopedEnvironment environment(testing::single_process());
  const GPTTrainerConfig config = load(tree);
  ReferenceModels fresh(config, Device::cpu());
  fresh.load();
  EXPECT_EQ(after, weights(fresh.multi_stage("reference")));
}

// SFT data: each document's prompt (its first 5 tokens) under a loss-masking span, so the head and the reference model
// compute only the answers' rows (LanguageModelHead::computes_loss_rows_only); the teacher's rows are the head's, so
// the self-distillation is still exactly 0 at the first step.
TEST_F(ReferenceModelsTest, SelfDistillationOnPromptMaskedDataStartsAtZero) {
  const fs::path dataset = directory_ / "sft.fast_llm_dataset";
  std::vector<data::Document> documents(12);
  for (size_t index = 0; index < documents.size(); ++index) {
    for (int64_t position = 0; position < 11; ++position)
      documents[index].tokens.push_back((int64_t(index) * 5 + position * 3) % 40);
    documents[index].loss_masking_spans = {{0, 5}};
  }
  data::testing::write_dataset(dataset, documents,
                               {.data_type = data::TokenDataType::uint16, .loss_masking_spans = true});
  const YAML::Node tree = trainer_tree(R"(
cross_entropy: {type: label}
distillation: {type: distillation, reference_model: reference, loss_type: reverse_kl, weight: 0.5}
)",
                                       "{data: {datasets: {training: {type: memmap, path: '" + dataset.string() +
                                           "'}}}}");
  const auto records = train_records(tree, "run");
  ASSERT_EQ(records.size(), 4u);
  EXPECT_NEAR(records[0]["distillation"].get<double>(), 0.0, 1e-12);
  EXPECT_GT(records[0]["cross_entropy"].get<double>(), 1.0);
  EXPECT_GT(records[3]["distillation"].get<double>(), 1e-8);
  for (const auto& record : records)
    EXPECT_NEAR(record["lm_head_loss"].get<double>(),
                record["cross_entropy"].get<double>() + 0.5 * record["distillation"].get<double>(), 1e-12);
}

TEST_F(ReferenceModelsTest, SelfActivationDistillationStartsAtZero) {
  YAML::Node tree = trainer_tree("{cross_entropy: {type: label}}");
  tree["model"]["base_model"]["decoder"]["block"]["distillation_model"] = "reference";
  tree["model"]["base_model"]["decoder"]["block"]["distillation_loss_weight"] = 0.5;
  const auto records = train_records(tree, "run");
  ASSERT_EQ(records.size(), 4u);
  EXPECT_NEAR(records[0]["activation_distillation_loss"].get<double>(), 0.0, 1e-12);
  EXPECT_GT(records[3]["activation_distillation_loss"].get<double>(), 1e-6);
  // Not part of the head's total (Fast-LLM adds it to the gradient only).
  for (const auto& record : records)
    EXPECT_NEAR(record["lm_head_loss"].get<double>(), record["cross_entropy"].get<double>(), 1e-12);
}

// Preference documents: prompt, then chosen answer and EOS (0), then BOS (1), prompt and rejected answer and EOS;
// with `add_bos` BOS first too, as `prepare` writes them by default: both sequences of a pair then start with the same
// rows, which the trainer computes once (data/shared_prompts.h).
void write_preference_dataset(const fs::path& path, bool add_bos = false) {
  std::vector<data::Document> documents;
  for (int64_t index = 0; index < 24; ++index) {
    std::vector<int64_t> prompt{2 + index % 5, 8 + index % 3, 12};
    if (add_bos) prompt.insert(prompt.begin(), 1);
    const std::vector<int64_t> chosen{20 + index % 4, 21, 22}, rejected{30, 31 + index % 6};
    data::Document document;
    document.tokens = prompt;
    document.tokens.insert(document.tokens.end(), chosen.begin(), chosen.end());
    document.tokens.push_back(0);
    const int32_t chosen_end = int32_t(document.tokens.size());
    document.chosen_spans = {{int32_t(prompt.size()), chosen_end}};
    if (!add_bos) document.tokens.push_back(1);
    document.tokens.insert(document.tokens.end(), prompt.begin(), prompt.end());
    const int32_t rejected_begin = int32_t(document.tokens.size());
    document.tokens.insert(document.tokens.end(), rejected.begin(), rejected.end());
    document.tokens.push_back(0);
    document.rejected_spans = {{rejected_begin, int32_t(document.tokens.size())}};
    documents.push_back(document);
  }
  data::testing::write_dataset(path, documents, {.data_type = data::TokenDataType::uint16, .preference_spans = true});
}

TEST_F(ReferenceModelsTest, SelfDpoStartsAtLogTwoAndLearns) {
  const fs::path dataset = directory_ / "preferences.fast_llm_dataset";
  write_preference_dataset(dataset);
  const auto dpo_tree = [](const fs::path& path) {
    return trainer_tree("{dpo: {type: dpo, reference_model: reference, beta: 0.5}}",
                        "{data: {datasets: {training: {type: memmap, path: '" + path.string() +
                            "'}}, truncate_documents: false, micro_batch_size: 48}, training: {train_iters: 8}}");
  };
  const YAML::Node tree = dpo_tree(dataset);
  // The second run's pairs share their prompt rows (BOS first): the policy and the reference compute them once.
  const fs::path with_bos = directory_ / "preferences_with_bos.fast_llm_dataset";
  write_preference_dataset(with_bos, /*add_bos=*/true);
  for (const auto& [run, path] : {std::pair{"run", dataset}, std::pair{"shared", with_bos}}) {
    SCOPED_TRACE(run);
    ::testing::internal::CaptureStderr();
    const auto records = train_records(dpo_tree(path), run);
    const std::string log = ::testing::internal::GetCapturedStderr();
    // Each micro-batch holds 3 documents of 15 tokens, whose rejected sequences repeat the first 3 rows of their
    // 4-token prompts (BOS included; the last row is computed in both).
    EXPECT_EQ(log.find("share their prompt rows: the layers compute them once (39 of the 48 rows") != std::string::npos,
              std::string(run) == "shared")
        << log;
    ASSERT_EQ(records.size(), 8u);
    EXPECT_NEAR(records[0]["dpo"].get<double>(), std::log(2.0), 1e-12);
    EXPECT_LT(records.back()["dpo"].get<double>(), std::log(2.0) - 0.05);
    for (const auto& record : records)
      EXPECT_NEAR(record["lm_head_loss"].get<double>(), record["dpo"].get<double>(), 1e-12);
  }

  // The same data without preference spans cannot train a dpo loss.
  const fs::path plain = directory_ / "plain.fast_llm_dataset";
  std::vector<data::Document> plain_documents(6);
  for (size_t index = 0; index < plain_documents.size(); ++index)
    for (int64_t position = 0; position < 10; ++position)
      plain_documents[index].tokens.push_back((int64_t(index) * 7 + position) % 40);
  data::testing::write_dataset(plain, plain_documents, {.data_type = data::TokenDataType::uint16});
  YAML::Node without = YAML::Clone(tree);
  without["data"]["datasets"]["training"]["path"] = plain.string();
  try {
    train_records(without, "plain");
    ADD_FAILURE() << "dpo trained on data without preference spans";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("needs preference pairs"), std::string::npos) << error.what();
  }
}

// A reference model only dpo reads hands the log-probabilities of the labels alone, its logits made a few rows at a
// time: the same values as from its whole logits (kept when a distillation loss reads them too), 0 on masked rows; the
// memory estimate lists what is kept.
TEST(ReferenceModelsOutputs, LabelLogProbabilitiesAloneAndInChunks) {
  const std::string whole_documents = "{data: {truncate_documents: false}}";
  const GPTTrainerConfig dpo_only =
      load(trainer_tree("{dpo: {type: dpo, reference_model: reference}}", whole_documents));
  const GPTTrainerConfig with_distillation = load(trainer_tree(
      "{dpo: {type: dpo, reference_model: reference}, d: {type: distillation, reference_model: reference}}",
      whole_documents));
  std::vector<layers::MicroBatch> batches;
  for (const GPTTrainerConfig* config : {&dpo_only, &with_distillation}) {
    ReferenceModels references(*config, Device::cpu());
    references.load();  // both fresh with the run's seed: the same weights
    if (config == &dpo_only) references.limit_logits_chunk_rows(5);
    const layers::LanguageModelHead trained_head("head", config->model.base_model.head, 16, 40, 1.0);
    batches.push_back(layers::testing::make_batch({10, 14, 8}, 40, 7).batch);
    references.run(std::span(&batches.back(), 1), trained_head);
    const auto parts = references.memory_parts();
    const bool lists_logits = std::any_of(parts.begin(), parts.end(), [](const auto& part) {
      return part.what.starts_with("logits of reference model reference");
    });
    EXPECT_EQ(lists_logits, config == &with_distillation);
  }
  EXPECT_FALSE(batches[0].reference_logits.contains("reference"));
  const std::vector<double> chunked =
      layers::testing::values_of(batches[0].reference_label_log_probabilities.at("reference"));
  const std::vector<double> whole =
      layers::testing::values_of(batches[1].reference_label_log_probabilities.at("reference"));
  const Tensor& logits = batches[1].reference_logits.at("reference");
  ASSERT_EQ(chunked.size(), 32u);
  ASSERT_EQ(logits.size(0), 32);
  const int64_t* labels = batches[0].labels.data_as<int64_t>();
  for (size_t row = 0; row < chunked.size(); ++row) {
    EXPECT_NEAR(chunked[row], whole[row], 1e-12) << "row " << row;
    if (labels[row] < 0) {
      EXPECT_EQ(chunked[row], 0.0) << "masked row " << row;
      continue;
    }
    // log_softmax of the kept logits at the label, written here.
    const double* values = logits.data_as<double>() + int64_t(row) * 40;
    double sum = 0;
    for (int64_t column = 0; column < 40; ++column) sum += std::exp(values[column]);
    EXPECT_NEAR(chunked[row], values[labels[row]] - std::log(sum), 1e-12) << "row " << row;
  }
}

// When the trained head computes the loss rows only, so does the reference, its last block on those rows alone
// (GPTModel::compute_last_block_on_loss_rows_when): its label log-probabilities are those of every row, at those rows.
TEST(ReferenceModelsOutputs, LossRowsAreEveryRowsAtThoseRows) {
  const GPTTrainerConfig config =
      load(trainer_tree("{dpo: {type: dpo, reference_model: reference}}", "{data: {truncate_documents: false}}"));
  ReferenceModels references(config, Device::cpu());
  references.load();
  const layers::LanguageModelHead trained_head("head", config.model.base_model.head, 16, 40, 1.0);
  layers::testing::BatchData every_row = layers::testing::make_batch({10, 14, 8}, 40, 7);
  layers::testing::BatchData loss_rows = layers::testing::make_batch({10, 14, 8}, 40, 7);
  const layers::LossRows rows = layers::find_loss_rows(loss_rows.labels, {});
  layers::attach_loss_rows(loss_rows.batch, rows);
  ASSERT_TRUE(trained_head.computes_loss_rows_only(loss_rows.batch));
  references.run(std::span(&every_row.batch, 1), trained_head);
  references.run(std::span(&loss_rows.batch, 1), trained_head);
  const std::vector<double> whole =
      layers::testing::values_of(every_row.batch.reference_label_log_probabilities.at("reference"));
  const std::vector<double> compact =
      layers::testing::values_of(loss_rows.batch.reference_label_log_probabilities.at("reference"));
  ASSERT_EQ(whole.size(), 32u);
  ASSERT_EQ(compact.size(), rows.rows.size());
  for (size_t index = 0; index < rows.rows.size(); ++index)
    EXPECT_NEAR(compact[index], whole[size_t(rows.rows[index])], 1e-12) << "loss row " << index;
}

TEST_F(ReferenceModelsTest, AReferenceFromACheckpointTakesItsArchitecture) {
  // A teacher of another width, trained two steps and exported in the fast_llm format.
  YAML::Node teacher = trainer_tree("{cross_entropy: {type: label}}",
                                    "{training: {train_iters: 2, export: {interval: 2, format: fast_llm}}, "
                                    "model: {base_model: {hidden_size: 24}}}");
  teacher.remove("reference_models");
  train_records(teacher, "teacher");
  const fs::path exported = directory_ / "teacher" / "export" / "fast_llm" / "2";
  ASSERT_TRUE(fs::exists(exported));
  // The student names the checkpoint only: the architecture (hidden 24) comes from it.
  YAML::Node student = trainer_tree("{distillation: {type: distillation, reference_model: reference}}");
  student["reference_models"]["reference"] =
      YAML::Load("{pretrained: {format: fast_llm, path: '" + exported.string() + "'}}");
  testing::ScopedEnvironment environment(testing::single_process());
  const GPTTrainerConfig config = load(student);
  EXPECT_EQ(config.reference_models.at("reference").model.base_model.hidden_size, 24);
  const auto records = train_records(student, "student");
  ASSERT_EQ(records.size(), 4u);
  EXPECT_GT(records[0]["distillation"].get<double>(), 0.0);
  EXPECT_LT(records.back()["distillation"].get<double>(), records[0]["distillation"].get<double>());
}

TEST(ReferenceModelsConfig, Errors) {
  testing::ScopedEnvironment environment(testing::single_process());
  EXPECT_NE(config_error(trainer_tree("{distillation: {type: distillation, reference_model: teacher}}"))
                .find("no reference model named 'teacher'"),
            std::string::npos);
  EXPECT_NE(config_error(trainer_tree("{cross_entropy: {type: label}}")).find("reads this reference model"),
            std::string::npos);
  EXPECT_NE(config_error(trainer_tree("{dpo: {type: dpo, reference_model: reference}}")).find("truncate_documents"),
            std::string::npos);
  EXPECT_NE(config_error(trainer_tree("{dpo: {type: dpo}}", "{data: {truncate_documents: false}}"))
                .find("reference_model"),
            std::string::npos);
  EXPECT_NE(config_error(trainer_tree("{distillation: {type: distillation, reference_model: reference}}",
                                      "{reference_models: {reference: {model: {base_model: {embeddings: "
                                      "{vocab_size: 41}}}}}}"))
                .find("vocabulary of 41"),
            std::string::npos);
  EXPECT_NE(config_error(trainer_tree("{distillation: {type: distillation, reference_model: reference}}",
                                      "{reference_models: {reference: {model: {base_model: {head: "
                                      "{final_logit_softcap: 30.0}}}}}}"))
                .find("final_logit_softcap"),
            std::string::npos);
  YAML::Node distilled = trainer_tree("{cross_entropy: {type: label}}");
  distilled["model"]["base_model"]["decoder"]["block"]["distillation_model"] = "teacher";
  EXPECT_NE(config_error(distilled).find("distillation_model: no reference model named 'teacher'"), std::string::npos)
      << config_error(distilled);
  distilled["model"]["base_model"]["decoder"]["block"]["distillation_model"] = "reference";
  distilled["reference_models"]["reference"]["model"]["base_model"]["hidden_size"] = 24;
  EXPECT_NE(config_error(distilled).find("width 24"), std::string::npos) << config_error(distilled);
}

}  // namespace
}  // namespace fast_llm::models::gpt
