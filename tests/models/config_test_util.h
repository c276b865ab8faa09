// Helpers for the config tests: load a YAML section into a config at a path, capture error messages, and run with
// the launcher's environment variables controlled.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fast_llm/config/config.h"

namespace fast_llm::testing {

// Loads `text` (a YAML mapping) with `overrides` applied into `config` at `path`, then validates.
template <class C>
C load_config(const std::string& text, const std::string& path, const std::vector<std::string>& overrides = {}) {
  YAML::Node node = YAML::Load(text);
  for (const auto& assignment : overrides) config::apply_override(node, assignment);
  C result;
  result.load(node, path);
  result.validate(path);
  return result;
}

// The message of the ConfigError that loading throws, or "" if none.
template <class C>
std::string config_error(const std::string& text, const std::string& path,
                         const std::vector<std::string>& overrides = {}) {
  try {
    load_config<C>(text, path, overrides);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

// Sets (or, with nullopt, unsets) environment variables for the life of the object, then restores them.
class ScopedEnvironment {
 public:
  explicit ScopedEnvironment(const std::map<std::string, std::optional<std::string>>& values) {
    for (const auto& [name, value] : values) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }
  ~ScopedEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// No launcher: world size 1, rank 0.
inline std::map<std::string, std::optional<std::string>> single_process() {
  return {{"WORLD_SIZE", std::nullopt}, {"RANK", std::nullopt}, {"LOCAL_WORLD_SIZE", std::nullopt},
          {"LOCAL_RANK", std::nullopt}};
}

}  // namespace fast_llm::testing
