#include "fast_llm/core/error.h"

namespace fast_llm {

namespace {
std::string bracketed(std::string_view component, std::string_view message) {
  return fmt::format("[{}] {}", component, message);
}
}  // namespace

Error::Error(std::string_view component, std::string_view message, std::source_location location)
    : std::runtime_error(bracketed(component, message)), component_(component), location_(location) {}

ConfigError::ConfigError(std::string_view path, std::string_view message, std::source_location location)
    : Error("config", path.empty() ? std::string(message) : fmt::format("{}: {}", path, message), location),
      path_(path) {}

namespace detail {

void throw_check_failure(std::string_view component, std::string message, std::source_location location) {
  throw Error(component, message, location);
}

void throw_assert_failure(const char* condition, std::string message, std::source_location location) {
  throw InternalError("internal",
                      fmt::format("assertion `{}` failed at {}:{}{}{} (this is a bug in fast-llm)", condition,
                                  location.file_name(), location.line(), message.empty() ? "" : ": ", message),
                      location);
}

}  // namespace detail
}  // namespace fast_llm
