// The server side of the TCP store (internal to the distributed library: rank 0's tcp_store owns one).
//
// One thread serves every rank: it polls the listening socket, the client sockets and a wake-up descriptor, reads
// frames into per-connection buffers and answers from an in-memory map. A `get` or `wait` whose keys are missing is
// parked on its connection and answered when a `set` or `add` provides them, or with `timed_out` (naming the missing
// keys) at the deadline the client sent; so a client never depends on its own clock to learn which keys were missing.
// Sockets are non-blocking and replies are buffered, so a slow or vanished client never stalls the others; a client
// that closes its socket, or sends bytes that are not this protocol, only loses its own connection. Destroying the
// server wakes the thread, which closes every connection (clients then get an Error, not a hang) and ends.
#pragma once

#include <memory>
#include <thread>

namespace fast_llm::distributed {

class TcpStoreServer {
 public:
  // Listens on all interfaces on `port`, or on a free port the system picks when `port` is 0. A port in use is an
  // Error naming it.
  explicit TcpStoreServer(int port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The port it listens on.
  int port() const { return port_; }

 private:
  struct State;
  void serve();

  int port_ = 0;
  int listen_descriptor_ = -1;
  int wake_descriptor_ = -1;      // an eventfd: written by the destructor to stop the thread
  std::unique_ptr<State> state_;  // touched by the serving thread only
  std::thread thread_;
};

}  // namespace fast_llm::distributed
