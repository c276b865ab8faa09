#include "fast_llm/cli/config_loading.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>

#include "fast_llm/core/logging.h"
#include "fast_llm/engine/checkpoint/directory.h"

namespace fast_llm::cli {

YAML::Node read_config_tree(const std::optional<std::filesystem::path>& config_file,
                            const std::vector<std::string>& overrides) {
  // config::load_yaml_file reads what it is given; a folder, or a path the system cannot look at, is refused here
  // with the reason (a missing file is its own error).
  if (config_file && engine::file_type_of(*config_file, "config") == std::filesystem::file_type::directory)
    throw Error("config", fmt::format("{}: is a folder, not a YAML config file", config_file->string()));
  YAML::Node root = config_file ? config::load_yaml_file(*config_file) : YAML::Node(YAML::NodeType::Map);
  for (const auto& assignment : overrides) config::apply_override(root, assignment);
  return root;
}

void load_config(config::Config& config, const std::optional<std::filesystem::path>& config_file,
                 const std::vector<std::string>& overrides) {
  config.load(read_config_tree(config_file, overrides));
  config.validate();
}

void print_resolved_config(const config::Config& config) {
  std::string text = config.to_yaml_string(config::WriteOptions{.verbose = config::kVerboseEverything});
  write_to_standard_output(text);
  for (const auto& message : config.unsupported_fields()) log_warning("{} (a run would stop here)", message);
}

void require_supported(const config::Config& config) {
  auto messages = config.unsupported_fields();
  if (messages.empty()) return;
  throw NotSupportedError("config", fmt::format("this configuration asks for things fast-llm does not do yet:\n  {}",
                                                fmt::join(messages, "\n  ")));
}

}  // namespace fast_llm::cli
