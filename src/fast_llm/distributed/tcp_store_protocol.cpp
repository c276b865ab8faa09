// Encoding and decoding of the TCP store's frames (the format is in tcp_store_protocol.h): explicit little-endian
// byte order, so that ranks on machines of either byte order agree.
#include "fast_llm/distributed/tcp_store_protocol.h"

namespace fast_llm::distributed::tcp_store_protocol {
namespace {

void append_little_endian(std::vector<uint8_t>& bytes, uint64_t value, size_t size) {
  for (size_t index = 0; index < size; ++index) bytes.push_back(static_cast<uint8_t>(value >> (8 * index)));
}

uint64_t read_little_endian(const uint8_t* bytes, size_t size) {
  uint64_t value = 0;
  for (size_t index = 0; index < size; ++index) value |= static_cast<uint64_t>(bytes[index]) << (8 * index);
  return value;
}

}  // namespace

FrameWriter& FrameWriter::u8(uint8_t value) {
  bytes_.push_back(value);
  return *this;
}

FrameWriter& FrameWriter::u32(uint32_t value) {
  append_little_endian(bytes_, value, 4);
  return *this;
}

FrameWriter& FrameWriter::u64(uint64_t value) {
  append_little_endian(bytes_, value, 8);
  return *this;
}

FrameWriter& FrameWriter::bytes(std::span<const uint8_t> value) {
  u32(static_cast<uint32_t>(value.size()));
  bytes_.insert(bytes_.end(), value.begin(), value.end());
  return *this;
}

FrameWriter& FrameWriter::string(const std::string& value) {
  return bytes({reinterpret_cast<const uint8_t*>(value.data()), value.size()});
}

const std::vector<uint8_t>& FrameWriter::frame() {
  const uint64_t length = bytes_.size() - kLengthBytes;
  for (size_t index = 0; index < kLengthBytes; ++index) bytes_[index] = static_cast<uint8_t>(length >> (8 * index));
  return bytes_;
}

std::span<const uint8_t> FrameReader::take(size_t size) {
  if (!ok_ || size > body_.size() - offset_) {
    ok_ = false;
    return {};
  }
  const std::span<const uint8_t> result = body_.subspan(offset_, size);
  offset_ += size;
  return result;
}

uint8_t FrameReader::u8() {
  const std::span<const uint8_t> field = take(1);
  return field.empty() ? 0 : field[0];
}

uint32_t FrameReader::u32() {
  const std::span<const uint8_t> field = take(4);
  return field.empty() ? 0 : static_cast<uint32_t>(read_little_endian(field.data(), 4));
}

uint64_t FrameReader::u64() {
  const std::span<const uint8_t> field = take(8);
  return field.empty() ? 0 : read_little_endian(field.data(), 8);
}

std::vector<uint8_t> FrameReader::bytes() {
  const uint32_t size = u32();
  const std::span<const uint8_t> field = take(size);
  return {field.begin(), field.end()};
}

std::string FrameReader::string() {
  const uint32_t size = u32();
  const std::span<const uint8_t> field = take(size);
  return {field.begin(), field.end()};
}

uint32_t frame_length(const uint8_t* buffer) { return static_cast<uint32_t>(read_little_endian(buffer, kLengthBytes)); }

}  // namespace fast_llm::distributed::tcp_store_protocol
