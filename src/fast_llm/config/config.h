// The configuration system: one field list per config, driving defaults, YAML in and out, `a.b.c=value`
// overrides, validation with full paths, printing by verbosity, `type:` dispatch and architecture comparison.
//
// A config lists each field once, in `visit`, with its name, description, hint and checks; the default is the
// member's initialiser:
//
//   struct RmsNormConfig : NormalizationConfig {
//     double epsilon = 1e-5;
//     void visit(Visitor& v) override {
//       NormalizationConfig::visit(v);
//       v(epsilon, "epsilon", "Regularizer for the division.", Hint::architecture, check::gt(0.0));
//     }
//   };
//   FLM_REGISTER_CONFIG(NormalizationConfig, RmsNormConfig, "rms_norm");
//
// Field types: bool, int, int64_t, uint64_t, double, std::string, std::filesystem::path, enums with
// `EnumNames<E>`, std::optional<T>, std::vector<T>, std::map<std::string, T>, nested configs (any Config subclass,
// held by value), Dynamic<Base> (a `type:`-selected subclass), and any T with a `Codec<T>` specialisation.
//
// Life cycle: construct (defaults) -> `load` from YAML (+ overrides) -> `validate` once (derived fields, then checks,
// recursively; errors name the full path) -> used as `const`. Validation never runs twice.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "fast_llm/config/codec.h"
#include "fast_llm/config/hint.h"
#include "fast_llm/config/yaml_reading.h"
#include "fast_llm/core/error.h"

namespace fast_llm::config {

class Config;
class Visitor;

struct FieldInfo {
  std::string_view name;
  std::string_view description;
  Hint hint = Hint::unknown;
};

// How much of a config to write out.
struct WriteOptions {
  // Write only fields set explicitly (from YAML, an override or a parent's derivation marked explicit).
  bool explicit_only = false;
  // Otherwise write fields whose hint importance is <= this level (`kVerboseEverything` for all).
  int verbose = kVerboseEverything;
  // Write only architecture fields (and nested configs that hold some).
  bool architecture_only = false;
  // Leave out the `type` of dynamic configs: set by to_yaml for the fields it writes with architecture_only only to
  // reach the architecture fields nested in them (the type of a non-architecture field is not architecture).
  bool omit_dynamic_type = false;
};

// A type-erased view of one field of one config object; built on the stack by `Visitor::operator()`.
class FieldHandle {
 public:
  virtual ~FieldHandle() = default;
  // Sets the value from YAML; `path` is the field's full dotted path for error messages.
  virtual void read(const YAML::Node& node, const std::string& path) = 0;
  virtual YAML::Node write(const WriteOptions& options) const = 0;
  // Runs the field's checks, then validates nested configs.
  virtual void validate(const std::string& path) = 0;
  // Calls `function(child_path, child)` for each nested config held by the field (value, dynamic, list, map).
  virtual void for_each_config(const std::string& path,
                               const std::function<void(const std::string&, Config&)>& function) = 0;
  // Messages for values that are accepted by the schema but have no behaviour yet (see `not_supported_yet`).
  virtual void collect_unsupported(const std::string& path, std::vector<std::string>& messages) const = 0;
  // Whether the field holds configs (nested, dynamic, or collections of them) rather than plain values.
  virtual bool holds_configs() const = 0;
};

// A check returns an error message for an invalid value, or nothing.
template <class T>
using Check = std::function<std::optional<std::string>(const T&)>;

// Marks a field accepted for compatibility whose behaviour is not built yet: any value other than `allowed` makes
// `unsupported_fields()` report it, and `train` refuses to start. `--validate` only warns.
template <class T>
struct NotSupportedYet {
  T allowed;
  std::string_view what;
};
template <class T>
NotSupportedYet<T> not_supported_yet(T allowed, std::string_view what = {}) {
  return {std::move(allowed), what};
}

// Like NotSupportedYet, for values without a usable `==` (maps of configs, ...): reported when `is_unsupported` says so.
template <class T>
struct NotSupportedIf {
  std::function<bool(const T&)> is_unsupported;
  std::string_view what;
};
template <class T>
NotSupportedIf<T> not_supported_if(std::function<bool(const T&)> is_unsupported, std::string_view what) {
  return {std::move(is_unsupported), what};
}

class Visitor {
 public:
  virtual ~Visitor() = default;
  virtual void on_field(const FieldInfo& info, FieldHandle& field) = 0;

  // The config whose fields are being visited; set by whoever calls Config::visit.
  Config* owner = nullptr;

  // v(member, "name", "description", Hint::x, checks or markers...)
  template <class T, class... Extras>
  void operator()(T& value, std::string_view name, std::string_view description, Hint hint, Extras&&... extras);
};

class Config {
 public:
  Config() = default;
  Config(const Config& other) = default;
  Config& operator=(const Config& other) = default;
  virtual ~Config() = default;

  // Lists the fields. Subclasses call their parent's visit first.
  virtual void visit(Visitor& visitor) = 0;

  // Reads the fields present in `node` (a map); unknown keys are errors naming the path and suggesting the nearest
  // valid key. Fields absent from `node` keep their current values. `path` is this config's dotted path.
  void load(const YAML::Node& node, const std::string& path = "");
  YAML::Node to_yaml(const WriteOptions& options = {}) const;
  std::string to_yaml_string(const WriteOptions& options = {}) const;

  // Derived fields and `auto` resolution (`derive`), then field checks and nested configs, then cross-field checks
  // (`check`). Errors are ConfigError naming the full path. Runs once; a second call is a no-op.
  void validate(const std::string& path = "");
  bool validated() const { return validated_; }

  // Dotted path given at validation (or load) time, "" for the root.
  const std::string& path() const { return path_; }
  std::string field_path(std::string_view field) const;
  // Throws a ConfigError for one of this config's fields.
  [[noreturn]] void fail(std::string_view field, std::string_view message) const;

  bool is_explicit(std::string_view field) const { return explicit_fields_.contains(std::string(field)); }
  const std::set<std::string>& explicit_fields() const { return explicit_fields_; }
  void mark_explicit(std::string_view field) { explicit_fields_.emplace(field); }

  // Values set to something without behaviour yet, as "path: message" lines (empty when all is supported).
  std::vector<std::string> unsupported_fields() const;

  // Names of this config's fields, in visit order.
  std::vector<std::string> field_names() const;

 protected:
  // Hook run before fields are validated: fill derived values and resolve `auto` (may write into nested configs;
  // values set here are implicit, i.e. not written with `explicit_only`, unless marked explicit). It runs before any
  // check, so it must tolerate invalid values (e.g. a zero it would divide by) and leave them for the checks.
  virtual void derive() {}
  // Hook run after all fields and nested configs are valid: constraints between fields. Use `fail`.
  virtual void check() const {}

 private:
  std::set<std::string> explicit_fields_;
  std::string path_;
  bool validated_ = false;
};

// Architecture comparison: differences between the architecture fields of two configs, as "path: a != b" lines.
std::vector<std::string> compare_architecture(const Config& a, const Config& b);

// Applies `a.b.c=value` (value parsed as YAML, see yaml_reading.h) onto a YAML tree, creating maps as needed. Throws ConfigError on a
// malformed override.
void apply_override(YAML::Node& root, std::string_view assignment);

// The nearest of `candidates` to `name` by edit distance, if close enough to be a plausible typo.
std::optional<std::string> nearest_name(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace fast_llm::config

#include "fast_llm/config/config_impl.h"
