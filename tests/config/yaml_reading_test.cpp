// Tests of parsing YAML configs as Fast-LLM (PyYAML) reads them: a repeated key takes its last value, with a warning
// naming the source, the key's full path and both lines, at any depth, in files and in overrides; aliases that make a
// tree contain itself, expand too far or nest too deep are refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "fast_llm/config/config.h"

namespace fast_llm::config {
namespace {

struct BlockConfig : Config {
  int heads = 8;
  int head_groups = 1;
  void visit(Visitor& v) override {
    v(heads, "heads", "Number of heads.", Hint::architecture, check::gt(0));
    v(head_groups, "head_groups", "Key-value groups.", Hint::architecture, check::gt(0));
  }
};

struct ModelConfig : Config {
  int hidden_size = 1024;
  BlockConfig block;
  std::vector<BlockConfig> extra_blocks;
  void visit(Visitor& v) override {
    v(hidden_size, "hidden_size", "Hidden size.", Hint::architecture, check::gt(0));
    v(block, "block", "The block.", Hint::architecture);
    v(extra_blocks, "extra_blocks", "More blocks.", Hint::architecture);
  }
};

struct Loaded {
  ModelConfig config;
  std::string warnings;  // what was logged while parsing
};

Loaded load(const std::string& text, const std::vector<std::string>& overrides = {}) {
  Loaded loaded;
  ::testing::internal::CaptureStderr();
  YAML::Node node;
  try {
    node = parse_yaml(text, "config.yaml");
    for (const auto& assignment : overrides) apply_override(node, assignment);
  } catch (...) {
    ::testing::internal::GetCapturedStderr();
    throw;
  }
  loaded.warnings = ::testing::internal::GetCapturedStderr();
  loaded.config.load(node);
  loaded.config.validate();
  return loaded;
}

std::string error_of(const std::string& text) {
  try {
    parse_yaml(text, "config.yaml");
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

TEST(YamlReading, RepeatedKeyTakesTheLastValueAndWarns) {
  Loaded loaded = load("hidden_size: 512\n"
                       "block: {heads: 4}\n"
                       "hidden_size: 256\n");
  EXPECT_EQ(loaded.config.hidden_size, 256);
  EXPECT_EQ(loaded.config.block.heads, 4);
  EXPECT_NE(loaded.warnings.find("config.yaml: 'hidden_size' is given twice (line 1 and line 3); the value on line 3 is "
                                 "used, as in Fast-LLM"),
            std::string::npos)
      << loaded.warnings;
}

TEST(YamlReading, RepeatedKeyInNestedMappingsAndListsNamesTheFullPath) {
  Loaded loaded = load("block:\n"
                       "  heads: 2\n"
                       "  head_groups: 2\n"
                       "  heads: 6\n"
                       "extra_blocks:\n"
                       "  - {heads: 4}\n"
                       "  - head_groups: 3\n"
                       "    heads: 9\n"
                       "    head_groups: 1\n");
  EXPECT_EQ(loaded.config.block.heads, 6);
  EXPECT_EQ(loaded.config.block.head_groups, 2);
  ASSERT_EQ(loaded.config.extra_blocks.size(), 2u);
  EXPECT_EQ(loaded.config.extra_blocks[1].heads, 9);
  EXPECT_EQ(loaded.config.extra_blocks[1].head_groups, 1);
  EXPECT_NE(loaded.warnings.find("'block.heads' is given twice (line 2 and line 4)"), std::string::npos)
      << loaded.warnings;
  EXPECT_NE(loaded.warnings.find("'extra_blocks[1].head_groups' is given twice (line 7 and line 9)"), std::string::npos)
      << loaded.warnings;
}

TEST(YamlReading, RepeatedMappingIsReplacedNotMerged) {
  // PyYAML keeps the last mapping whole: heads from the first one is gone, back to its default.
  Loaded loaded = load("block: {heads: 2}\nblock: {head_groups: 2}\n");
  EXPECT_EQ(loaded.config.block.heads, 8);
  EXPECT_EQ(loaded.config.block.head_groups, 2);
}

TEST(YamlReading, KeyGivenThreeTimesWarnsForEachRepeat) {
  Loaded loaded = load("hidden_size: 1\nhidden_size: 2\n\"hidden_size\": 3\n");
  EXPECT_EQ(loaded.config.hidden_size, 3);
  EXPECT_NE(loaded.warnings.find("(line 1 and line 2)"), std::string::npos) << loaded.warnings;
  EXPECT_NE(loaded.warnings.find("(line 2 and line 3)"), std::string::npos) << loaded.warnings;
}

TEST(YamlReading, RepeatedKeyInAnOverrideValue) {
  Loaded loaded = load("block: {heads: 2}\n", {"block={heads: 4, heads: 12}"});
  EXPECT_EQ(loaded.config.block.heads, 12);
  EXPECT_NE(loaded.warnings.find("override 'block={heads: 4, heads: 12}': 'block.heads' is given twice"),
            std::string::npos)
      << loaded.warnings;
}

TEST(YamlReading, SharedAliasIsResolvedOnce) {
  Loaded loaded = load("block: &shared {heads: 3, heads: 4}\nextra_blocks: [*shared, *shared]\n");
  EXPECT_EQ(loaded.config.block.heads, 4);
  ASSERT_EQ(loaded.config.extra_blocks.size(), 2u);
  EXPECT_EQ(loaded.config.extra_blocks[1].heads, 4);
  const size_t first = loaded.warnings.find("is given twice");
  ASSERT_NE(first, std::string::npos) << loaded.warnings;
  EXPECT_EQ(loaded.warnings.find("is given twice", first + 1), std::string::npos) << loaded.warnings;
}

TEST(YamlReading, NoWarningWithoutRepeatedKeys) {
  EXPECT_EQ(load("hidden_size: 1\nblock: {heads: 2, head_groups: 2}\n").warnings, "");
}

TEST(YamlReading, AliasContainingItselfIsRefused) {
  std::string message = error_of("block: &loop {heads: 2, more: *loop}\n");
  EXPECT_NE(message.find("block.more: config.yaml: line 1: an alias refers to a mapping that contains it"),
            std::string::npos)
      << message;
  message = error_of("&loop [1, *loop]");
  EXPECT_NE(message.find("an alias refers to a list that contains it"), std::string::npos) << message;
}

TEST(YamlReading, AliasExpansionIsBounded) {
  // Ten levels of ten aliases each stand for 10^10 values.
  std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level < 10; ++level) {
    text += fmt::format("a{}: &a{} [", level, level);
    for (int copy = 0; copy < 10; ++copy) text += fmt::format("{}*a{}", copy ? ", " : "", level - 1);
    text += "]\n";
  }
  const std::string message = error_of(text);
  EXPECT_NE(message.find("aliases expand this to more than 1000000 values"), std::string::npos) << message;
  // Five levels (10^5 values) are fine.
  EXPECT_EQ(error_of(text.substr(0, text.find("a5:"))), "");
}

TEST(YamlReading, NestingThroughAliasesIsBounded) {
  // yaml-cpp itself refuses text nested about 500 deep; an alias nested inside lists nests what it stands for deeper.
  auto nested = [](int depth, const std::string& inner) {
    return std::string(size_t(depth), '[') + inner + std::string(size_t(depth), ']');
  };
  const std::string message = error_of("a: &a " + nested(300, "") + "\nb: " + nested(300, "*a") + "\n");
  // The list too deep is inside `a`'s text (line 1), reached from `b`.
  EXPECT_NE(message.find("[config] b[0][0]"), std::string::npos) << message;
  EXPECT_NE(message.find(fmt::format("config.yaml: line 1: nested more than {} levels deep", kMaxYamlDepth)),
            std::string::npos)
      << message;
  EXPECT_EQ(error_of("a: &a " + nested(200, "") + "\nb: " + nested(200, "*a") + "\n"), "");
}

TEST(YamlReading, SyntaxErrorNamesSourceLineAndColumn) {
  const std::string message = error_of("a: 1\nb: [1, 2\n");
  EXPECT_NE(message.find("config.yaml: line 3, column 1:"), std::string::npos) << message;
}

TEST(YamlReading, FilesAreMappings) {
  const std::filesystem::path folder = std::filesystem::temp_directory_path() / "fast_llm_yaml_reading_test";
  std::filesystem::create_directories(folder);
  const std::filesystem::path file = folder / "config.yaml";
  std::ofstream(file) << "";
  EXPECT_TRUE(load_yaml_file(file).IsMap());
  std::ofstream(file, std::ios::trunc) << "- 1\n- 2\n";
  try {
    load_yaml_file(file);
    ADD_FAILURE() << "a list at the top level was accepted";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("the top level must be a mapping"), std::string::npos) << error.what();
  }
  std::ofstream(file, std::ios::trunc) << "a: 1\na: 2\n";
  ::testing::internal::CaptureStderr();
  const YAML::Node node = load_yaml_file(file);
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(node["a"].as<int>(), 2);
  EXPECT_EQ(node.size(), 1u);
  EXPECT_NE(warnings.find(fmt::format("{}: 'a' is given twice (line 1 and line 2)", file.string())), std::string::npos)
      << warnings;
  try {
    load_yaml_file(folder);
    ADD_FAILURE() << "a folder was read as an empty config";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("is a folder, not a config file"), std::string::npos) << error.what();
  }
  std::filesystem::remove_all(folder);
  EXPECT_THROW(load_yaml_file(file), ConfigError);
}

}  // namespace
}  // namespace fast_llm::config
