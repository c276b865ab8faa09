// The TCP store's server: one thread, poll(2) over non-blocking sockets (design in tcp_store_server.h, wire format in
// tcp_store_protocol.h).
#include "fast_llm/distributed/tcp_store_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/distributed/tcp_store_protocol.h"

namespace fast_llm::distributed {

using namespace tcp_store_protocol;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kComponent = "distributed";
constexpr size_t kReceiveChunk = 64 * 1024;

// One client's socket and what is in flight on it.
struct Connection {
  explicit Connection(int descriptor) : descriptor(descriptor) {}

  // A `get` or `wait` that waits for keys to be set.
  struct Pending {
    Command command;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  int descriptor;
  std::vector<uint8_t> input;   // received bytes that do not yet form a whole frame
  std::vector<uint8_t> output;  // reply bytes not yet sent (from `output_sent` on)
  size_t output_sent = 0;
  bool greeted = false;  // it has said hello
  bool closed = false;   // the peer closed it, or broke the protocol: dropped at the end of the round
  std::optional<Pending> pending;

  bool idle() const { return !closed && !pending && output_sent == output.size(); }
};

// Parses a counter's decimal text; nullopt when it is not an integer (a key `set` with other bytes).
std::optional<int64_t> parse_counter(const std::vector<uint8_t>& value) {
  int64_t result = 0;
  const char* begin = reinterpret_cast<const char*>(value.data());
  const char* end = begin + value.size();
  const auto [stop, error] = std::from_chars(begin, end, result);
  if (value.empty() || error != std::errc() || stop != end) return std::nullopt;
  return result;
}

std::vector<uint8_t> counter_text(int64_t value) {
  const std::string text = std::to_string(value);
  return {text.begin(), text.end()};
}

}  // namespace

struct TcpStoreServer::State {
  std::unordered_map<std::string, std::vector<uint8_t>> values;
  std::vector<std::unique_ptr<Connection>> connections;

