// The fast_llm_config*.yaml contents: one shard, a blend, and splits cut at the document boundaries Fast-LLM picks.
#include <gtest/gtest.h>

#include "fast_llm/preparation/dataset_configs.h"

namespace fast_llm::preparation {
namespace {

// A shard of documents of the given sizes.
ShardSummary shard(const std::string& path, const std::vector<int64_t>& sizes, bool spans = false) {
  ShardSummary summary;
  summary.path = path;
  summary.data_type = "uint16";
  if (spans) summary.loss_masking_cumsum.emplace(1, 0);
  for (int64_t size : sizes) {
    summary.size_cumsum.push_back(summary.size_cumsum.back() + size);
    if (spans) summary.loss_masking_cumsum->push_back(summary.loss_masking_cumsum->back() + 1);
  }
  return summary;
}

TEST(DatasetConfigs, NearestDocumentBoundary) {
  const std::vector<int64_t> cumsum{10, 20, 30, 40};
  EXPECT_EQ(nearest_document_boundary(cumsum, 0.0), 0);
  EXPECT_EQ(nearest_document_boundary(cumsum, 5.0), 0);   // halfway: the lower boundary
  EXPECT_EQ(nearest_document_boundary(cumsum, 5.5), 1);
  EXPECT_EQ(nearest_document_boundary(cumsum, 20.0), 2);
  EXPECT_EQ(nearest_document_boundary(cumsum, 24.0), 2);
  EXPECT_EQ(nearest_document_boundary(cumsum, 26.0), 3);
  EXPECT_EQ(nearest_document_boundary(cumsum, 40.0), 4);
}

TEST(DatasetConfigs, OneShardIsAMemmapAndSeveralABlendByTokens) {
  const DatasetDescription one = describe_shards({shard("shard_0_0.fast_llm_dataset", {3, 4}, true)});
  EXPECT_EQ(dataset_config_yaml(one),
            "config:\n  path: shard_0_0.fast_llm_dataset\n  type: memmap\nmetadata:\n  loss_masking_spans:\n"
            "    num_documents: 2\n    num_ranges: 2\n  num_tokens: 7\n  tokens:\n    data_type: uint16\n"
            "    num_documents: 2\n    num_tokens: 7\n");
  const DatasetDescription two = describe_shards({shard("a", {3, 4}), shard("b", {5})});
  EXPECT_EQ(two.config["type"], "blended");
  EXPECT_EQ(two.config["weights"], nlohmann::json({7, 5}));
  EXPECT_EQ(two.config["datasets"][1]["path"], "b");
  EXPECT_EQ(two.metadata["num_tokens"], 12);
  EXPECT_EQ(two.metadata["tokens"]["num_documents"], 3);
}

TEST(DatasetConfigs, SplitsCutByTokenFractionAtDocumentBoundaries) {
  // 80 tokens in two shards; 75% / 25%: shard a whole and half of b, then the other half of b.
  const std::vector<ShardSummary> shards{shard("a", {10, 10, 10, 10}), shard("b", {10, 10, 10, 10})};
  std::vector<std::string> empty;
  const auto splits = split_shards(shards, {{"training", 0.75}, {"validation", 0.25}}, empty);
  EXPECT_TRUE(empty.empty());
  ASSERT_EQ(splits.size(), 2u);
  const nlohmann::json& training = splits[0].second.config;
  EXPECT_EQ(training["type"], "blended");
  EXPECT_EQ(training["datasets"][0], nlohmann::json({{"type", "memmap"}, {"path", "a"}}));
  EXPECT_EQ(training["datasets"][1]["type"], "slice");
  EXPECT_EQ(training["datasets"][1]["begin"], 0.0);
  EXPECT_EQ(training["datasets"][1]["end"], 0.5);
  EXPECT_EQ(training["weights"], nlohmann::json({40, 20}));
  EXPECT_EQ(splits[0].second.metadata["num_tokens"], 60);
  const nlohmann::json& validation = splits[1].second.config;
  EXPECT_EQ(validation["type"], "slice");
  EXPECT_EQ(validation["begin"], 0.5);
  EXPECT_EQ(validation["end"], 1.0);
  EXPECT_EQ(splits[1].second.metadata["tokens"]["num_documents"], 2);
  const std::string yaml = dataset_config_yaml(splits[1].second);
  EXPECT_NE(yaml.find("begin: 0.5\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("end: 1.0\n"), std::string::npos) << yaml;
}

TEST(DatasetConfigs, ASplitTooSmallForOneDocumentIsReported) {
  std::vector<std::string> empty;
  const auto splits = split_shards({shard("a", {10, 10, 10})}, {{"training", 0.99}, {"validation", 0.01}}, empty);
  ASSERT_EQ(splits.size(), 1u);
  EXPECT_EQ(splits[0].first, "training");
  EXPECT_EQ(empty, std::vector<std::string>{"validation"});
}

}  // namespace
}  // namespace fast_llm::preparation
