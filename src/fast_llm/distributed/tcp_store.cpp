// The TCP store's client, and rank 0's server beside it (server in tcp_store_server.h, wire format in
// tcp_store_protocol.h).
//
// Every rank, rank 0 included, talks to the server through one socket: one request at a time under a mutex, so the
// store may be shared by threads. Connecting retries (rank 0 may start last) until the store's timeout. Blocking
// requests carry the timeout to the server, which answers `timed_out` with the keys still missing; the client itself
// waits a little longer than that for any answer, so a server that hangs or vanishes is an Error too. Sends use
// MSG_NOSIGNAL, so a vanished server is an Error, not SIGPIPE. After a failure that leaves the connection in an
// unknown state (no answer, a broken reply, a closed socket), every later call fails with the first reason.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <mutex>
#include <thread>

#include "fast_llm/core/error.h"
#include "fast_llm/distributed/descriptor.h"
#include "fast_llm/distributed/store.h"
#include "fast_llm/distributed/tcp_store_protocol.h"
#include "fast_llm/distributed/tcp_store_server.h"

namespace fast_llm::distributed {
namespace {

using namespace tcp_store_protocol;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kComponent = "distributed";
// How much longer than the timeout it sent a client waits for the server's answer to a blocking request.
constexpr milliseconds kReplyGrace{5000};
constexpr milliseconds kConnectRetry{100};

std::string quoted(const std::vector<std::string>& keys) {
  std::string result;
  for (const std::string& key : keys) result += fmt::format("{}'{}'", result.empty() ? "" : ", ", key);
  return result;
}

// Waits until `descriptor` is ready for `events`; false when `deadline` passes first.
bool wait_ready(int descriptor, short events, Clock::time_point deadline) {
  while (true) {
    const auto remaining = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
    if (remaining <= 0) return false;
    pollfd entry{descriptor, events, 0};
    const int ready = ::poll(&entry, 1, static_cast<int>(std::min<int64_t>(remaining, INT_MAX)));
    // An error condition is reported by the send or receive that follows.
    if (ready > 0 || (ready < 0 && errno != EINTR)) return true;
  }
}

class TcpStore final : public Store {
 public:
  TcpStore(const std::string& address, int port, int rank, milliseconds timeout)
      : address_(address), port_(port), timeout_(timeout) {
    FLM_CHECK(rank >= 0, kComponent, "tcp store: rank {} is negative", rank);
    FLM_CHECK(timeout.count() > 0, kComponent, "tcp store: the timeout ({} ms) must be positive", timeout.count());
    FLM_CHECK((port >= 1 && port <= 65535) || (port == 0 && rank == 0), kComponent,
              "tcp store: port {} is not a TCP port (1 to 65535; 0, a free port, only for rank 0)", port);
    if (rank == 0) {
      server_ = std::make_unique<TcpStoreServer>(port);
      port_ = server_->port();
    }
    description_ = fmt::format("tcp store {}:{}", address_, port_);
    // Rank 0 reaches its own server through loopback, whatever interface MASTER_ADDR names.
    connect(rank == 0 ? "127.0.0.1" : address_);
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    const std::string what = fmt::format("set of key '{}'", key);
    check_size(key.size() + value.size(), what);
    FrameWriter writer;
    writer.u8(static_cast<uint8_t>(Command::set)).string(key).bytes(value);
    std::lock_guard lock(mutex_);
    const std::vector<uint8_t> body = exchange(writer.frame(), what, Clock::now() + timeout_);
    FrameReader reader(body);
    check_status(reader, what);
    expect_complete(reader, what);
  }

  std::vector<uint8_t> get(const std::string& key) override {
    const std::string what = fmt::format("get of key '{}'", key);
    check_size(key.size(), what);
    FrameWriter writer;
    writer.u8(static_cast<uint8_t>(Command::get)).u64(timeout_.count()).string(key);
    std::lock_guard lock(mutex_);
    const std::vector<uint8_t> body = exchange(writer.frame(), what, Clock::now() + timeout_ + kReplyGrace);
    FrameReader reader(body);
    check_status(reader, what);
    std::vector<uint8_t> value = reader.bytes();
    expect_complete(reader, what);
    return value;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    const std::string what = fmt::format("add to key '{}'", key);
    check_size(key.size(), what);
    FrameWriter writer;
    writer.u8(static_cast<uint8_t>(Command::add)).string(key).i64(delta);
    std::lock_guard lock(mutex_);
    const std::vector<uint8_t> body = exchange(writer.frame(), what, Clock::now() + timeout_);
    FrameReader reader(body);
    check_status(reader, what);
    const int64_t value = reader.i64();
    expect_complete(reader, what);
    return value;
  }

