// Parsing YAML text into the trees configs are read from, with PyYAML's meaning where yaml-cpp's differs. Every YAML
// config goes through here: config files, `a.b=value` overrides, dataset config files, checkpoint metadata.
//
// Repeated keys: yaml-cpp keeps every entry of a mapping whose key repeats, and its lookups find the first; PyYAML
// (what Fast-LLM reads its configs with) keeps the last. Here every entry but the last of a repeated key is dropped,
// with a warning naming the source, the key's full path and the lines of both entries.
// Aliases: yaml-cpp lets an alias refer to a node that contains it, which makes a tree without end, and aliases of
// aliases can stand for billions of values or nest without bound; every walk over such a tree (reading a config,
// writing it out) would never finish or would overflow the stack, so they are refused here, once, after parsing.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace fast_llm::config {

// The most values (scalars, lists and mappings, an alias counted as what it stands for) a parsed document may hold.
inline constexpr int64_t kMaxYamlValues = 1'000'000;
// The deepest nesting of lists and mappings (aliases expanded) a parsed document may have.
inline constexpr int kMaxYamlDepth = 500;

// Parses `text` (one YAML document). `source` names it in errors and warnings (a file name, "override 'a.b=...'");
// `path` is the dotted config path the document sits at ("" for a whole config). Errors are ConfigError naming the
// source and the line.
YAML::Node parse_yaml(std::string_view text, std::string_view source, const std::string& path = "");

// Loads a YAML file whose top level is a mapping (an empty file is an empty mapping), naming the file in any error
// (missing, unreadable, malformed with line and column).
YAML::Node load_yaml_file(const std::filesystem::path& path);

}  // namespace fast_llm::config
