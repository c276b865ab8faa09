#include "fast_llm/core/dtype.h"

#include <array>

namespace fast_llm {

namespace {
struct DTypeInfo {
  DType dtype;
  size_t size;
  bool floating;
  std::string_view name;
  std::string_view short_name;
  std::string_view safetensors_name;
};

constexpr std::array<DTypeInfo, 9> kDTypes{{
    {DType::float32, 4, true, "float32", "fp32", "F32"},
    {DType::float64, 8, true, "float64", "fp64", "F64"},
    {DType::bfloat16, 2, true, "bfloat16", "bf16", "BF16"},
    {DType::float16, 2, true, "float16", "fp16", "F16"},
    {DType::int32, 4, false, "int32", "int32", "I32"},
    {DType::int64, 8, false, "int64", "int64", "I64"},
    {DType::uint8, 1, false, "uint8", "uint8", "U8"},
    {DType::uint16, 2, false, "uint16", "uint16", "U16"},
    {DType::uint32, 4, false, "uint32", "uint32", "U32"},
}};

const DTypeInfo& info(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }
}  // namespace

size_t dtype_size(DType dtype) { return info(dtype).size; }
bool is_floating(DType dtype) { return info(dtype).floating; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }
std::string_view dtype_short_name(DType dtype) { return info(dtype).short_name; }
std::string_view dtype_safetensors_name(DType dtype) { return info(dtype).safetensors_name; }

std::optional<DType> parse_dtype(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  for (const auto& entry : kDTypes)
    if (name == entry.name || name == entry.short_name) return entry.dtype;
  if (name == "float") return DType::float32;
  if (name == "double") return DType::float64;
  if (name == "half") return DType::float16;
  if (name == "bfloat") return DType::bfloat16;
  if (name == "int") return DType::int32;
  if (name == "long") return DType::int64;
  return std::nullopt;
}

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  for (const auto& entry : kDTypes)
    if (name == entry.safetensors_name) return entry.dtype;
  return std::nullopt;
}

}  // namespace fast_llm
