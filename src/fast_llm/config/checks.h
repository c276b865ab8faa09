// Reusable field checks: `v(heads, "heads", "...", Hint::architecture, check::gt(0))`.
// Each returns an error message for an invalid value, or nothing.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace fast_llm::config::check {

template <class T>
std::function<std::optional<std::string>(const T&)> gt(T bound) {
  return [bound](const T& value) -> std::optional<std::string> {
    if (value > bound) return std::nullopt;
    return fmt::format("must be greater than {}, got {}", bound, value);
  };
}

template <class T>
std::function<std::optional<std::string>(const T&)> ge(T bound) {
  return [bound](const T& value) -> std::optional<std::string> {
    if (value >= bound) return std::nullopt;
    return fmt::format("must be at least {}, got {}", bound, value);
  };
}

template <class T>
std::function<std::optional<std::string>(const T&)> lt(T bound) {
  return [bound](const T& value) -> std::optional<std::string> {
    if (value < bound) return std::nullopt;
    return fmt::format("must be less than {}, got {}", bound, value);
  };
}

template <class T>
std::function<std::optional<std::string>(const T&)> le(T bound) {
  return [bound](const T& value) -> std::optional<std::string> {
    if (value <= bound) return std::nullopt;
    return fmt::format("must be at most {}, got {}", bound, value);
  };
}

// Inclusive range.
template <class T>
std::function<std::optional<std::string>(const T&)> in_range(T low, T high) {
  return [low, high](const T& value) -> std::optional<std::string> {
    if (value >= low && value <= high) return std::nullopt;
    return fmt::format("must be in [{}, {}], got {}", low, high, value);
  };
}

inline std::function<std::optional<std::string>(const std::string&)> non_empty() {
  return [](const std::string& value) -> std::optional<std::string> {
    if (!value.empty()) return std::nullopt;
    return std::string("must not be empty");
  };
}

template <class T>
std::function<std::optional<std::string>(const std::vector<T>&)> each(
    std::function<std::optional<std::string>(const T&)> element_check) {
  return [element_check](const std::vector<T>& values) -> std::optional<std::string> {
    for (size_t index = 0; index < values.size(); ++index)
      if (auto message = element_check(values[index])) return fmt::format("element {}: {}", index, *message);
    return std::nullopt;
  };
}

}  // namespace fast_llm::config::check
