// The key-value store processes meet through (rendezvous): NCCL's unique id, Gloo's addresses and barriers go through
// it. Keys are strings, values bytes; a key is written once.
//
// Implementations: a TCP store served by rank 0 (one thread; the other ranks connect, retrying until `timeout`), a
// file store on a folder every rank sees (`model.distributed` chooses), and a prefix view that gives each process
// group its own key space. Every blocking call waits at most the store's timeout and then throws an Error naming the
// key and the store, so a missing rank ends the run with a message instead of a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace fast_llm::distributed {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // The value of `key`, waiting until some process sets it.
  virtual std::vector<uint8_t> get(const std::string& key) = 0;
  // Adds `delta` to the integer counter `key` (created at 0) and returns the new value: barriers and id allocation.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Waits until every key is set.
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  // "tcp store 10.0.0.1:29501", for error messages.
  virtual std::string describe() const = 0;
};

// Rank 0 serves on `port` (all interfaces) and connects to itself; the others connect to `address:port`. Rank 0 may
// pass port 0 for a free port the system picks (tests, several stores on one machine): `tcp_store_port` says which.
std::shared_ptr<Store> tcp_store(const std::string& address, int port, int rank, std::chrono::milliseconds timeout);
// The port of a store made by `tcp_store` (an Error for any other store).
int tcp_store_port(const Store& store);
// Keys are files in `folder` (created if needed), written atomically.
std::shared_ptr<Store> file_store(const std::filesystem::path& folder, std::chrono::milliseconds timeout);
// `store` with every key prefixed by `prefix` + "/".
std::shared_ptr<Store> prefix_store(std::shared_ptr<Store> store, const std::string& prefix);

// Waits until `world_size` processes have called it with the same `name` (a barrier through the store).
void store_barrier(Store& store, const std::string& name, int world_size);

}  // namespace fast_llm::distributed
