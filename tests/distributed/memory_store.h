// A rendezvous Store in one process's memory, for tests whose ranks are threads: the keys of a map under a mutex, and
// every blocking call bounded by the store's timeout (then an Error naming the key), as the real stores are. Setting
// a key twice is an error: keys are written once, and a second write means two groups share a prefix.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/distributed/store.h"

namespace fast_llm::distributed::test {

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(std::chrono::milliseconds timeout = std::chrono::seconds(30)) : timeout_(timeout) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    {
      std::lock_guard lock(mutex_);
      FLM_CHECK(!values_.contains(key), "store", "memory store: key '{}' set twice", key);
      values_[key] = value;
    }
    changed_.notify_all();
  }

  std::vector<uint8_t> get(const std::string& key) override {
    std::unique_lock lock(mutex_);
    wait_locked(lock, {key});
    return values_.at(key);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard lock(mutex_);
    return counters_[key] += delta;
  }

  void wait(const std::vector<std::string>& keys) override {
    std::unique_lock lock(mutex_);
    wait_locked(lock, keys);
  }

  std::chrono::milliseconds timeout() const override { return timeout_; }
  std::string describe() const override { return "memory store"; }

  // Keys set so far (to check that groups use their own prefixes).
  std::vector<std::string> keys() {
    std::lock_guard lock(mutex_);
    std::vector<std::string> result;
    for (const auto& [key, value] : values_) result.push_back(key);
    return result;
  }

 private:
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys) {
    for (const std::string& key : keys) {
      FLM_CHECK(changed_.wait_for(lock, timeout_, [&] { return values_.contains(key); }), "store",
                "memory store: no value for key '{}' after {} ms", key, timeout_.count());
    }
  }

  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<uint8_t>> values_;
  std::map<std::string, int64_t> counters_;
};

}  // namespace fast_llm::distributed::test
