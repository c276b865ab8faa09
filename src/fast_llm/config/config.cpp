#include "fast_llm/config/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "fast_llm/config/yaml11_scalars.h"

namespace fast_llm::config {

// ---------------------------------------------------------------------------------------------------------------
// Hints

int hint_importance(Hint hint) {
  switch (hint) {
    case Hint::core:
    case Hint::architecture: return kVerboseCore;
    case Hint::optional:
    case Hint::feature:
    case Hint::stability:
    case Hint::logging: return kVerboseOptional;
    case Hint::performance:
    case Hint::setup: return kVerbosePerformance;
    case Hint::expert:
    case Hint::testing:
    case Hint::derived:
    case Hint::unknown:
    case Hint::deprecated:
    case Hint::wip: return kVerboseDebug;
  }
  return kVerboseDebug;
}

std::string_view hint_name(Hint hint) {
  switch (hint) {
    case Hint::core: return "core";
    case Hint::architecture: return "architecture";
    case Hint::optional: return "optional";
    case Hint::performance: return "performance";
    case Hint::stability: return "stability";
    case Hint::feature: return "feature";
    case Hint::expert: return "expert";
    case Hint::unknown: return "unknown";
    case Hint::logging: return "logging";
    case Hint::testing: return "testing";
    case Hint::derived: return "derived";
    case Hint::setup: return "setup";
    case Hint::deprecated: return "deprecated";
    case Hint::wip: return "wip";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------------------------------
// Scalars

namespace detail {

namespace {
std::string describe(const YAML::Node& node) {
  if (!node || node.IsNull()) return "nothing (null)";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return fmt::format("'{}'", node.Scalar());
}
}  // namespace

const std::string& require_scalar(const YAML::Node& node, const std::string& path, std::string_view expected) {
  if (!node || !node.IsScalar()) throw ConfigError(path, fmt::format("expected {}, got {}", expected, describe(node)));
  return node.Scalar();
}

bool parse_bool(const YAML::Node& node, const std::string& path) {
  const std::string& text = require_scalar(node, path, "true or false");
  if (const std::optional<bool> value = yaml11::read_bool(text)) return *value;
  throw ConfigError(path, fmt::format("expected true or false, got '{}'", text));
}

int64_t parse_int(const YAML::Node& node, const std::string& path, int64_t min, int64_t max) {
  const std::string& text = require_scalar(node, path, "an integer");
  const yaml11::IntegerReading reading = yaml11::read_integer(text);
  if (reading.out_of_range) throw ConfigError(path, fmt::format("integer '{}' is out of range", text));
  int64_t value = reading.value;
  if (!reading.matched) {
    // Accept an integral float written like 1.0e3 or 4096.0, as YAML users do.
    const std::optional<double> as_double = yaml11::read_float(text);
    if (as_double && std::isfinite(*as_double) && *as_double == std::floor(*as_double) &&
        std::fabs(*as_double) < 9.0e15)
      value = int64_t(*as_double);
    else
      throw ConfigError(path, fmt::format("expected an integer, got '{}'", text));
  }
  if (value < min || value > max)
    throw ConfigError(path, fmt::format("integer {} is out of range [{}, {}]", value, min, max));
  return value;
}

uint64_t parse_uint(const YAML::Node& node, const std::string& path) {
  const std::string& text = require_scalar(node, path, "a non-negative integer");
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc() && end == text.data() + text.size()) return value;
  // The YAML 1.1 forms (underscores, octal, hex, ...) up to int64's range, which covers every such field.
  const yaml11::IntegerReading reading = yaml11::read_integer(text);
  if (!reading.matched || reading.out_of_range || reading.value < 0)
    throw ConfigError(path, fmt::format("expected a non-negative integer, got '{}'", text));
  return uint64_t(reading.value);
}

double parse_double(const YAML::Node& node, const std::string& path) {
  const std::string& text = require_scalar(node, path, "a number");
  if (const std::optional<double> value = yaml11::read_float(text)) return *value;
  throw ConfigError(path, fmt::format("expected a number, got '{}'", text));
}

YAML::Node write_double(double value) {
  if (std::isinf(value)) return YAML::Node(value > 0 ? ".inf" : "-.inf");
  if (std::isnan(value)) return YAML::Node(".nan");
  // Shortest text that reads back to the same double; always with a '.' or exponent so it reads as a float.
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return YAML::Node(text);
}

void throw_unknown_enum(const std::string& path, std::string_view text, const std::vector<std::string>& valid) {
  auto suggestion = nearest_name(text, valid);
  throw ConfigError(path, fmt::format("unknown value '{}' (valid: {}){}", text, fmt::join(valid, ", "),
                                      suggestion ? fmt::format("; did you mean '{}'?", *suggestion) : ""));
}

void throw_unknown_type(const std::string& path, std::string_view type, const std::vector<std::string>& valid) {
  auto suggestion = nearest_name(type, valid);
  throw ConfigError(path, fmt::format("unknown type '{}' (valid: {}){}", type, fmt::join(valid, ", "),
                                      suggestion ? fmt::format("; did you mean '{}'?", *suggestion) : ""));
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------------------------
// Traversals

namespace {

std::string join_path(std::string_view path, std::string_view name) {
  if (path.empty()) return std::string(name);
  return fmt::format("{}.{}", path, name);
}

// Runs `function(info, handle)` for each field of `config`.
template <class Function>
void for_each_field(Config& config, Function function) {
  struct Lambda final : Visitor {
    Function& function;
    explicit Lambda(Function& f) : function(f) {}
    void on_field(const FieldInfo& info, FieldHandle& field) override { function(info, field); }
  } visitor(function);
  visitor.owner = &config;
  config.visit(visitor);
}

bool is_empty_output(const YAML::Node& node) {
  return !node || node.IsNull() || ((node.IsMap() || node.IsSequence()) && node.size() == 0);
}

// Empty, or a mapping of nothing but empty values (what a non-architecture field holding configs writes when nothing
// below it is architecture).
bool is_empty_recursive(const YAML::Node& node) {
  if (is_empty_output(node)) return true;
  if (!node.IsMap()) return false;
  for (const auto& entry : node)
    if (!is_empty_recursive(entry.second)) return false;
  return true;
}

void collect_unsupported(Config& config, const std::string& path, std::vector<std::string>& messages) {
  for_each_field(config, [&](const FieldInfo& info, FieldHandle& field) {
    std::string field_path = join_path(path, info.name);
    field.collect_unsupported(field_path, messages);
    field.for_each_config(field_path, [&](const std::string& child_path, Config& child) {
      collect_unsupported(child, child_path, messages);
    });
  });
}

void load_fields(Config& config, const YAML::Node& node, const std::string& path, std::string_view skip) {
  if (!node || node.IsNull()) return;
  if (!node.IsMap()) throw ConfigError(path, fmt::format("expected a mapping of fields, got {}",
                                                         node.IsSequence() ? "a list" : "'" + node.Scalar() + "'"));
  std::vector<std::string> names;
  for_each_field(config, [&](const FieldInfo& info, FieldHandle& field) {
    names.emplace_back(info.name);
    if (const YAML::Node value = node[std::string(info.name)]) field.read(value, join_path(path, info.name));
  });
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) throw ConfigError(path, "keys must be plain names");
    const std::string& key = entry.first.Scalar();
    if (key == skip || std::find(names.begin(), names.end(), key) != names.end()) continue;
    auto suggestion = nearest_name(key, names);
    throw ConfigError(join_path(path, key),
                      fmt::format("unknown field{}", suggestion ? fmt::format("; did you mean '{}'?", *suggestion)
                                                                : fmt::format(" (valid: {})", fmt::join(names, ", "))));
  }
}

}  // namespace

namespace detail {
void load_config_skipping(Config& config, const YAML::Node& node, const std::string& path, std::string_view skip) {
  FLM_CHECK(!config.validated(), "config", "{}: a validated config cannot be changed", path);
  load_fields(config, node, path, skip);
}
}  // namespace detail

void Config::load(const YAML::Node& node, const std::string& path) {
  FLM_CHECK(!validated_, "config", "{}: a validated config cannot be changed", path);
  path_ = path;
  load_fields(*this, node, path, {});
}

YAML::Node Config::to_yaml(const WriteOptions& options) const {
  YAML::Node node(YAML::NodeType::Map);
  Config& self = const_cast<Config&>(*this);  // visit() only hands out references; writing changes nothing
  for_each_field(self, [&](const FieldInfo& info, FieldHandle& field) {
    bool holds_configs = field.holds_configs();
    bool wanted;
    if (options.architecture_only)
      wanted = info.hint == Hint::architecture;
    else if (options.explicit_only)
      wanted = is_explicit(info.name);
    else
      wanted = hint_importance(info.hint) <= options.verbose;
    if (!wanted && !holds_configs) return;
    WriteOptions field_options = options;
    field_options.omit_dynamic_type = options.architecture_only && !wanted;
    YAML::Node value = field.write(field_options);
    if (!wanted && (options.architecture_only ? is_empty_recursive(value) : is_empty_output(value))) return;
    node[std::string(info.name)] = value;
  });
  return node;
}

std::string Config::to_yaml_string(const WriteOptions& options) const {
  YAML::Emitter emitter;
  emitter << to_yaml(options);
  return std::string(emitter.c_str()) + "\n";
}

void Config::validate(const std::string& path) {
  if (validated_) return;
  path_ = path;
  derive();
  for_each_field(*this, [&](const FieldInfo& info, FieldHandle& field) { field.validate(join_path(path, info.name)); });
  check();
  validated_ = true;
}

std::string Config::field_path(std::string_view field) const { return join_path(path_, field); }

void Config::fail(std::string_view field, std::string_view message) const {
  throw ConfigError(field_path(field), message);
}

std::vector<std::string> Config::unsupported_fields() const {
  std::vector<std::string> messages;
  collect_unsupported(const_cast<Config&>(*this), path_, messages);
  return messages;
}

std::vector<std::string> Config::field_names() const {
  std::vector<std::string> names;
  for_each_field(const_cast<Config&>(*this), [&](const FieldInfo& info, FieldHandle&) { names.emplace_back(info.name); });
  return names;
}

// ---------------------------------------------------------------------------------------------------------------
// Architecture comparison

namespace {
std::string flow(const YAML::Node& node) {
  if (!node) return "(absent)";
  YAML::Emitter emitter;
  emitter << YAML::Flow << node;
  return emitter.c_str();
}

void diff_nodes(const YAML::Node& a, const YAML::Node& b, const std::string& path, std::vector<std::string>& out) {
  if (a && b && a.IsMap() && b.IsMap()) {
    std::set<std::string> keys;
    for (const auto& entry : a) keys.insert(entry.first.Scalar());
    for (const auto& entry : b) keys.insert(entry.first.Scalar());
    for (const auto& key : keys) diff_nodes(a[key], b[key], join_path(path, key), out);
    return;
  }
  std::string left = flow(a), right = flow(b);
  if (left != right) out.push_back(fmt::format("{}: {} != {}", path, left, right));
}
}  // namespace

std::vector<std::string> compare_architecture(const Config& a, const Config& b) {
  WriteOptions options{.architecture_only = true};
  std::vector<std::string> differences;
  diff_nodes(a.to_yaml(options), b.to_yaml(options), a.path(), differences);
  return differences;
}

// ---------------------------------------------------------------------------------------------------------------
// Files, overrides, suggestions

void apply_override(YAML::Node& root, std::string_view assignment) {
  size_t equals = assignment.find('=');
  if (equals == std::string_view::npos || equals == 0)
    throw ConfigError("", fmt::format("override '{}' is not of the form a.b.c=value", assignment));
  std::string key(assignment.substr(0, equals));
  std::string text(assignment.substr(equals + 1));
  YAML::Node value = parse_yaml(text, fmt::format("override '{}'", assignment), key);
  std::vector<std::string> parts;
  for (size_t begin = 0;;) {
    size_t dot = key.find('.', begin);
    parts.push_back(key.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin));
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  for (const auto& part : parts)
    if (part.empty()) throw ConfigError(key, "override key has an empty component");
  if (!root || !root.IsMap()) root = YAML::Node(YAML::NodeType::Map);
  YAML::Node node = root;
  for (size_t index = 0; index + 1 < parts.size(); ++index) {
    YAML::Node child = node[parts[index]];
    if (!child || !child.IsMap()) {
      node[parts[index]] = YAML::Node(YAML::NodeType::Map);
      child = node[parts[index]];
    }
    node.reset(child);
  }
  node[parts.back()] = value;
}

std::optional<std::string> nearest_name(std::string_view name, const std::vector<std::string>& candidates) {
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        size_t above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diagonal = above;
      }
    }
    return row[b.size()];
  };
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const auto& candidate : candidates) {
    size_t d = distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace fast_llm::config
