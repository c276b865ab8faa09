#include "fast_llm/engine/checkpoint/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>

#include "fast_llm/core/error.h"
#include "fast_llm/core/file_writer.h"
#include "fast_llm/kernels/copy.h"

namespace fast_llm::engine {

namespace {

constexpr std::string_view kComponent = "safetensors";
constexpr std::string_view kMetadataKey = "__metadata__";

constexpr std::array<SafetensorsDType, 17> kDTypes{{
    {"F64", 8, DType::float64},
    {"F32", 4, DType::float32},
    {"F16", 2, DType::float16},
    {"BF16", 2, DType::bfloat16},
    {"I64", 8, DType::int64},
    {"I32", 4, DType::int32},
    {"U32", 4, DType::uint32},
    {"U16", 2, DType::uint16},
    {"U8", 1, DType::uint8},
    {"U64", 8, std::nullopt},
    {"I16", 2, std::nullopt},
    {"I8", 1, std::nullopt},
    {"BOOL", 1, std::nullopt},
    {"F8_E4M3", 1, std::nullopt},
    {"F8_E5M2", 1, std::nullopt},
    {"F8_E8M0", 1, std::nullopt},
    {"C64", 8, std::nullopt},
}};

[[noreturn]] void fail(const std::filesystem::path& path, std::string_view message) {
  throw Error(kComponent, fmt::format("{}: {}", path.string(), message));
}

[[noreturn]] void fail_tensor(const std::filesystem::path& path, std::string_view tensor, std::string_view message) {
  throw Error(kComponent, fmt::format("{}: tensor '{}': {}", path.string(), tensor, message));
}

std::string describe(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

// A non-negative integer that fits in int64 (JSON numbers may be negative, fractional or huge).
uint64_t require_index(const nlohmann::json& value, const std::filesystem::path& path, std::string_view tensor,
                       std::string_view what) {
  // nlohmann stores every non-negative JSON integer as unsigned: anything else is negative, fractional or not a number.
  if (!value.is_number_unsigned())
    fail_tensor(path, tensor, fmt::format("{} must be non-negative integers, got {}", what, describe(value)));
  uint64_t result = value.get<uint64_t>();
  if (result > uint64_t(std::numeric_limits<int64_t>::max()))
    fail_tensor(path, tensor, fmt::format("{} value {} is too large", what, result));
  return result;
}

struct Mapping {
  const std::byte* data = nullptr;
  size_t size = 0;
};

}  // namespace

std::optional<SafetensorsDType> find_safetensors_dtype(std::string_view name) {
  for (const auto& entry : kDTypes)
    if (entry.name == name) return entry;
  return std::nullopt;
}

SafetensorsDType safetensors_dtype(DType dtype) {
  for (const auto& entry : kDTypes)
    if (entry.dtype == dtype) return entry;
  FLM_ASSERT(false, "no safetensors dtype for {}", dtype_name(dtype));
}

int64_t SafetensorsTensorInfo::numel() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

Shape SafetensorsTensorInfo::tensor_shape() const {
  FLM_CHECK(shape.size() <= size_t(kMaxTensorRank), kComponent, "tensor '{}' has rank {}, above the supported {}",
            name, shape.size(), kMaxTensorRank);
  return Shape(std::span<const int64_t>(shape));
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    int error = errno;
    ::close(fd);
    fail(path, fmt::format("cannot stat: {}", std::strerror(error)));
  }
  if (!S_ISREG(status.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  size_ = size_t(status.st_size);
  if (size_ > 0) {
    void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) {
      int error = errno;
      ::close(fd);
      fail(path, fmt::format("cannot map: {}", std::strerror(error)));
    }
    mapping_ = static_cast<const std::byte*>(mapped);
  }
  ::close(fd);

  // From here on the destructor is not run if we throw: unmap on failure.
  try {
    if (size_ < 8) fail(path, fmt::format("file has {} bytes, too short for the 8-byte header length", size_));
    uint64_t header_size = 0;
    for (int byte = 7; byte >= 0; --byte) header_size = (header_size << 8) | uint64_t(uint8_t(mapping_[byte]));
    if (header_size > kSafetensorsMaxHeaderSize)
      fail(path, fmt::format("header length {} is above the limit of {} bytes (corrupt file?)", header_size,
                             kSafetensorsMaxHeaderSize));
    if (header_size > size_ - 8)
      fail(path, fmt::format("header length {} runs past the end of the file ({} bytes after the length)",
                             header_size, size_ - 8));
    data_offset_ = 8 + header_size;
    const uint64_t data_size = size_ - data_offset_;
    std::string_view header_text(reinterpret_cast<const char*>(mapping_ + 8), header_size);
    if (header_text.empty() || header_text.front() != '{')
      fail(path, "the header does not start with '{' (not a safetensors file?)");

    nlohmann::json header;
    try {
      header = nlohmann::json::parse(header_text);
    } catch (const nlohmann::json::exception& error) {  // parse_error; out_of_range for a number overflow
      fail(path, fmt::format("the header is not valid JSON: {}", error.what()));
    }
    if (!header.is_object()) fail(path, "the header is not a JSON object");

    for (auto item = header.begin(); item != header.end(); ++item) {
      const std::string& name = item.key();
      const nlohmann::json& value = item.value();
      if (name == kMetadataKey) {
        if (value.is_null()) continue;
        if (!value.is_object()) fail(path, fmt::format("{} must be an object of strings", kMetadataKey));
        for (auto entry = value.begin(); entry != value.end(); ++entry) {
          if (!entry.value().is_string())
            fail(path, fmt::format("{} value of '{}' must be a string, got {}", kMetadataKey, entry.key(),
                                   describe(entry.value())));
          metadata_[entry.key()] = entry.value().get<std::string>();
        }
        continue;
      }
      if (!value.is_object()) fail_tensor(path, name, fmt::format("entry must be an object, got {}", describe(value)));
      for (auto field = value.begin(); field != value.end(); ++field)
        if (field.key() != "dtype" && field.key() != "shape" && field.key() != "data_offsets")
          fail_tensor(path, name, fmt::format("unknown field '{}'", field.key()));
      if (!value.contains("dtype") || !value["dtype"].is_string())
        fail_tensor(path, name, "missing or non-string 'dtype'");
      const std::string dtype_text = value["dtype"].get<std::string>();
      auto dtype = find_safetensors_dtype(dtype_text);
      if (!dtype) fail_tensor(path, name, fmt::format("unknown dtype '{}'", dtype_text));
      if (!value.contains("shape") || !value["shape"].is_array()) fail_tensor(path, name, "missing or non-list 'shape'");
      SafetensorsTensorInfo info{.name = name, .dtype = *dtype};
      // Element count, checked for overflow as it grows.
      uint64_t numel = 1;
      bool overflow = false;
      for (const auto& dim : value["shape"]) {
        uint64_t size = require_index(dim, path, name, "shape dimensions");
        info.shape.push_back(int64_t(size));
        if (size != 0 && numel > std::numeric_limits<uint64_t>::max() / size) overflow = true;
        numel *= size;
      }
      if (overflow || numel > std::numeric_limits<uint64_t>::max() / dtype->size)
        fail_tensor(path, name, "shape is too large");
      if (!value.contains("data_offsets") || !value["data_offsets"].is_array() || value["data_offsets"].size() != 2)
        fail_tensor(path, name, "missing 'data_offsets' or not a list of two offsets");
      info.begin = require_index(value["data_offsets"][0], path, name, "data_offsets");
      info.end = require_index(value["data_offsets"][1], path, name, "data_offsets");
      if (info.end < info.begin)
        fail_tensor(path, name, fmt::format("data_offsets [{}, {}] end before they begin", info.begin, info.end));
      if (info.end > data_size)
        fail_tensor(path, name, fmt::format("data_offsets [{}, {}] run past the end of the data ({} bytes; "
                                            "truncated file?)",
                                            info.begin, info.end, data_size));
      const uint64_t expected = numel * dtype->size;
      if (info.end - info.begin != expected)
        fail_tensor(path, name, fmt::format("shape [{}] of {} needs {} bytes, data_offsets [{}, {}] hold {}",
                                            fmt::join(info.shape, ", "), dtype->name, expected, info.begin, info.end,
                                            info.end - info.begin));
      tensors_.push_back(std::move(info));
    }

    // The tensors must tile the data buffer: sorted by offset, each starts where the previous one ends.
    std::sort(tensors_.begin(), tensors_.end(), [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t position = 0;
    for (size_t index = 0; index < tensors_.size(); ++index) {
      const SafetensorsTensorInfo& info = tensors_[index];
      if (info.begin < position)
        fail_tensor(path, info.name, fmt::format("data_offsets [{}, {}] overlap tensor '{}' (which ends at {})",
                                                 info.begin, info.end, tensors_[index - 1].name, position));
      if (info.begin > position)
        fail_tensor(path, info.name,
                    fmt::format("data_offsets [{}, {}] leave a gap of {} bytes after offset {} (the data buffer must "
                                "be covered exactly)",
                                info.begin, info.end, info.begin - position, position));
      position = info.end;
      index_[info.name] = index;
    }
    if (position != data_size)
      fail(path, fmt::format("the tensors cover {} bytes of data but the file holds {} (extra bytes after the last "
                             "tensor)",
                             position, data_size));
  } catch (...) {
    if (mapping_) ::munmap(const_cast<std::byte*>(mapping_), size_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_) ::munmap(const_cast<std::byte*>(mapping_), size_);
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto found = index_.find(name);
  if (found == index_.end()) fail_tensor(path_, name, "no such tensor in the file");
  return tensors_[found->second];
}

std::span<const std::byte> SafetensorsFile::bytes(const std::string& name) const {
  const SafetensorsTensorInfo& entry = info(name);
  return {mapping_ + data_offset_ + entry.begin, size_t(entry.end - entry.begin)};
}

Tensor SafetensorsFile::read(const std::string& name, std::optional<DType> dtype) const {
  const SafetensorsTensorInfo& entry = info(name);
  if (!entry.dtype.dtype)
    fail_tensor(path_, name, fmt::format("dtype {} is not supported (only F64, F32, F16, BF16, I64, I32, U32, U16, U8)",
                                         entry.dtype.name));
  const DType stored = *entry.dtype.dtype;
  const DType target = dtype.value_or(stored);
  if (entry.shape.size() > size_t(kMaxTensorRank))
    fail_tensor(path_, name, fmt::format("rank {} is above the supported {}", entry.shape.size(), kMaxTensorRank));
  Tensor result = Tensor::empty(entry.tensor_shape(), target);
  std::span<const std::byte> data = bytes(name);
  if (stored == target) {
    if (!data.empty()) std::memcpy(result.data(), data.data(), data.size());
  } else {
    convert_elements(data.data(), stored, result.data(), target, entry.numel(),
                     fmt::format("{}: tensor '{}'", path_.string(), name));
  }
  return result;
}

// ---------------------------------------------------------------------------------------------------------------
// Writing

void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata, SafetensorsWriteOptions options) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json values = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) values[key] = value;
    header[std::string(kMetadataKey)] = std::move(values);
  }
  uint64_t offset = 0;
  for (const SafetensorsEntry& entry : entries) {
    FLM_CHECK(entry.name != kMetadataKey && !entry.name.empty(), kComponent, "{}: invalid tensor name '{}'",
              path.string(), entry.name);
    FLM_CHECK(!header.contains(entry.name), kComponent, "{}: tensor '{}' is written twice", path.string(), entry.name);
    const uint64_t size = uint64_t(entry.shape.numel()) * dtype_size(entry.dtype);
    nlohmann::ordered_json shape = nlohmann::ordered_json::array();
    for (int64_t dim : entry.shape) shape.push_back(dim);
    header[entry.name] = {{"dtype", std::string(safetensors_dtype(entry.dtype).name)},
                          {"shape", std::move(shape)},
                          {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string header_text = header.dump();
  // Pad with spaces so the data buffer starts at a multiple of 8 bytes.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::array<unsigned char, 8> length{};
  for (int byte = 0; byte < 8; ++byte) length[size_t(byte)] = (uint64_t(header_text.size()) >> (8 * byte)) & 0xff;

  FileWriter file(path, {.component = kComponent, .sync = options.sync});
  file.write(length.data(), length.size());
  file.write(header_text);
  for (const SafetensorsEntry& entry : entries) {
    Tensor values = entry.values();
    if (!values.defined() || values.dtype() != entry.dtype || !(values.shape() == entry.shape))
      fail_tensor(path, entry.name,
                  fmt::format("values are {} {}, the header says {} {}",
                              values.defined() ? dtype_name(values.dtype()) : "undefined",
                              values.defined() ? values.shape().str() : "", dtype_name(entry.dtype),
                              entry.shape.str()));
    Tensor host = values.to(Device::cpu());
    if (host.nbytes() > 0) file.write(host.data(), host.nbytes());
  }
  file.commit();
}

// ---------------------------------------------------------------------------------------------------------------
// Conversion

void convert_elements(const void* source, DType from, void* destination, DType to, int64_t count,
                      std::string_view what) {
  if (count == 0) return;
  if (from == to) {
    std::memcpy(destination, source, size_t(count) * dtype_size(from));
    return;
  }
  FLM_CHECK(is_floating(from) && is_floating(to), kComponent, "{}: cannot convert {} values to {}", what,
            dtype_name(from), dtype_name(to));
  // The cast kernel rounds once, to nearest even (kernels/copy.h), as every other conversion of the project.
  const Tensor input = Tensor::from_blob(const_cast<void*>(source), Shape{count}, from, Device::cpu());
  Tensor output = Tensor::from_blob(destination, Shape{count}, to, Device::cpu());
  kernels::cast({.source = input, .destination = output});
}

Tensor to_host_dtype(const Tensor& tensor, DType dtype) {
  Tensor host = tensor.to(Device::cpu());
  if (host.dtype() == dtype) return host;
  Tensor result = Tensor::empty(host.shape(), dtype);
  convert_elements(host.data(), host.dtype(), result.data(), dtype, host.numel(), "tensor");
  return result;
}

}  // namespace fast_llm::engine
