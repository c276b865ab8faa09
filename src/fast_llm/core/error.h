// Typed errors for fast-llm.
//
// Boundaries (YAML, command line, files, checkpoints, device probing, CUDA/NCCL/cuBLAS status) throw an Error
// subclass whose message starts with the component in brackets and says where and what:
//   [memmap] shard_0.fast_llm_dataset: token section ends at 1024, file has 1000 bytes
// Only cli/ catches them. FLM_CHECK is for conditions the user can cause; FLM_ASSERT for internal invariants
// (a failing FLM_ASSERT is a bug in fast-llm, and says so).
#pragma once

#include <fmt/format.h>

#include <source_location>
#include <stdexcept>
#include <string>

namespace fast_llm {

class Error : public std::runtime_error {
 public:
  Error(std::string_view component, std::string_view message,
        std::source_location location = std::source_location::current());

  const std::string& component() const { return component_; }
  const std::source_location& location() const { return location_; }

 private:
  std::string component_;
  std::source_location location_;
};

// A configuration problem: the message names the full field path, e.g. `model.base_model.hidden_size`.
class ConfigError : public Error {
 public:
  ConfigError(std::string_view path, std::string_view message,
              std::source_location location = std::source_location::current());
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Subclasses spell their constructors out: nvcc 13.0's front end crashes on a constructor inherited with `using`
// whose default argument is std::source_location::current() (so every .cu including this header would fail).

// A broken invariant inside fast-llm (not the user's fault).
class InternalError : public Error {
 public:
  InternalError(std::string_view component, std::string_view message,
                std::source_location location = std::source_location::current())
      : Error(component, message, location) {}
};

// Something not built yet was asked for (a config value without behaviour, a missing backend).
class NotSupportedError : public Error {
 public:
  NotSupportedError(std::string_view component, std::string_view message,
                    std::source_location location = std::source_location::current())
      : Error(component, message, location) {}
};

namespace detail {
[[noreturn]] void throw_check_failure(std::string_view component, std::string message, std::source_location location);
[[noreturn]] void throw_assert_failure(const char* condition, std::string message, std::source_location location);
}  // namespace detail

}  // namespace fast_llm

// FLM_CHECK(condition, "component", "format {}", args...): throws fast_llm::Error when condition is false.
#define FLM_CHECK(condition, component, ...)                                                                  \
  do {                                                                                                        \
    if (!(condition)) [[unlikely]]                                                                            \
      ::fast_llm::detail::throw_check_failure(component, ::fmt::format(__VA_ARGS__),                          \
                                              std::source_location::current());                               \
  } while (0)

// FLM_ASSERT(condition) or FLM_ASSERT(condition, "format {}", args...): throws fast_llm::InternalError.
#define FLM_ASSERT(condition, ...)                                                                            \
  do {                                                                                                        \
    if (!(condition)) [[unlikely]]                                                                            \
      ::fast_llm::detail::throw_assert_failure(#condition, ::fmt::format("" __VA_ARGS__),                     \
                                               std::source_location::current());                              \
  } while (0)
