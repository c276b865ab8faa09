// The wire protocol of the TCP store (internal to the distributed library: tcp_store.cpp speaks it as a client,
// tcp_store_server.cpp as the server). Our own, small and versioned; torchrun's TCPStore protocol is internal to
// PyTorch and changes between releases, so we do not speak it.
//
// A frame is a 4-byte little-endian length followed by that many bytes of body. Integers in a body are little-endian,
// strings and byte strings are a 4-byte length then the bytes. Requests (body: command byte, then fields):
//   hello  magic u64, version u32             -> ok magic u64, version u32     (first request of every connection)
//   set    key, value                          -> ok
//   get    timeout_ms u64, key                 -> ok value | timed_out [keys]  (the server holds it until key is set)
//   add    key, delta i64                      -> ok new value i64 | failed message
//   wait   timeout_ms u64, count u32, keys     -> ok | timed_out missing keys (count u32, then the keys)
// Replies are a status byte then the fields. One connection has at most one request in flight; the server answers
// a connection's requests in order. Counters are stored as decimal text, so `get` of a counter reads its value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fast_llm::distributed::tcp_store_protocol {

inline constexpr uint64_t kMagic = 0x45524f54534d4c46;  // "FLMSTORE" in little-endian bytes
inline constexpr uint32_t kVersion = 1;
// A larger frame is a peer that does not speak this protocol (or a corrupt stream), not a value anyone stores.
inline constexpr uint32_t kMaxFrameBytes = 256u << 20;
inline constexpr size_t kLengthBytes = 4;

enum class Command : uint8_t { hello = 1, set = 2, get = 3, add = 4, wait = 5 };
enum class Status : uint8_t { ok = 0, timed_out = 1, failed = 2 };

// Builds one frame: the length prefix is filled in by `frame()`.
class FrameWriter {
 public:
  FrameWriter() : bytes_(kLengthBytes, 0) {}
  FrameWriter& u8(uint8_t value);
  FrameWriter& u32(uint32_t value);
  FrameWriter& u64(uint64_t value);
  FrameWriter& i64(int64_t value) { return u64(static_cast<uint64_t>(value)); }
  FrameWriter& bytes(std::span<const uint8_t> value);
  FrameWriter& string(const std::string& value);
  // The whole frame, length prefix included.
  const std::vector<uint8_t>& frame();

 private:
  std::vector<uint8_t> bytes_;
};

// Reads the fields of one frame body. A read past the end yields zeros and marks the reader failed, so a decoder reads
// every field and checks `ok()` once: a malformed body from a peer is a protocol failure, never a crash.
class FrameReader {
 public:
  explicit FrameReader(std::span<const uint8_t> body) : body_(body) {}
  uint8_t u8();
  uint32_t u32();
  uint64_t u64();
  int64_t i64() { return static_cast<int64_t>(u64()); }
  std::vector<uint8_t> bytes();
  std::string string();
  // Every read so far was within the body.
  bool ok() const { return ok_; }
  // Every read was within the body and the body has been read to its end.
  bool complete() const { return ok_ && offset_ == body_.size(); }
  size_t remaining() const { return body_.size() - offset_; }

 private:
  std::span<const uint8_t> take(size_t size);

  std::span<const uint8_t> body_;
  size_t offset_ = 0;
  bool ok_ = true;
};

// The length of the frame that starts `buffer` (which holds at least kLengthBytes bytes).
uint32_t frame_length(const uint8_t* buffer);

}  // namespace fast_llm::distributed::tcp_store_protocol
