// Fast-LLM's configuration forms before 0.4 (still in its documentation) are rewritten into the current ones with a
// warning each; both spellings with different values are an error naming both.
#include <gtest/gtest.h>

#include "fast_llm/core/error.h"
#include "fast_llm/engine/training/legacy_forms.h"

namespace fast_llm::engine {
namespace {

std::string dump(const YAML::Node& node) {
  YAML::Emitter emitter;
  emitter << YAML::Flow << node;
  return emitter.c_str();
}

std::string error_of(YAML::Node tree) {
  try {
    migrate_legacy_config_forms(tree);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

TEST(LegacyForms, NestedEvaluatorsAreFlattenedAndNamedAfterTheirDataset) {
  YAML::Node tree = YAML::Load(R"(
training:
  evaluators:
    validation: {interval: 100, evaluator: {type: loss, iterations: 25, dataset_name: validation}}
    stack: {interval: 50, offset: 3, evaluator: {type: loss, iterations: 5, dataset_name: the_stack}}
    current: {type: loss, interval: 10, iterations: 2}
)");
  const auto warnings = migrate_legacy_config_forms(tree);
  ASSERT_EQ(warnings.size(), 2u);
  const YAML::Node evaluators = tree["training"]["evaluators"];
  EXPECT_EQ(evaluators["validation"]["iterations"].as<int>(), 25);
  EXPECT_EQ(evaluators["validation"]["interval"].as<int>(), 100);
  EXPECT_EQ(evaluators["validation"]["type"].as<std::string>(), "loss");
  EXPECT_FALSE(evaluators["validation"]["evaluator"]);
  EXPECT_FALSE(evaluators["stack"]);
  EXPECT_EQ(evaluators["the_stack"]["offset"].as<int>(), 3);
  EXPECT_EQ(evaluators["the_stack"]["iterations"].as<int>(), 5);
  EXPECT_EQ(evaluators["current"]["iterations"].as<int>(), 2);
  EXPECT_NE(warnings[1].find("data.datasets.the_stack"), std::string::npos) << warnings[1];
}

TEST(LegacyForms, ValidationAndEvaluationsBecomeLossEvaluators) {
  YAML::Node tree = YAML::Load(
      "{training: {validation: {interval: 10, iterations: 3}, evaluations: {held_out: {interval: 20, iterations: 4}}}}");
  const auto warnings = migrate_legacy_config_forms(tree);
  EXPECT_EQ(warnings.size(), 2u);
  EXPECT_EQ(dump(tree["training"]), "{evaluators: {validation: {interval: 10, iterations: 3, type: loss}, held_out: "
                                    "{interval: 20, iterations: 4, type: loss}}}");
  EXPECT_NE(error_of(YAML::Load("{training: {validation: {iterations: 3}, evaluators: {validation: {type: loss}}}}"))
                .find("training.evaluators.validation"),
            std::string::npos);
}

TEST(LegacyForms, DataSamplingMovesUpAndSampledDatasetsUnwrap) {
  YAML::Node tree = YAML::Load(R"(
data:
  sampling: {shuffle: skip_first_epoch, seed: 1234}
  datasets:
    training:
      type: blended
      datasets:
        - {type: sampled, dataset: {type: file, path: a.yaml}, sampling: {seed: 1}}
        - {type: file, path: b.yaml}
      weights: [0.5, 0.5]
    validation: {type: sampled, dataset: {type: sampled, dataset: {type: memmap, path: v}}}
)");
  const auto warnings = migrate_legacy_config_forms(tree);
  EXPECT_EQ(warnings.size(), 4u);
  const YAML::Node data = tree["data"];
  EXPECT_FALSE(data["sampling"]);
  EXPECT_EQ(data["shuffle"].as<std::string>(), "skip_first_epoch");
  EXPECT_EQ(data["seed"].as<int>(), 1234);
  EXPECT_EQ(dump(data["datasets"]["training"]["datasets"][0]), "{type: file, path: a.yaml}");
  EXPECT_EQ(dump(data["datasets"]["validation"]), "{type: memmap, path: v}");
  bool names_dropped_settings = false;
  for (const auto& warning : warnings) names_dropped_settings |= warning.find("{seed: 1}") != std::string::npos;
  EXPECT_TRUE(names_dropped_settings);

  EXPECT_NE(error_of(YAML::Load("{data: {seed: 5, sampling: {seed: 6}}}")).find("data.seed"), std::string::npos);
  EXPECT_EQ(error_of(YAML::Load("{data: {seed: 5, sampling: {seed: 5}}}")), "");
  EXPECT_NE(error_of(YAML::Load("{data: {datasets: {x: {type: sampled}}}}")).find("data.datasets.x.dataset"),
            std::string::npos);
}

TEST(LegacyForms, EvaluationsWithNestedEvaluatorsTakeTheirOwnType) {
  YAML::Node tree = YAML::Load("{training: {evaluations: {stack: {interval: 5, evaluator: {type: loss, iterations: 2, "
                               "dataset_name: the_stack}}}}}");
  EXPECT_EQ(migrate_legacy_config_forms(tree).size(), 2u);
  EXPECT_EQ(dump(tree["training"]), "{evaluators: {the_stack: {interval: 5, type: loss, iterations: 2}}}");
}

TEST(LegacyForms, TwoNestedEvaluatorsOfOneDatasetAreRefusedByName) {
  const std::string error = error_of(YAML::Load(
      "{training: {evaluators: {a: {evaluator: {type: loss, dataset_name: v}}, b: {evaluator: {type: loss, "
      "dataset_name: v}}}}}"));
  EXPECT_NE(error.find("training.evaluators.b"), std::string::npos) << error;
  EXPECT_NE(error.find("as does evaluator `a`"), std::string::npos) << error;
}

TEST(LegacyForms, DataTokenizerGoesToLmEvalEvaluatorsAndFimDatasets) {
  YAML::Node tree = YAML::Load(R"(
data:
  tokenizer: {path: tok.json}
  datasets:
    training: {type: blended, datasets: [{type: fim, dataset: {type: file, path: a.yaml}}, {type: file, path: b.yaml}],
               weights: [1, 1]}
    code: {type: fim, dataset: {type: file, path: c.yaml}, tokenizer: {path: own.json}}
training:
  evaluators:
    harness: {type: lm_eval}
    validation: {type: loss}
)");
  const auto warnings = migrate_legacy_config_forms(tree);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("training.evaluators.harness.tokenizer"), std::string::npos) << warnings[0];
  EXPECT_FALSE(tree["data"]["tokenizer"]);
  EXPECT_EQ(dump(tree["data"]["datasets"]["training"]["datasets"][0]["tokenizer"]), "{path: tok.json}");
  EXPECT_FALSE(tree["data"]["datasets"]["training"]["datasets"][1]["tokenizer"]);
  EXPECT_EQ(dump(tree["data"]["datasets"]["code"]["tokenizer"]), "{path: own.json}");
  EXPECT_EQ(dump(tree["training"]["evaluators"]["harness"]["tokenizer"]), "{path: tok.json}");
  EXPECT_FALSE(tree["training"]["evaluators"]["validation"]["tokenizer"]);

  YAML::Node unused = YAML::Load("{data: {tokenizer: {path: t.json}}}");
  const auto unused_warnings = migrate_legacy_config_forms(unused);
  ASSERT_EQ(unused_warnings.size(), 1u);
  EXPECT_NE(unused_warnings[0].find("ignored"), std::string::npos) << unused_warnings[0];
}

TEST(LegacyForms, CurrentFormsAreLeftAlone) {
  const std::string text = "{training: {evaluators: {validation: {type: loss, interval: 1, iterations: 2}}}, data: "
                           "{seed: 3, datasets: {training: {type: random}}}}";
  YAML::Node tree = YAML::Load(text);
  EXPECT_TRUE(migrate_legacy_config_forms(tree).empty());
  EXPECT_EQ(dump(tree), dump(YAML::Load(text)));
}

}  // namespace
}  // namespace fast_llm::engine