  void accept_all(int listen_descriptor);
  void receive(Connection& connection);
  void flush(Connection& connection);
  void reply(Connection& connection, FrameWriter& writer);
  // Handles the whole frames buffered on `connection` while it is idle; true if it handled any.
  bool process(Connection& connection);
  void handle(Connection& connection, std::span<const uint8_t> body);
  // Answers `connection`'s pending request if its keys are all set.
  void try_complete(Connection& connection);
  // Answers the pending requests whose deadline has passed, with the keys still missing.
  void expire(Clock::time_point now);
  // Milliseconds until the nearest deadline of a pending request (-1: none), for poll(2).
  int poll_timeout(Clock::time_point now) const;
  void drop_closed();
  void close_all();
};

void TcpStoreServer::State::accept_all(int listen_descriptor) {
  while (true) {
    const int descriptor = ::accept4(listen_descriptor, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (descriptor < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // EAGAIN: none left. Out of descriptors or memory: the waiting client stays in the backlog and is taken
      // when a connection closes; it times out on its side if none does.
      return;
    }
    const int one = 1;
    ::setsockopt(descriptor, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    connections.push_back(std::make_unique<Connection>(descriptor));
  }
}

void TcpStoreServer::State::receive(Connection& connection) {
  uint8_t chunk[kReceiveChunk];
  while (!connection.closed) {
    const ssize_t received = ::recv(connection.descriptor, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (received > 0) {
      connection.input.insert(connection.input.end(), chunk, chunk + received);
      // A peer that streams more than a frame while its request is parked is not following the protocol.
      if (connection.input.size() > 2 * static_cast<size_t>(kMaxFrameBytes)) connection.closed = true;
    } else if (received == 0) {
      connection.closed = true;
    } else if (errno == EINTR) {
      continue;
    } else {
      if (errno != EAGAIN && errno != EWOULDBLOCK) connection.closed = true;
      return;
    }
  }
}

void TcpStoreServer::State::flush(Connection& connection) {
  while (!connection.closed && connection.output_sent < connection.output.size()) {
    const ssize_t sent = ::send(connection.descriptor, connection.output.data() + connection.output_sent,
                                connection.output.size() - connection.output_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent >= 0) {
      connection.output_sent += static_cast<size_t>(sent);
    } else if (errno == EINTR) {
      continue;
    } else {
      if (errno != EAGAIN && errno != EWOULDBLOCK) connection.closed = true;
      return;
    }
  }
  if (connection.output_sent == connection.output.size()) {
    connection.output.clear();
    connection.output_sent = 0;
  }
}

void TcpStoreServer::State::reply(Connection& connection, FrameWriter& writer) {
  const std::vector<uint8_t>& frame = writer.frame();
  connection.output.insert(connection.output.end(), frame.begin(), frame.end());
  flush(connection);
}

bool TcpStoreServer::State::process(Connection& connection) {
  bool handled = false;
  while (connection.idle() && connection.input.size() >= kLengthBytes) {
    const uint32_t length = frame_length(connection.input.data());
    if (length > kMaxFrameBytes) {
      connection.closed = true;
      break;
    }
    if (connection.input.size() < kLengthBytes + length) break;
    const std::vector<uint8_t> body(connection.input.begin() + kLengthBytes,
                                    connection.input.begin() + kLengthBytes + length);
    connection.input.erase(connection.input.begin(), connection.input.begin() + kLengthBytes + length);
    handle(connection, body);
    handled = true;
  }
  return handled;
}

void TcpStoreServer::State::handle(Connection& connection, std::span<const uint8_t> body) {
  FrameReader reader(body);
  const auto command = static_cast<Command>(reader.u8());
  // The first request says who it is: anything else on this port is dropped before it can change a value.
  if (!connection.greeted && command != Command::hello) {
    connection.closed = true;
    return;
  }
  FrameWriter writer;
  switch (command) {
    case Command::hello: {
      const uint64_t magic = reader.u64();
      const uint32_t version = reader.u32();
      if (!reader.complete() || magic != kMagic) {
        connection.closed = true;
        return;
      }
      if (version != kVersion) {
        writer.u8(static_cast<uint8_t>(Status::failed))
            .string(fmt::format("the server speaks protocol version {}, this client {} (mixed fast-llm builds?)",
                                kVersion, version));
      } else {
        connection.greeted = true;
        writer.u8(static_cast<uint8_t>(Status::ok)).u64(kMagic).u32(kVersion);
      }
      reply(connection, writer);
      return;
    }
    case Command::set: {
      std::string key = reader.string();
      std::vector<uint8_t> value = reader.bytes();
      if (!reader.complete()) break;
      values[std::move(key)] = std::move(value);
      writer.u8(static_cast<uint8_t>(Status::ok));
      reply(connection, writer);
      for (const auto& other : connections) try_complete(*other);
      return;
    }
    case Command::add: {
      std::string key = reader.string();
      const int64_t delta = reader.i64();
      if (!reader.complete()) break;
      int64_t current = 0;
      if (const auto found = values.find(key); found != values.end()) {
        const std::optional<int64_t> counter = parse_counter(found->second);
        if (!counter) {
          writer.u8(static_cast<uint8_t>(Status::failed))
              .string(fmt::format("key '{}' holds a value that is not a counter", key));
          reply(connection, writer);
          return;
        }
        current = *counter;
      }
      int64_t result = 0;
      if (__builtin_add_overflow(current, delta, &result)) {
        writer.u8(static_cast<uint8_t>(Status::failed))
            .string(fmt::format("counter '{}' overflows: {} + {}", key, current, delta));
        reply(connection, writer);
        return;
      }
      values[std::move(key)] = counter_text(result);
      writer.u8(static_cast<uint8_t>(Status::ok)).i64(result);
      reply(connection, writer);
      for (const auto& other : connections) try_complete(*other);
      return;
    }
    case Command::get:
    case Command::wait: {
      const uint64_t timeout_ms = reader.u64();
      std::vector<std::string> keys;
      if (command == Command::get) {
        keys.push_back(reader.string());
      } else {
        const uint32_t count = reader.u32();
        // Each key takes at least its 4-byte length: a count beyond that is a corrupt frame, not a reservation.
        if (count > reader.remaining() / 4) break;
        for (uint32_t index = 0; index < count; ++index) keys.push_back(reader.string());
      }
      if (!reader.complete()) break;
      const auto timeout = std::chrono::milliseconds(std::min<uint64_t>(timeout_ms, 1ull << 40));
      connection.pending = Connection::Pending{command, std::move(keys), Clock::now() + timeout};
      try_complete(connection);
      return;
    }
  }
  // An unknown command or a malformed body: this peer does not speak the protocol.
  connection.closed = true;
}

void TcpStoreServer::State::try_complete(Connection& connection) {
  if (connection.closed || !connection.pending) return;
  for (const std::string& key : connection.pending->keys) {
    if (!values.contains(key)) return;
  }
  FrameWriter writer;
  writer.u8(static_cast<uint8_t>(Status::ok));
  if (connection.pending->command == Command::get) writer.bytes(values.at(connection.pending->keys.front()));
  connection.pending.reset();
  reply(connection, writer);
}

void TcpStoreServer::State::expire(Clock::time_point now) {
  for (const auto& connection : connections) {
    if (connection->closed || !connection->pending || connection->pending->deadline > now) continue;
    std::vector<const std::string*> missing;
    for (const std::string& key : connection->pending->keys) {
      if (!values.contains(key)) missing.push_back(&key);
    }
    FrameWriter writer;
    writer.u8(static_cast<uint8_t>(Status::timed_out)).u32(static_cast<uint32_t>(missing.size()));
    for (const std::string* key : missing) writer.string(*key);
    connection->pending.reset();
    reply(*connection, writer);
  }
}

int TcpStoreServer::State::poll_timeout(Clock::time_point now) const {
  std::optional<Clock::time_point> nearest;
  for (const auto& connection : connections) {
    if (connection->pending && (!nearest || connection->pending->deadline < *nearest)) {
      nearest = connection->pending->deadline;
    }
  }
  if (!nearest) return -1;
  if (*nearest <= now) return 0;
  // Rounded up, so that the deadline has passed when poll returns.
  const auto milliseconds = std::chrono::ceil<std::chrono::milliseconds>(*nearest - now).count();
  return static_cast<int>(std::min<int64_t>(milliseconds, 1 << 30));
}

void TcpStoreServer::State::drop_closed() {
  std::erase_if(connections, [](const std::unique_ptr<Connection>& connection) {
    if (!connection->closed) return false;
    ::close(connection->descriptor);
    return true;
  });
}

void TcpStoreServer::State::close_all() {
  for (const auto& connection : connections) ::close(connection->descriptor);
  connections.clear();
}

TcpStoreServer::TcpStoreServer(int port) : state_(std::make_unique<State>()) {
  FLM_CHECK(port >= 0 && port <= 65535, kComponent, "tcp store: port {} is not a TCP port (0 to 65535)", port);
  listen_descriptor_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  FLM_CHECK(listen_descriptor_ >= 0, kComponent, "tcp store: cannot create a socket ({})", std::strerror(errno));
  // Rebinding a port whose previous connections are in TIME_WAIT (a restarted job) is allowed; a port another
  // process listens on is still refused.
  const int one = 1;
  ::setsockopt(listen_descriptor_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(listen_descriptor_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    ::close(listen_descriptor_);
    FLM_CHECK(error != EADDRINUSE, kComponent,
              "tcp store: port {} is already in use on this machine (another job, or torchrun's agent); choose "
              "another with MASTER_PORT",
              port);
    throw Error(kComponent, fmt::format("tcp store: cannot bind port {} ({})", port, std::strerror(error)));
  }
  if (::listen(listen_descriptor_, SOMAXCONN) != 0) {
    const int error = errno;
    ::close(listen_descriptor_);
    throw Error(kComponent, fmt::format("tcp store: cannot listen on port {} ({})", port, std::strerror(error)));
  }
  socklen_t size = sizeof(address);
  FLM_ASSERT(::getsockname(listen_descriptor_, reinterpret_cast<sockaddr*>(&address), &size) == 0);
  port_ = ntohs(address.sin_port);
  wake_descriptor_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_descriptor_ < 0) {
    const int error = errno;
    ::close(listen_descriptor_);
    throw Error(kComponent, fmt::format("tcp store: cannot create an eventfd ({})", std::strerror(error)));
  }
  thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  const uint64_t one = 1;
  // An eventfd write only fails when the counter would overflow, which one write cannot do.
  [[maybe_unused]] const ssize_t written = ::write(wake_descriptor_, &one, sizeof(one));
  thread_.join();
  ::close(wake_descriptor_);
  ::close(listen_descriptor_);
}

void TcpStoreServer::serve() {
  State& state = *state_;
  std::vector<pollfd> descriptors;
  try {
    while (true) {
      descriptors.clear();
      descriptors.push_back({wake_descriptor_, POLLIN, 0});
      descriptors.push_back({listen_descriptor_, POLLIN, 0});
      for (const auto& connection : state.connections) {
        const bool sending = connection->output_sent < connection->output.size();
        descriptors.push_back({connection->descriptor, static_cast<short>(POLLIN | (sending ? POLLOUT : 0)), 0});
      }
      const int ready = ::poll(descriptors.data(), descriptors.size(), state.poll_timeout(Clock::now()));
      if (ready < 0) {
        FLM_CHECK(errno == EINTR, kComponent, "tcp store server: poll failed ({})", std::strerror(errno));
        continue;
      }
      if (descriptors[0].revents != 0) break;
      // The connections polled are the first ones; those accepted now are read in the next round.
      const size_t polled = descriptors.size() - 2;
      if (descriptors[1].revents & POLLIN) state.accept_all(listen_descriptor_);
      for (size_t index = 0; index < polled; ++index) {
        Connection& connection = *state.connections[index];
        const short events = descriptors[index + 2].revents;
        if (events & (POLLIN | POLLHUP | POLLERR)) state.receive(connection);
        if (events & POLLOUT) state.flush(connection);
      }
      // A set on one connection can release another's parked request, after which that one's buffered frames are
      // handled: repeat until a round handles nothing.
      bool handled = true;
      while (handled) {
        handled = false;
        for (size_t index = 0; index < state.connections.size(); ++index) {
          handled = state.process(*state.connections[index]) || handled;
        }
      }
      state.expire(Clock::now());
      state.drop_closed();
    }
  } catch (const std::exception& error) {
    // Nothing can be thrown to anyone from this thread: say why it stops; closing the sockets makes every client's
    // next call fail with an Error.
    log_line(LogLevel::error,
             fmt::format("[{}] tcp store server on port {} stopped: {}", kComponent, port_, error.what()),
             /*main_rank_only=*/false);
  }
  state.close_all();
}

}  // namespace fast_llm::distributed