  void wait(const std::vector<std::string>& keys) override {
    const std::string what = keys.size() == 1 ? fmt::format("wait for key '{}'", keys.front())
                                              : fmt::format("wait for {} keys", keys.size());
    size_t size = 0;
    for (const std::string& key : keys) size += key.size() + kLengthBytes;
    check_size(size, what);
    FrameWriter writer;
    writer.u8(static_cast<uint8_t>(Command::wait)).u64(timeout_.count()).u32(static_cast<uint32_t>(keys.size()));
    for (const std::string& key : keys) writer.string(key);
    std::lock_guard lock(mutex_);
    const std::vector<uint8_t> body = exchange(writer.frame(), what, Clock::now() + timeout_ + kReplyGrace);
    FrameReader reader(body);
    check_status(reader, what);
    expect_complete(reader, what);
  }

  milliseconds timeout() const override { return timeout_; }
  std::string describe() const override { return description_; }
  int port() const { return port_; }

 private:
  // Connects to `host`:port_, retrying until the timeout, and greets the server.
  void connect(const std::string& host) {
    const Clock::time_point deadline = Clock::now() + timeout_;
    std::string last_error;
    while (!socket_.valid()) {
      addrinfo hints{};
      hints.ai_family = AF_INET;  // the server listens on IPv4's 0.0.0.0
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* found = nullptr;
      const int status = ::getaddrinfo(host.c_str(), std::to_string(port_).c_str(), &hints, &found);
      if (status != 0) {
        last_error = fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(status));
      } else {
        for (const addrinfo* entry = found; entry != nullptr && !socket_.valid(); entry = entry->ai_next) {
          socket_.reset(try_connect(*entry, deadline, last_error));
        }
        ::freeaddrinfo(found);
      }
      if (socket_.valid()) break;
      FLM_CHECK(Clock::now() + kConnectRetry < deadline, kComponent,
                "{}: cannot connect to {}:{} within {} ms (last attempt: {}); is rank 0 running, and do MASTER_ADDR "
                "and MASTER_PORT name it?",
                description_, host, port_, timeout_.count(), last_error);
      std::this_thread::sleep_for(kConnectRetry);
    }
    const std::string what =
        "greeting the server (a server that is not a fast-llm store, such as torchrun's agent on MASTER_PORT, "
        "fails here)";
    FrameWriter writer;
    writer.u8(static_cast<uint8_t>(Command::hello)).u64(kMagic).u32(kVersion);
    const std::vector<uint8_t> body = exchange(writer.frame(), what, Clock::now() + timeout_);
    FrameReader reader(body);
    check_status(reader, what);
    const uint64_t magic = reader.u64();
    const uint32_t version = reader.u32();
    if (!reader.complete() || magic != kMagic || version != kVersion) fail(what, "the answer is not this protocol");
  }

