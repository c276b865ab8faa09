// Element types of tensors, with Fast-LLM's YAML names and aliases.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fast_llm {

enum class DType : uint8_t { float32, float64, bfloat16, float16, int32, int64, uint8, uint16, uint32 };

size_t dtype_size(DType dtype);
bool is_floating(DType dtype);
// Canonical name as written in configs and checkpoints (`float32`, `bfloat16`, ...).
std::string_view dtype_name(DType dtype);
// Short name used by Fast-LLM and PyTorch users (`fp32`, `bf16`, `int64`, ...).
std::string_view dtype_short_name(DType dtype);
// Accepts canonical names and aliases (`bf16`, `fp32`, `float`, `half`, `double`, `torch.bfloat16`, ...).
std::optional<DType> parse_dtype(std::string_view name);
// safetensors spelling (`F32`, `BF16`, `I64`, ...).
std::string_view dtype_safetensors_name(DType dtype);
std::optional<DType> parse_safetensors_dtype(std::string_view name);

}  // namespace fast_llm
