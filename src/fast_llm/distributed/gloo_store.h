// Our rendezvous Store seen through Gloo's store interface (private to the Gloo engine), every key under
// `prefix` + "/", so that each group's full mesh has its own key space in the one store of the job. Gloo's values are
// bytes as `char`, ours as `uint8_t`; waits use the store's own timeout (a missing rank is reported by the store,
// naming the key).
#pragma once

#include <gloo/rendezvous/store.h>

#include <memory>
#include <string>
#include <vector>

#include "fast_llm/distributed/store.h"

namespace fast_llm::distributed::detail {

class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<distributed::Store> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(full_key(key), std::vector<uint8_t>(data.begin(), data.end()));
  }

  std::vector<char> get(const std::string& key) override {
    std::vector<uint8_t> value = store_->get(full_key(key));
    return std::vector<char>(value.begin(), value.end());
  }

  void wait(const std::vector<std::string>& keys) override {
    std::vector<std::string> full_keys;
    full_keys.reserve(keys.size());
    for (const std::string& key : keys) full_keys.push_back(full_key(key));
    store_->wait(full_keys);
  }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override { wait(keys); }

 private:
  std::string full_key(const std::string& key) const { return prefix_ + "/" + key; }

  std::shared_ptr<distributed::Store> store_;
  std::string prefix_;
};

}  // namespace fast_llm::distributed::detail
