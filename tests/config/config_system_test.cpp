// Tests of the config machinery on small configs defined here: reading, defaults, overrides, unknown keys, dynamic
// types, validation paths, printing, architecture comparison and the not-supported-yet marker.
#include <gtest/gtest.h>

#include "fast_llm/config/config.h"

namespace fast_llm::config {
namespace {

enum class Activation { gelu, silu };
}  // namespace

template <>
struct EnumNames<Activation> {
  static constexpr std::array<std::pair<Activation, std::string_view>, 2> values{
      {{Activation::gelu, "gelu"}, {Activation::silu, "silu"}}};
};

namespace {

struct NormConfig : Config {
  static constexpr std::string_view kDefaultType = "layer_norm";
  double epsilon = 1e-5;
  void visit(Visitor& v) override {
    v(epsilon, "epsilon", "Regularizer.", Hint::architecture, check::gt(0.0));
  }
};
struct LayerNormConfig : NormConfig {};
struct RmsNormConfig : NormConfig {
  bool zero_centered = false;
  void visit(Visitor& v) override {
    NormConfig::visit(v);
    v(zero_centered, "zero_centered", "Weight is 1 + w.", Hint::architecture);
  }
};
FLM_REGISTER_CONFIG(NormConfig, LayerNormConfig, "layer_norm");
FLM_REGISTER_CONFIG(NormConfig, RmsNormConfig, "rms_norm");

struct AttentionConfig : Config {
  int heads = 8;
  int head_groups = 1;
  std::optional<int> window_size;
  void visit(Visitor& v) override {
    v(heads, "heads", "Number of heads.", Hint::architecture, check::gt(0));
    v(head_groups, "head_groups", "Key-value groups.", Hint::architecture, check::gt(0));
    v(window_size, "window_size", "Sliding window.", Hint::feature, check::gt(0),
      not_supported_yet(std::optional<int>()));
  }
  void check() const override {
    if (heads % head_groups != 0) fail("head_groups", fmt::format("must divide heads ({})", heads));
  }
};

struct ModelConfig : Config {
  int hidden_size = 1024;
  Activation activation = Activation::gelu;
  std::string name = "model";
  std::vector<int> sizes{1, 2};
  AttentionConfig attention;
  Dynamic<NormConfig> normalization;
  std::map<std::string, Dynamic<NormConfig>> extra_norms;
  int derived_head_size = 0;
  void visit(Visitor& v) override {
    v(hidden_size, "hidden_size", "Hidden size.", Hint::architecture, check::gt(0));
    v(activation, "activation", "Activation.", Hint::architecture);
    v(name, "name", "A name.", Hint::core);
    v(sizes, "sizes", "Sizes.", Hint::optional);
    v(attention, "attention", "Attention.", Hint::architecture);
    v(normalization, "normalization", "Normalization.", Hint::architecture);
    v(extra_norms, "extra_norms", "More norms.", Hint::optional);
    v(derived_head_size, "derived_head_size", "Derived.", Hint::derived);
  }
  // derive() runs before checks, so it guards against values the checks will reject.
  void derive() override { derived_head_size = attention.heads > 0 ? hidden_size / attention.heads : 0; }
};

ModelConfig load(const std::string& text, std::vector<std::string> overrides = {}) {
  YAML::Node node = YAML::Load(text);
  for (const auto& assignment : overrides) apply_override(node, assignment);
  ModelConfig config;
  config.load(node);
  config.validate();
  return config;
}

std::string error_of(const std::string& text, std::vector<std::string> overrides = {}) {
  try {
    load(text, overrides);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

TEST(ConfigSystem, DefaultsAndValues) {
  ModelConfig config = load("{hidden_size: 512, activation: silu, attention: {heads: 4}}");
  EXPECT_EQ(config.hidden_size, 512);
  EXPECT_EQ(config.activation, Activation::silu);
  EXPECT_EQ(config.attention.heads, 4);
  EXPECT_EQ(config.attention.head_groups, 1);
  EXPECT_EQ(config.derived_head_size, 128);
  EXPECT_EQ(config.normalization.type(), "layer_norm");
  EXPECT_TRUE(config.is_explicit("hidden_size"));
  EXPECT_FALSE(config.is_explicit("name"));
}

// Plain scalars read as PyYAML (YAML 1.1) reads them, so a Fast-LLM config means the same here; and an exponent
// without a dot is the number its writer meant (PyYAML would make it a string that Fast-LLM refuses).
TEST(ConfigSystem, Yaml11ScalarsMeanWhatPyYamlReads) {
  for (const char* yes : {"yes", "Yes", "YES", "on", "On", "ON", "true", "True", "TRUE"})
    EXPECT_TRUE(load(fmt::format("{{normalization: {{type: rms_norm, zero_centered: {}}}}}", yes))
                    .normalization.as<RmsNormConfig>()
                    ->zero_centered)
        << yes;
  for (const char* no : {"no", "No", "NO", "off", "Off", "OFF", "false", "False", "FALSE"})
    EXPECT_FALSE(load(fmt::format("{{normalization: {{type: rms_norm, zero_centered: {}}}}}", no))
                     .normalization.as<RmsNormConfig>()
                     ->zero_centered)
        << no;
  // y and n are strings to PyYAML.
  EXPECT_NE(error_of("{normalization: {type: rms_norm, zero_centered: y}}").find("expected true or false"),
            std::string::npos);
  const std::pair<const char*, int> integers[] = {{"100_000", 100000}, {"010", 8},  {"0x1F", 31},  {"0b101", 5},
                                                  {"1:30", 90},        {"+12", 12}, {"4096.0", 4096}, {"1e3", 1000}};
  for (const auto& [text, value] : integers) EXPECT_EQ(load(fmt::format("{{hidden_size: {}}}", text)).hidden_size, value) << text;
  const std::pair<const char*, double> floats[] = {{"1.0e-05", 1e-5}, {"1e-05", 1e-5}, {"1E-5", 1e-5},  {".5", 0.5},
                                                   {"1_000.5", 1000.5}, {"010", 8.0},   {"1:30.5", 90.5}};
  for (const auto& [text, value] : floats)
    EXPECT_DOUBLE_EQ(load(fmt::format("{{normalization: {{epsilon: {}}}}}", text)).normalization->epsilon, value)
        << text;
  for (const char* bad : {"_1", "0x", "1:60", "1e5_0", "0x1p3", "infinity", "1.2.3"})
    EXPECT_NE(error_of(fmt::format("{{hidden_size: {}}}", bad)).find("hidden_size"), std::string::npos) << bad;
  EXPECT_NE(error_of("{hidden_size: 99999999999999999999}").find("out of range"), std::string::npos);
  EXPECT_NE(error_of("{normalization: {epsilon: -1:30.5}}").find("got -90.5"), std::string::npos);
}

TEST(ConfigSystem, OverridesSetOnlyTheLeaf) {
  ModelConfig config = load("{attention: {heads: 4, head_groups: 2}}", {"attention.heads=8", "normalization.type=rms_norm",
                                                                         "normalization.epsilon=1e-6"});
  EXPECT_EQ(config.attention.heads, 8);
  EXPECT_EQ(config.attention.head_groups, 2);
  ASSERT_TRUE(config.normalization.is<RmsNormConfig>());
  EXPECT_DOUBLE_EQ(config.normalization->epsilon, 1e-6);
}

TEST(ConfigSystem, UnknownKeySuggestsNearest) {
  std::string message = error_of("{hiden_size: 3}");
  EXPECT_NE(message.find("hiden_size"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'hidden_size'"), std::string::npos) << message;
  message = error_of("{attention: {haeds: 3}}");
  EXPECT_NE(message.find("attention.haeds"), std::string::npos) << message;
}

TEST(ConfigSystem, WrongTypesAndInvalidValuesNameThePath) {
  EXPECT_NE(error_of("{hidden_size: abc}").find("hidden_size: expected an integer"), std::string::npos);
  EXPECT_NE(error_of("{attention: {heads: 0}}").find("attention.heads: must be greater than 0"), std::string::npos);
  EXPECT_NE(error_of("{attention: {heads: 8, head_groups: 3}}").find("attention.head_groups: must divide heads"),
            std::string::npos);
  EXPECT_NE(error_of("{activation: swish}").find("activation: unknown value 'swish'"), std::string::npos);
  EXPECT_NE(error_of("{normalization: {type: rms}}").find("normalization.type: unknown type 'rms'"),
            std::string::npos);
  EXPECT_NE(error_of("{normalization: {type: rms_norm, epsilon: -1}}").find("normalization.epsilon"),
            std::string::npos);
  EXPECT_NE(error_of("{attention: {window_size: 0}}").find("attention.window_size"), std::string::npos);
  EXPECT_NE(error_of("{sizes: 3}").find("sizes: expected a list"), std::string::npos);
  // A list or mapping as the key of a map-valued field (found by fuzz_config: it escaped as a yaml-cpp exception).
  EXPECT_NE(error_of("{extra_norms: {[a, b]: {}}}").find("extra_norms: keys must be plain names"), std::string::npos);
  EXPECT_NE(error_of("{extra_norms: {{a: 1}: {}}}").find("extra_norms: keys must be plain names"), std::string::npos);
}

TEST(ConfigSystem, DynamicMapsAndRoundTrip) {
  ModelConfig config = load("{extra_norms: {a: {type: rms_norm, zero_centered: true}, b: {}}}");
  ASSERT_EQ(config.extra_norms.size(), 2u);
  EXPECT_TRUE(config.extra_norms.at("a").is<RmsNormConfig>());
  EXPECT_TRUE(config.extra_norms.at("b").is<LayerNormConfig>());
  // Everything written reads back to the same everything.
  std::string written = config.to_yaml_string();
  ModelConfig reread;
  reread.load(YAML::Load(written));
  reread.validate();
  EXPECT_EQ(reread.to_yaml_string(), written);
  // Explicit-only output has only what was given.
  YAML::Node explicit_only = config.to_yaml(WriteOptions{.explicit_only = true});
  EXPECT_FALSE(explicit_only["hidden_size"]);
  EXPECT_TRUE(explicit_only["extra_norms"]["a"]["zero_centered"].as<bool>());
}

TEST(ConfigSystem, CopiesAreDeep) {
  ModelConfig config = load("{normalization: {type: rms_norm}}");
  ModelConfig copy = config;
  copy.normalization->epsilon = 0.5;
  EXPECT_DOUBLE_EQ(config.normalization->epsilon, 1e-5);
}

TEST(ConfigSystem, ArchitectureComparison) {
  ModelConfig a = load("{hidden_size: 512, name: x}");
  ModelConfig b = load("{hidden_size: 256, name: y, normalization: {type: rms_norm}}");
  auto differences = compare_architecture(a, b);
  // hidden_size, normalization.type, and the field only rms_norm has.
  ASSERT_EQ(differences.size(), 3u);
  EXPECT_EQ(differences[0], "hidden_size: 512 != 256");
  EXPECT_EQ(differences[1], "normalization.type: layer_norm != rms_norm");
  EXPECT_EQ(differences[2], "normalization.zero_centered: (absent) != false");
  EXPECT_TRUE(compare_architecture(a, load("{hidden_size: 512, name: z}")).empty());
}

TEST(ConfigSystem, NotSupportedYetIsReportedNotSilent) {
  EXPECT_TRUE(load("{}").unsupported_fields().empty());
  auto messages = load("{attention: {window_size: 4096}}").unsupported_fields();
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_NE(messages[0].find("attention.window_size: 4096 is not supported yet"), std::string::npos) << messages[0];
}

TEST(ConfigSystem, OverrideSyntaxErrors) {
  YAML::Node node;
  EXPECT_THROW(apply_override(node, "no_equals"), ConfigError);
  EXPECT_THROW(apply_override(node, "a..b=1"), ConfigError);
  apply_override(node, "a.b.c=[1, 2]");
  EXPECT_EQ(node["a"]["b"]["c"].size(), 2u);
}

TEST(ConfigSystem, NearestName) {
  EXPECT_EQ(nearest_name("hiden_size", {"hidden_size", "heads"}), "hidden_size");
  EXPECT_FALSE(nearest_name("completely_different", {"hidden_size", "heads"}).has_value());
}

}  // namespace
}  // namespace fast_llm::config
