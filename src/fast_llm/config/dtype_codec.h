// Codec<DType>: data-type fields (`compute_dtype: bf16`) read with Fast-LLM's names and aliases (`bfloat16`, `bf16`,
// `torch.bfloat16`, ...) and written back with the canonical name, so a written config reads back the same.
#pragma once

#include <fmt/format.h>

#include "fast_llm/config/config.h"
#include "fast_llm/core/dtype.h"

namespace fast_llm::config {

template <>
struct Codec<DType> {
  static constexpr bool holds_configs = false;
  static void read(DType& value, const YAML::Node& node, const std::string& path) {
    const std::string& text = detail::require_scalar(node, path, "a data type name");
    if (auto parsed = parse_dtype(text)) {
      value = *parsed;
      return;
    }
    throw ConfigError(path, fmt::format("unknown data type '{}' (valid: float32, float64, float16, bfloat16, int64, "
                                        "int32, uint8, uint16, uint32, or an alias such as fp32, bf16, fp16)",
                                        text));
  }
  static YAML::Node write(const DType& value, const WriteOptions&) { return YAML::Node(std::string(dtype_name(value))); }
};

}  // namespace fast_llm::config
