#include "fast_llm/config/yaml_reading.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"

namespace fast_llm::config {

namespace {

std::string key_path(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

// One walk over a freshly parsed tree: drops the earlier entries of repeated keys (warning about each) and refuses
// trees that contain themselves, expand to too many values or nest too deep. A collection reached again through an
// alias was already resolved and counted, and is not walked twice.
class TreeResolver {
 public:
  explicit TreeResolver(std::string_view source) : source_(source) {}

  // What `node` stands for, aliases expanded: how many values and how deeply nested.
  struct Extent {
    int64_t values = 1;
    int height = 0;  // levels of lists and mappings
  };

  Extent walk(const YAML::Node& node, const std::string& path) {
    if (!node.IsMap() && !node.IsSequence()) return {};
    const int line = node.Mark().line + 1;
    auto refuse_depth = [&] {
      throw ConfigError(path, fmt::format("{}: line {}: nested more than {} levels deep", source_, line, kMaxYamlDepth));
    };
    // Distinct collections may start at the same place (a block mapping and its first key), hence a list per position.
    if (auto found = resolved_.find(node.Mark().pos); found != resolved_.end())
      for (const Resolved& resolved : found->second)
        if (resolved.node.is(node)) {
          if (open_.size() + size_t(resolved.extent.height) > size_t(kMaxYamlDepth)) refuse_depth();
          return resolved.extent;
        }
    for (const YAML::Node& open : open_)
      if (open.is(node))
        throw ConfigError(path, fmt::format("{}: line {}: an alias refers to a {} that contains it", source_, line,
                                            node.IsMap() ? "mapping" : "list"));
    if (open_.size() >= size_t(kMaxYamlDepth)) refuse_depth();

    open_.push_back(node);
    Extent extent{.values = 1, .height = 1};
    auto add = [&](const Extent& child) {
      extent.values += child.values;
      extent.height = std::max(extent.height, child.height + 1);
      if (extent.values > kMaxYamlValues)
        throw ConfigError(path, fmt::format("{}: line {}: aliases expand this to more than {} values", source_, line,
                                            kMaxYamlValues));
    };
    if (node.IsMap()) {
      YAML::Node map = node;
      drop_repeated_keys(map, path);
      for (const auto& entry : map) {
        add(walk(entry.first, path));
        add(walk(entry.second, entry.first.IsScalar() ? key_path(path, entry.first.Scalar()) : path));
      }
    } else {
      for (size_t index = 0; index < node.size(); ++index)
        add(walk(node[index], fmt::format("{}[{}]", path, index)));
    }
    open_.pop_back();
    resolved_[node.Mark().pos].push_back({node, extent});
    return extent;
  }

 private:
  struct Resolved {
    YAML::Node node;
    Extent extent;
  };

  void drop_repeated_keys(YAML::Node& map, const std::string& path) {
    std::map<std::string, YAML::Node> last_key;  // each scalar key's latest entry so far
    std::vector<YAML::Node> dropped;
    for (const auto& entry : map) {
      if (!entry.first.IsScalar()) continue;
      const std::string& key = entry.first.Scalar();
      auto [found, inserted] = last_key.try_emplace(key, entry.first);
      if (inserted) continue;
      const int earlier_line = found->second.Mark().line + 1, later_line = entry.first.Mark().line + 1;
      log_warning("{}: '{}' is given twice (line {} and line {}); the value on line {} is used, as in Fast-LLM", source_,
                  key_path(path, key), earlier_line, later_line, later_line);
      dropped.push_back(found->second);
      found->second = entry.first;
    }
    // Removing by key node removes that very entry (node identity), not the first entry with an equal key.
    for (const YAML::Node& key : dropped) map.remove(key);
  }

  std::string_view source_;
  std::vector<YAML::Node> open_;  // the collections being walked, outermost first
  std::unordered_map<int, std::vector<Resolved>> resolved_;
};

}  // namespace

YAML::Node parse_yaml(std::string_view text, std::string_view source, const std::string& path) {
  YAML::Node root;
  try {
    std::istringstream stream{std::string(text)};
    root = YAML::Load(stream);
  } catch (const YAML::Exception& error) {
    throw ConfigError(path, fmt::format("{}: line {}, column {}: {}", source, error.mark.line + 1,
                                        error.mark.column + 1, error.msg));
  }
  TreeResolver(source).walk(root, path);
  return root;
}

YAML::Node load_yaml_file(const std::filesystem::path& path) {
  // A directory opens and reads as empty text; not a regular file is fine otherwise (`-c <(...)` is a pipe).
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    throw ConfigError("", fmt::format("{}: is a folder, not a config file", path.string()));
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw ConfigError("", fmt::format("{}: cannot open config file", path.string()));
  std::ostringstream text;
  text << stream.rdbuf();
  if (stream.bad()) throw ConfigError("", fmt::format("{}: cannot read config file", path.string()));
  YAML::Node node = parse_yaml(text.str(), path.string());
  if (node.IsNull()) return YAML::Node(YAML::NodeType::Map);
  if (!node.IsMap()) throw ConfigError("", fmt::format("{}: the top level must be a mapping of fields", path.string()));
  return node;
}

}  // namespace fast_llm::config
