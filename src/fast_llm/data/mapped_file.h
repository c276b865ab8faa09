// A whole file mapped read-only into memory, the storage under both dataset file formats (memmap.h,
// legacy_memmap.h), with the helpers their readers share: unaligned little-endian loads, marker comparison, and errors
// that name the file under the reader's component (`[memmap] /data/shard_0.fast_llm_dataset: ...`).
//
// Readers check every offset against size() before loading: the mapping trusts nothing in the file.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

namespace fast_llm::data {

// Dataset payloads are read by reinterpreting little-endian bytes.
static_assert(std::endian::native == std::endian::little, "fast-llm data files are little-endian");

class MappedFile {
 public:
  MappedFile(const std::filesystem::path& path, std::string_view component);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  size_t size() const { return size_; }
  const std::byte* data() const { return data_; }

  // Whether the bytes at `offset` are `expected` (false when they would run past the end).
  bool matches(uint64_t offset, std::string_view expected) const;
  // Throws an Error `[component] path: message`.
  [[noreturn]] void fail(std::string_view message) const;

 private:
  std::filesystem::path path_;
  std::string component_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// The value of type T stored little-endian at `pointer`, whatever its alignment.
template <class T>
T load_unaligned(const std::byte* pointer) {
  T value;
  std::memcpy(&value, pointer, sizeof(T));
  return value;
}

}  // namespace fast_llm::data
