// safetensors files (https://github.com/huggingface/safetensors, "Format"): reading with every field checked, and
// writing.
//
// Layout of a file:
//   bytes [0, 8)        N, the header length, unsigned 64-bit little endian
//   bytes [8, 8 + N)    the header: a UTF-8 JSON object, possibly followed by spaces (writers pad it to a multiple of
//                       8 bytes so the data that follows is aligned)
//   bytes [8 + N, end)  the data buffer
// The header maps each tensor name to {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} (offsets in the
// data buffer, end exclusive), plus an optional "__metadata__" object of string values. The tensors cover the data
// buffer exactly: no overlaps, no holes, nothing after the last one.
//
// Reading maps the file (read only) and checks everything before any tensor is handed out: a truncated or corrupt
// file is an Error naming the file and the tensor, never a crash. Tensors are copied out of the mapping, converted to
// the dtype asked for (bf16 / fp16 / fp32 / fp64 between each other; other dtypes only as they are stored).
// Writing takes the list of tensors up front (name, dtype, shape) and asks for each tensor's values only when it
// writes them, so a checkpoint never has to be in memory at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/core/dtype.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::engine {

// Largest header accepted (the reference implementation's limit).
inline constexpr uint64_t kSafetensorsMaxHeaderSize = uint64_t(100) << 20;

// Element types of the safetensors format. Our DType covers the ones we compute with; the others (I8, I16, U64,
// BOOL, fp8 ...) are recognised, so a file holding them reads, and refused only if such a tensor is asked for.
struct SafetensorsDType {
  std::string_view name;            // "F32", "BF16", ...
  size_t size = 0;                  // bytes per element
  std::optional<DType> dtype;       // ours, when we have it
};
// The safetensors dtype called `name`, or nothing if the format has none of that name.
std::optional<SafetensorsDType> find_safetensors_dtype(std::string_view name);
SafetensorsDType safetensors_dtype(DType dtype);

struct SafetensorsTensorInfo {
  std::string name;
  SafetensorsDType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // in the data buffer
  uint64_t end = 0;
  int64_t numel() const;
  Shape tensor_shape() const;
};

class SafetensorsFile {
 public:
  // Maps and checks `path`; throws Error("[safetensors] <path>: ...") on any problem.
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Tensors in the order of their data.
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return index_.contains(name); }
  // Throws an Error naming the file if there is no such tensor.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Offset of the data buffer in the file.
  uint64_t data_offset() const { return data_offset_; }

  // The stored bytes of a tensor (views of the mapping, valid while this object lives).
  std::span<const std::byte> bytes(const std::string& name) const;
  // A new contiguous CPU tensor with the values of `name`, converted to `dtype` (unset: as stored).
  Tensor read(const std::string& name, std::optional<DType> dtype = std::nullopt) const;

 private:
  std::filesystem::path path_;
  const std::byte* mapping_ = nullptr;
  size_t size_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: what it is, and a function giving its values (a contiguous CPU tensor of that dtype and shape)
// when the writer gets to it.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::float32;
  Shape shape;
  std::function<Tensor()> values;
};

struct SafetensorsWriteOptions {
  // Flush the file to disk before returning (checkpoints that must survive a crash).
  bool sync = false;
};

// Writes `entries` (in that order; names must be unique and not "__metadata__") and `metadata` to `path`, replacing
// it atomically (core/file_writer.h: a temporary file renamed into place, removed on failure). Throws Error naming the
// file on an I/O failure (a full disk included) or a tensor whose values do not match its entry.
void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata = {}, SafetensorsWriteOptions options = {});

// Converts `count` elements from `source` (dtype `from`) into `destination` (dtype `to`). Floating types convert
// between each other (rounding to nearest even); any other pair must be equal. `what` names the data in errors.
void convert_elements(const void* source, DType from, void* destination, DType to, int64_t count,
                      std::string_view what);
// A contiguous CPU copy of `tensor` (any device) in `dtype`.
Tensor to_host_dtype(const Tensor& tensor, DType dtype);

}  // namespace fast_llm::engine
