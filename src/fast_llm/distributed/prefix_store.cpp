// A prefix view of a store: each process group gets its own key space in the one store of the run. Every key is
// `prefix/key` in the underlying store, so errors name the full key and the underlying store.
#include <fmt/format.h>

#include "fast_llm/core/error.h"
#include "fast_llm/distributed/store.h"

namespace fast_llm::distributed {
namespace {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> store, const std::string& prefix)
      : store_(std::move(store)), prefix_(prefix + "/") {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override { store_->set(prefix_ + key, value); }
  std::vector<uint8_t> get(const std::string& key) override { return store_->get(prefix_ + key); }
  int64_t add(const std::string& key, int64_t delta) override { return store_->add(prefix_ + key, delta); }
  void wait(const std::vector<std::string>& keys) override {
    std::vector<std::string> prefixed;
    prefixed.reserve(keys.size());
    for (const std::string& key : keys) prefixed.push_back(prefix_ + key);
    store_->wait(prefixed);
  }
  std::chrono::milliseconds timeout() const override { return store_->timeout(); }
  std::string describe() const override { return fmt::format("{} (prefix '{}')", store_->describe(), prefix_); }

 private:
  std::shared_ptr<Store> store_;
  std::string prefix_;  // with its trailing '/'
};

}  // namespace

std::shared_ptr<Store> prefix_store(std::shared_ptr<Store> store, const std::string& prefix) {
  FLM_CHECK(store != nullptr, "distributed", "prefix store '{}': no underlying store", prefix);
  return std::make_shared<PrefixStore>(std::move(store), prefix);
}

}  // namespace fast_llm::distributed
