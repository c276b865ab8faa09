// dataset_discovery: the blended tree of a folder's datasets, weighted by tokens, with Fast-LLM's names.
#include <gtest/gtest.h>

#include <fstream>

#include "fast_llm/core/error.h"
#include "fast_llm/data/memmap.h"
#include "fast_llm/preparation/dataset_discovery.h"

namespace fast_llm::preparation {
namespace {

namespace fs = std::filesystem;

class Discovery : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() / "fast_llm_discovery_test" / "root";
    fs::remove_all(folder_.parent_path());
    fs::create_directories(folder_);
  }
  void TearDown() override { fs::remove_all(folder_.parent_path()); }
  // A dataset of one document of `tokens` tokens.
  void dataset(const std::string& name, int64_t tokens) {
    fs::create_directories((folder_ / name).parent_path());
    data::MemmapWriter writer(folder_ / name, {});
    data::Document document;
    document.tokens.assign(size_t(tokens), 1);
    writer.add_document(document);
    writer.finish();
  }
  fs::path folder_;
};

TEST_F(Discovery, FoldersBlendByTokens) {
  dataset("a.fast_llm_dataset", 5);
  dataset("sub/b.fast_llm_dataset", 3);
  dataset("sub/c.fast_llm_dataset", 4);
  dataset("old/d.fast_llm_dataset", 100);
  dataset("one/e.fast_llm_dataset", 2);
  std::ofstream(folder_ / "broken.fast_llm_dataset") << "not a dataset";
  std::ofstream(folder_ / "notes.txt") << "ignored";
  const std::optional<DiscoveryResult> result = discover_datasets(folder_, {"old"});
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->tokens, 14);
  EXPECT_EQ(result->files, 4);
  const nlohmann::ordered_json& config = result->config;
  EXPECT_EQ(config["type"], "blended");
  EXPECT_EQ(config["name"], "root");
  // Sub-folders first (in name order), then the folder's own files.
  ASSERT_EQ(config["datasets"].size(), 3u);
  EXPECT_EQ(config["datasets"][0]["path"], (folder_ / "one/e.fast_llm_dataset").string());
  EXPECT_EQ(config["datasets"][1]["name"], "sub");
  EXPECT_EQ(config["datasets"][1]["weights"], nlohmann::json({3, 4}));
  EXPECT_EQ(config["datasets"][2]["path"], (folder_ / "a.fast_llm_dataset").string());
  EXPECT_EQ(config["weights"], nlohmann::json({2, 7, 5}));

  DatasetDiscoveryConfig command;
  command.load(YAML::Load("directory: " + folder_.string() + "\noutput: " + (folder_ / "out/blend.yaml").string()));
  command.validate();
  run_dataset_discovery(command);
  std::ifstream in(folder_ / "out/blend.yaml");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("# ", 0), 0u) << text;
  EXPECT_NE(text.find("name: root"), std::string::npos) << text;
  EXPECT_NE(text.find("d.fast_llm_dataset"), std::string::npos) << text;  // not ignored this time
}

TEST_F(Discovery, NothingFoundIsAnError) {
  std::ofstream(folder_ / "empty.txt") << "x";
  EXPECT_FALSE(discover_datasets(folder_, {}).has_value());
  DatasetDiscoveryConfig command;
  command.load(YAML::Load("directory: " + folder_.string() + "\noutput: " + (folder_ / "blend.yaml").string()));
  command.validate();
  EXPECT_THROW(run_dataset_discovery(command), Error);
  EXPECT_FALSE(fs::exists(folder_ / "blend.yaml"));
}

}  // namespace
}  // namespace fast_llm::preparation
