// The preparation configs: Fast-LLM's field names and defaults, what is refused and why, and the pre-0.4 forms.
#include <gtest/gtest.h>

#include "fast_llm/core/error.h"
#include "fast_llm/preparation/gpt_memmap_config.h"
#include "fast_llm/preparation/legacy_prepare_forms.h"

namespace fast_llm::preparation {
namespace {

GPTMemmapPreparatorConfig load(const std::string& text) {
  GPTMemmapPreparatorConfig config;
  YAML::Node tree = YAML::Load(text);
  config.load(tree);
  config.validate();
  return config;
}

// The message of the error `text` raises when loaded and validated.
std::string error_of(const std::string& text) {
  try {
    load(text);
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

constexpr const char* kMinimal = "output_path: out\ndataset: {path: data.jsonl}\ntokenizer: {path: tok.json}\n";

TEST(PreparationConfig, DefaultsAreFastLlms) {
  const GPTMemmapPreparatorConfig config = load(kMinimal);
  EXPECT_EQ(config.documents_per_shard, 1000000);
  EXPECT_TRUE(config.add_bos);
  EXPECT_TRUE(config.add_eos);
  EXPECT_EQ(config.dataset.split, "train");
  EXPECT_EQ(config.dataset.source_schema.type, "document");
  EXPECT_EQ(config.dataset.source_schema.text, "text");
  EXPECT_FALSE(config.dataset.data_type.has_value());
  EXPECT_TRUE(config.splits.entries.empty());
  EXPECT_EQ(config.dataset.path.entries, std::vector<std::string>{"data.jsonl"});
}

TEST(PreparationConfig, PathListsAndSplitOrder) {
  const GPTMemmapPreparatorConfig config =
      load("output_path: out\ntokenizer: {path: t}\nsplits: {validation: 0.1, training: 0.9}\n"
           "dataset: {path: [a.jsonl, 'b/*.txt'], data_type: uint32, trust_remote_code: true}\n");
  EXPECT_EQ(config.dataset.path.entries, (std::vector<std::string>{"a.jsonl", "b/*.txt"}));
  ASSERT_EQ(config.splits.entries.size(), 2u);
  // Written order, not alphabetical: the first split takes the first documents.
  EXPECT_EQ(config.splits.entries[0].first, "validation");
  EXPECT_EQ(config.splits.entries[1].first, "training");
  EXPECT_DOUBLE_EQ(config.splits.entries[1].second, 0.9);
  const std::string yaml = config.to_yaml_string();
  EXPECT_NE(yaml.find("validation: 0.1"), std::string::npos) << yaml;
  EXPECT_LT(yaml.find("validation"), yaml.find("training")) << yaml;
}

TEST(PreparationConfig, HubAndPythonOnlyFieldsAreRefusedWithTheReason) {
  const std::string base = "output_path: out\ntokenizer: {path: t}\n";
  EXPECT_NE(error_of(base + "dataset: {path: d, load_from_disk: true}").find("Arrow"), std::string::npos);
  EXPECT_NE(error_of(base + "dataset: {path: d, config_name: en}").find("dataset.config_name"), std::string::npos);
  EXPECT_NE(error_of(base + "dataset: {path: d, split: test}").find("dataset.split"), std::string::npos);
  EXPECT_NE(error_of(base + "dataset: {path: d, source_schema: {type: conversation}}").find("chat template"),
            std::string::npos);
  EXPECT_NE(error_of(base + "dataset: {path: d, source_schema: {images: i, image_positions: p}}").find("image"),
            std::string::npos);
  EXPECT_NE(error_of(base + "dataset: {path: d, source_schema: {chosen_span: c}}").find("rejected_span"),
            std::string::npos);
  EXPECT_NE(error_of(base + "dataset: {path: d, source_schema: {chosen_span: c, rejected_span: r, "
                            "loss_masking_spans: s}}")
                .find("both"),
            std::string::npos);
  EXPECT_NE(error_of(base + "dataset: {path: d, data_type: float32}").find("dataset.data_type"), std::string::npos);
  EXPECT_NE(error_of(base + "dataset: {path: d}\ndistributed: {world_size: 2}").find("world_size"),
            std::string::npos);
  EXPECT_NE(error_of(base + "dataset: {path: d}\nnum_workers: 0").find("num_workers"), std::string::npos);
  EXPECT_NE(error_of(base + "dataset: {path: d}\nsplits: {a: 0, b: 0}").find("splits"), std::string::npos);
  EXPECT_NE(error_of("output_path: out\ndataset: {path: d}").find("tokenizer"), std::string::npos);
  EXPECT_NE(error_of("output_path: out\ntokenizer: {path: t}").find("dataset.path"), std::string::npos);
  EXPECT_NE(error_of(base + "dataset: {path: d, feld: text}").find("feld"), std::string::npos);
  // Accepted because they change nothing here.
  EXPECT_NO_THROW(load(base + "dataset: {path: d, trust_remote_code: true, disable_disk_space_check: true}"));
}

TEST(PreparationConfig, PreFourFormsMigrateWithWarnings) {
  YAML::Node tree = YAML::Load(
      "output_path: out\nloading_workers: 16\ntokenize_workers: 32\nsaving_workers: 8\n"
      "dataset: {path: d, field: content, loss_masking_spans: spans}\ntokenizer: {path: t}\n");
  const std::vector<std::string> warnings = migrate_legacy_preparation_forms(tree);
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_NE(warnings[0].find("num_workers: 32"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("dataset.source_schema.text: content"), std::string::npos) << warnings[1];
  EXPECT_NE(warnings[2].find("dataset.source_schema.loss_masking_spans: spans"), std::string::npos) << warnings[2];
  GPTMemmapPreparatorConfig config;
  config.load(tree);
  config.validate();
  EXPECT_EQ(config.num_workers, 32);
  EXPECT_EQ(config.dataset.source_schema.text, "content");
  EXPECT_EQ(config.dataset.source_schema.loss_masking_spans, "spans");

  YAML::Node conflict = YAML::Load("dataset: {field: a, source_schema: {text: b}}");
  EXPECT_THROW(migrate_legacy_preparation_forms(conflict), ConfigError);
  YAML::Node workers = YAML::Load("tokenize_workers: 4\nnum_workers: 2");
  EXPECT_THROW(migrate_legacy_preparation_forms(workers), ConfigError);
  YAML::Node current = YAML::Load("num_workers: 2\ndataset: {source_schema: {text: b}}");
  EXPECT_TRUE(migrate_legacy_preparation_forms(current).empty());
}

TEST(PreparationConfig, DatasetDiscoveryNeedsItsFolderAndOutput) {
  DatasetDiscoveryConfig config;
  config.load(YAML::Load("directory: data\noutput: blend.yaml\nignore_paths: [old]"));
  config.validate();
  EXPECT_EQ(config.ignore_paths.size(), 1u);
  DatasetDiscoveryConfig missing;
  missing.load(YAML::Load("directory: data"));
  EXPECT_THROW(missing.validate(), ConfigError);
}

}  // namespace
}  // namespace fast_llm::preparation
