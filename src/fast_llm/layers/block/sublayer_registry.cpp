#include "fast_llm/layers/block/sublayer_registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace fast_llm::layers::detail {

void throw_unsupported_sublayer(std::string_view kind, const std::string& path, const std::string& type,
                                const std::vector<std::string>& supported) {
  throw NotSupportedError("layers", fmt::format("{}: {} type '{}' is not supported (supported: {})", path, kind, type,
                                                fmt::join(supported, ", ")));
}

}  // namespace fast_llm::layers::detail
