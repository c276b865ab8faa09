// Codec<T>: how a field of type T is read from and written to YAML.
//
// Specialise Codec<T> for a custom field type (e.g. a value that is `auto` or a list). A codec provides:
//   static void read(T& value, const YAML::Node& node, const std::string& path);  // throws ConfigError
//   static YAML::Node write(const T& value, const WriteOptions& options);
//   static constexpr bool holds_configs;   // true when T contains configs (handled by config_impl.h)
// Enums are read and written by name through an EnumNames<E> specialisation:
//   template <> struct EnumNames<DecayStyle> {
//     static constexpr std::array<std::pair<DecayStyle, std::string_view>, 2> values{{{constant, "constant"}, ...}};
//   };
#pragma once

#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "fast_llm/core/error.h"

namespace fast_llm::config {

struct WriteOptions;

template <class T, class Enable = void>
struct Codec;  // no codec: the field type is not supported by the config system

template <class E>
struct EnumNames;  // specialise for each enum used in configs

template <class E, class = void>
struct has_enum_names : std::false_type {};
template <class E>
struct has_enum_names<E, std::void_t<decltype(EnumNames<E>::values)>> : std::true_type {};

// Names of an enum's values, for error messages and documentation.
template <class E>
std::vector<std::string> enum_value_names() {
  std::vector<std::string> names;
  for (const auto& [value, name] : EnumNames<E>::values) names.emplace_back(name);
  return names;
}

template <class E>
std::string_view enum_name(E value) {
  for (const auto& [candidate, name] : EnumNames<E>::values)
    if (candidate == value) return name;
  return "?";
}

template <class E>
std::optional<E> parse_enum(std::string_view text) {
  for (const auto& [value, name] : EnumNames<E>::values)
    if (name == text) return value;
  return std::nullopt;
}

namespace detail {
// Scalar parsing shared by the codecs; each throws ConfigError naming `path`.
const std::string& require_scalar(const YAML::Node& node, const std::string& path, std::string_view expected);
bool parse_bool(const YAML::Node& node, const std::string& path);
int64_t parse_int(const YAML::Node& node, const std::string& path, int64_t min, int64_t max);
uint64_t parse_uint(const YAML::Node& node, const std::string& path);
double parse_double(const YAML::Node& node, const std::string& path);
YAML::Node write_double(double value);
[[noreturn]] void throw_unknown_enum(const std::string& path, std::string_view text,
                                     const std::vector<std::string>& valid);
}  // namespace detail

template <>
struct Codec<bool> {
  static constexpr bool holds_configs = false;
  static void read(bool& value, const YAML::Node& node, const std::string& path) {
    value = detail::parse_bool(node, path);
  }
  static YAML::Node write(const bool& value, const WriteOptions&) { return YAML::Node(value); }
};

template <class T>
struct Codec<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> && std::is_signed_v<T>>> {
  static constexpr bool holds_configs = false;
  static void read(T& value, const YAML::Node& node, const std::string& path) {
    value = T(detail::parse_int(node, path, int64_t(std::numeric_limits<T>::min()),
                                int64_t(std::numeric_limits<T>::max())));
  }
  static YAML::Node write(const T& value, const WriteOptions&) { return YAML::Node(int64_t(value)); }
};

template <class T>
struct Codec<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> && std::is_unsigned_v<T>>> {
  static constexpr bool holds_configs = false;
  static void read(T& value, const YAML::Node& node, const std::string& path) {
    uint64_t parsed = detail::parse_uint(node, path);
    if (parsed > uint64_t(std::numeric_limits<T>::max()))
      throw ConfigError(path, "value out of range for this field");
    value = T(parsed);
  }
  static YAML::Node write(const T& value, const WriteOptions&) { return YAML::Node(uint64_t(value)); }
};

template <class T>
struct Codec<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static constexpr bool holds_configs = false;
  static void read(T& value, const YAML::Node& node, const std::string& path) {
    value = T(detail::parse_double(node, path));
  }
  static YAML::Node write(const T& value, const WriteOptions&) { return detail::write_double(double(value)); }
};

template <>
struct Codec<std::string> {
  static constexpr bool holds_configs = false;
  static void read(std::string& value, const YAML::Node& node, const std::string& path) {
    value = detail::require_scalar(node, path, "a string");
  }
  static YAML::Node write(const std::string& value, const WriteOptions&) { return YAML::Node(value); }
};

