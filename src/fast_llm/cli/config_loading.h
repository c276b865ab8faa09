// Reading a command's configuration: `-c file.yaml` plus `a.b.c=value` overrides, into a validated config.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "fast_llm/config/config.h"

namespace fast_llm::cli {

// The YAML tree of `config_file` (empty if none) with each override applied in order.
YAML::Node read_config_tree(const std::optional<std::filesystem::path>& config_file,
                            const std::vector<std::string>& overrides);

// Loads and validates `config` from the file and overrides. Errors name the file or the field path.
void load_config(config::Config& config, const std::optional<std::filesystem::path>& config_file,
                 const std::vector<std::string>& overrides);

// Prints the resolved configuration (every field, defaults included) to stdout, and warns on stderr about values
// that have no behaviour yet.
void print_resolved_config(const config::Config& config);

// Throws NotSupportedError listing every value without behaviour yet; called before a command does its work.
void require_supported(const config::Config& config);

}  // namespace fast_llm::cli