  // One connection attempt; the descriptor, or -1 with `error` saying why.
  static int try_connect(const addrinfo& entry, Clock::time_point deadline, std::string& error) {
    const int descriptor =
        ::socket(entry.ai_family, entry.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, entry.ai_protocol);
    if (descriptor < 0) {
      error = fmt::format("socket: {}", std::strerror(errno));
      return -1;
    }
    int result = ::connect(descriptor, entry.ai_addr, entry.ai_addrlen) == 0 ? 0 : errno;
    if (result == EINPROGRESS) {
      if (!wait_ready(descriptor, POLLOUT, deadline)) {
        result = ETIMEDOUT;
      } else {
        socklen_t size = sizeof(result);
        if (::getsockopt(descriptor, SOL_SOCKET, SO_ERROR, &result, &size) != 0) result = errno;
      }
    }
    if (result != 0) {
      error = std::strerror(result);
      ::close(descriptor);
      return -1;
    }
    const int one = 1;
    ::setsockopt(descriptor, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return descriptor;
  }

  // Sends `frame` and returns the body of the reply, or fails naming `what`.
  std::vector<uint8_t> exchange(const std::vector<uint8_t>& frame, const std::string& what,
                                Clock::time_point deadline) {
    FLM_CHECK(broken_.empty(), kComponent, "{}: {}: the connection failed earlier ({})", description_, what, broken_);
    size_t sent = 0;
    while (sent < frame.size()) {
      const ssize_t result =
          ::send(socket_.get(), frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (result >= 0) {
        sent += static_cast<size_t>(result);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!wait_ready(socket_.get(), POLLOUT, deadline)) fail(what, "the server does not take the request");
      } else if (errno != EINTR) {
        fail(what, errno == EPIPE || errno == ECONNRESET ? "the server closed the connection (did rank 0 stop?)"
                                                         : fmt::format("send failed ({})", std::strerror(errno)));
      }
    }
    std::vector<uint8_t> length(kLengthBytes);
    receive(length.data(), length.size(), what, deadline);
    const uint32_t size = frame_length(length.data());
    if (size > kMaxFrameBytes) fail(what, "the answer is not this protocol");
    std::vector<uint8_t> body(size);
    receive(body.data(), body.size(), what, deadline);
    return body;
  }

  void receive(uint8_t* data, size_t size, const std::string& what, Clock::time_point deadline) {
    size_t received = 0;
    while (received < size) {
      const ssize_t result = ::recv(socket_.get(), data + received, size - received, MSG_DONTWAIT);
      if (result > 0) {
        received += static_cast<size_t>(result);
      } else if (result == 0 || errno == ECONNRESET) {
        fail(what, "the server closed the connection (did rank 0 stop?)");
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!wait_ready(socket_.get(), POLLIN, deadline)) {
          fail(what, fmt::format("no answer from the server within {} ms", timeout_.count()));
        }
      } else if (errno != EINTR) {
        fail(what, fmt::format("receive failed ({})", std::strerror(errno)));
      }
    }
  }

  // The status of a reply: returns on `ok`; a timeout or a failure the server reports is an Error.
  void check_status(FrameReader& reader, const std::string& what) {
    const auto status = static_cast<Status>(reader.u8());
    if (status == Status::ok && reader.ok()) return;
    if (status == Status::timed_out) {
      std::vector<std::string> missing(reader.u32());
      for (std::string& key : missing) key = reader.string();
      expect_complete(reader, what);
      throw Error(kComponent, fmt::format("{}: {} timed out after {} ms: key{} {} not set", description_, what,
                                          timeout_.count(), missing.size() == 1 ? "" : "s", quoted(missing)));
    }
    if (status == Status::failed) {
      const std::string message = reader.string();
      expect_complete(reader, what);
      throw Error(kComponent, fmt::format("{}: {}: {}", description_, what, message));
    }
    fail(what, "the answer is not this protocol");
  }

  void expect_complete(const FrameReader& reader, const std::string& what) {
    if (!reader.complete()) fail(what, "the answer is not this protocol");
  }

  void check_size(size_t size, const std::string& what) const {
    FLM_CHECK(size + 64 <= kMaxFrameBytes, kComponent, "{}: {}: {} bytes exceed the store's limit of {} bytes",
              description_, what, size, kMaxFrameBytes - 64);
  }

  // The connection is in an unknown state: every later call fails with this reason.
  [[noreturn]] void fail(const std::string& what, const std::string& reason) {
    broken_ = reason;
    throw Error(kComponent, fmt::format("{}: {}: {}", description_, what, reason));
  }

  std::unique_ptr<TcpStoreServer> server_;  // rank 0 only
  std::string address_;
  int port_;
  milliseconds timeout_;
  std::string description_;
  std::mutex mutex_;
  Descriptor socket_;   // declared after the server, so closed before it stops: the server sees a client that left
  std::string broken_;  // why the connection cannot be used any more, once it cannot
};

}  // namespace

std::shared_ptr<Store> tcp_store(const std::string& address, int port, int rank, std::chrono::milliseconds timeout) {
  return std::make_shared<TcpStore>(address, port, rank, timeout);
}

int tcp_store_port(const Store& store) {
  const auto* tcp = dynamic_cast<const TcpStore*>(&store);
  FLM_CHECK(tcp != nullptr, kComponent, "{} is not a tcp store: it has no port", store.describe());
  return tcp->port();
}

}  // namespace fast_llm::distributed