template <>
struct Codec<std::filesystem::path> {
  static constexpr bool holds_configs = false;
  static void read(std::filesystem::path& value, const YAML::Node& node, const std::string& path) {
    value = detail::require_scalar(node, path, "a path");
  }
  static YAML::Node write(const std::filesystem::path& value, const WriteOptions&) {
    return YAML::Node(value.string());
  }
};

template <class E>
struct Codec<E, std::enable_if_t<std::is_enum_v<E> && has_enum_names<E>::value>> {
  static constexpr bool holds_configs = false;
  static void read(E& value, const YAML::Node& node, const std::string& path) {
    const std::string& text = detail::require_scalar(node, path, "a name");
    if (auto parsed = parse_enum<E>(text)) {
      value = *parsed;
      return;
    }
    detail::throw_unknown_enum(path, text, enum_value_names<E>());
  }
  static YAML::Node write(const E& value, const WriteOptions&) { return YAML::Node(std::string(enum_name(value))); }
};

template <class T>
struct Codec<std::optional<T>> {
  static constexpr bool holds_configs = Codec<T>::holds_configs;
  static void read(std::optional<T>& value, const YAML::Node& node, const std::string& path) {
    if (!node || node.IsNull()) {
      value.reset();
      return;
    }
    if (!value) value.emplace();
    Codec<T>::read(*value, node, path);
  }
  static YAML::Node write(const std::optional<T>& value, const WriteOptions& options) {
    if (!value) return YAML::Node(YAML::NodeType::Null);
    return Codec<T>::write(*value, options);
  }
  template <class Function>
  static void for_each_config(std::optional<T>& value, const std::string& path, const Function& function) {
    if (value) Codec<T>::for_each_config(*value, path, function);
  }
};

template <class T>
struct Codec<std::vector<T>> {
  static constexpr bool holds_configs = Codec<T>::holds_configs;
  static void read(std::vector<T>& value, const YAML::Node& node, const std::string& path) {
    if (!node.IsSequence()) {
      throw ConfigError(path, "expected a list");
    }
    std::vector<T> result(node.size());
    for (size_t index = 0; index < node.size(); ++index)
      Codec<T>::read(result[index], node[index], path + "[" + std::to_string(index) + "]");
    value = std::move(result);
  }
  static YAML::Node write(const std::vector<T>& value, const WriteOptions& options) {
    YAML::Node node(YAML::NodeType::Sequence);
    for (const auto& element : value) node.push_back(Codec<T>::write(element, options));
    return node;
  }
  template <class Function>
  static void for_each_config(std::vector<T>& value, const std::string& path, const Function& function) {
    for (size_t index = 0; index < value.size(); ++index)
      Codec<T>::for_each_config(value[index], path + "[" + std::to_string(index) + "]", function);
  }
};

template <class T>
struct Codec<std::map<std::string, T>> {
  static constexpr bool holds_configs = Codec<T>::holds_configs;
  // Reading merges: an existing entry is updated in place (so an override `a.b.key.field=x` keeps the rest).
  static void read(std::map<std::string, T>& value, const YAML::Node& node, const std::string& path) {
    if (node.IsNull()) {
      value.clear();
      return;
    }
    if (!node.IsMap()) throw ConfigError(path, "expected a mapping of names to values");
    for (const auto& entry : node) {
      if (!entry.first.IsScalar()) throw ConfigError(path, "keys must be plain names, not lists or mappings");
      const std::string& key = entry.first.Scalar();
      Codec<T>::read(value[key], entry.second, path.empty() ? key : path + "." + key);
    }
  }
  static YAML::Node write(const std::map<std::string, T>& value, const WriteOptions& options) {
    YAML::Node node(YAML::NodeType::Map);
    for (const auto& [key, element] : value) node[key] = Codec<T>::write(element, options);
    return node;
  }
  template <class Function>
  static void for_each_config(std::map<std::string, T>& value, const std::string& path, const Function& function) {
    for (auto& [key, element] : value) Codec<T>::for_each_config(element, path.empty() ? key : path + "." + key, function);
  }
};

}  // namespace fast_llm::config
