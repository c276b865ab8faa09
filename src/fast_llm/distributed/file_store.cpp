// The file store: a folder every rank sees (a shared file system, or /tmp for the processes of one machine).
//
// A key is the file `k_<key>` in the folder, its name percent-encoded to letters, digits, '_' and '-' (so no key can
// name a path elsewhere, or collide with the `.lock` and `.tmp` files beside it). `set` writes a temporary file and
// renames it into place (core/file_writer.h), so a reader sees no file or the whole value. `add` holds an flock(2) on
// the key's `.lock` file while it reads, increments and rewrites the counter (decimal text, so `get` of a counter
// reads it); the kernel releases the lock of a process that dies. Waiting is polling with a short sleep that grows
// from 1 to 20 ms, until the store's timeout.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "fast_llm/core/error.h"
#include "fast_llm/core/file_writer.h"
#include "fast_llm/distributed/descriptor.h"
#include "fast_llm/distributed/store.h"

namespace fast_llm::distributed {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kComponent = "distributed";
// Room for the `k_` prefix and FileWriter's `.tmp.<pid>` suffix within a file name's 255 bytes.
constexpr size_t kMaxEncodedKey = 200;

// Sleeps between polls, 1 ms at first and up to 20 ms: quick when the other ranks are, light when they are not.
class Backoff {
 public:
  void sleep() {
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, milliseconds(20));
  }

 private:
  milliseconds delay_{1};
};

std::string quoted(const std::vector<std::string>& keys) {
  std::string result;
  for (const std::string& key : keys) result += fmt::format("{}'{}'", result.empty() ? "" : ", ", key);
  return result;
}

class FileStore final : public Store {
 public:
  FileStore(const std::filesystem::path& folder, milliseconds timeout)
      : folder_(folder), timeout_(timeout), description_(fmt::format("file store {}", folder.string())) {
    FLM_CHECK(timeout.count() > 0, kComponent, "{}: the timeout ({} ms) must be positive", description_,
              timeout.count());
    std::error_code error;
    std::filesystem::create_directories(folder_, error);
    FLM_CHECK(!error, kComponent, "{}: cannot create the folder ({})", description_, error.message());
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    write_file(path(key), {reinterpret_cast<const char*>(value.data()), value.size()}, {.component = kComponent});
  }

  std::vector<uint8_t> get(const std::string& key) override {
    const std::filesystem::path file = path(key);
    const Clock::time_point deadline = Clock::now() + timeout_;
    Backoff backoff;
    while (true) {
      if (std::optional<std::vector<uint8_t>> value = read(file)) return *value;
      check_deadline(deadline, fmt::format("get of key '{}'", key), {key});
      backoff.sleep();
    }
  }

  int64_t add(const std::string& key, int64_t delta) override {
    const std::filesystem::path file = path(key);
    const std::string what = fmt::format("add to key '{}'", key);
    const std::filesystem::path lock_path = file.string() + ".lock";
    // The lock goes with the descriptor, on every way out.
    const Descriptor lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    FLM_CHECK(lock.valid(), kComponent, "{}: {}: cannot open {} ({})", description_, what, lock_path.string(),
              std::strerror(errno));
    const Clock::time_point deadline = Clock::now() + timeout_;
    Backoff backoff;
    while (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
      FLM_CHECK(errno == EWOULDBLOCK || errno == EINTR, kComponent, "{}: {}: cannot lock {} ({})", description_, what,
                lock_path.string(), std::strerror(errno));
      FLM_CHECK(Clock::now() < deadline, kComponent, "{}: {}: {} stayed locked for {} ms", description_, what,
                lock_path.string(), timeout_.count());
      backoff.sleep();
    }
    int64_t current = 0;
    if (const std::optional<std::vector<uint8_t>> value = read(file)) {
      const char* begin = reinterpret_cast<const char*>(value->data());
      const char* end = begin + value->size();
      const auto [stop, error] = std::from_chars(begin, end, current);
      FLM_CHECK(!value->empty() && error == std::errc() && stop == end, kComponent,
                "{}: {}: the key holds a value that is not a counter", description_, what);
    }
    int64_t result = 0;
    FLM_CHECK(!__builtin_add_overflow(current, delta, &result), kComponent, "{}: {}: the counter overflows: {} + {}",
              description_, what, current, delta);
    write_file(file, std::to_string(result), {.component = kComponent});
    return result;
  }

  void wait(const std::vector<std::string>& keys) override {
    std::vector<std::filesystem::path> files;
    for (const std::string& key : keys) files.push_back(path(key));
    const Clock::time_point deadline = Clock::now() + timeout_;
    Backoff backoff;
    while (true) {
      std::vector<std::string> missing;
      for (size_t index = 0; index < keys.size(); ++index) {
        std::error_code error;
        const bool present = std::filesystem::exists(files[index], error);
        FLM_CHECK(!error, kComponent, "{}: cannot look for {} ({})", description_, files[index].string(),
                  error.message());
        if (!present) missing.push_back(keys[index]);
      }
      if (missing.empty()) return;
      check_deadline(deadline,
                     keys.size() == 1 ? fmt::format("wait for key '{}'", keys.front())
                                      : fmt::format("wait for {} keys", keys.size()),
                     missing);
      backoff.sleep();
    }
  }

  milliseconds timeout() const override { return timeout_; }
  std::string describe() const override { return description_; }

 private:
  std::filesystem::path path(const std::string& key) const {
    std::string name = "k_";
    for (const char character : key) {
      const auto byte = static_cast<unsigned char>(character);
      if (std::isalnum(byte) || byte == '_' || byte == '-') {
        name += character;
      } else {
        name += fmt::format("%{:02X}", byte);
      }
    }
    FLM_CHECK(name.size() <= kMaxEncodedKey, kComponent, "{}: key '{}' is too long for a file name", description_, key);
    return folder_ / name;
  }

  // The whole content of `file`, or nullopt when it does not exist (yet).
  std::optional<std::vector<uint8_t>> read(const std::filesystem::path& file) const {
    const Descriptor descriptor(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!descriptor.valid()) {
      FLM_CHECK(errno == ENOENT, kComponent, "{}: cannot open {} ({})", description_, file.string(),
                std::strerror(errno));
      return std::nullopt;
    }
    std::vector<uint8_t> value;
    uint8_t chunk[4096];
    while (true) {
      const ssize_t size = ::read(descriptor.get(), chunk, sizeof(chunk));
      if (size == 0) return value;
      if (size < 0) {
        FLM_CHECK(errno == EINTR, kComponent, "{}: cannot read {} ({})", description_, file.string(),
                  std::strerror(errno));
        continue;
      }
      value.insert(value.end(), chunk, chunk + size);
    }
  }

  void check_deadline(Clock::time_point deadline, const std::string& what,
                      const std::vector<std::string>& missing) const {
    FLM_CHECK(Clock::now() < deadline, kComponent, "{}: {} timed out after {} ms: key{} {} not set", description_, what,
              timeout_.count(), missing.size() == 1 ? "" : "s", quoted(missing));
  }

  std::filesystem::path folder_;
  milliseconds timeout_;
  std::string description_;
};

}  // namespace

std::shared_ptr<Store> file_store(const std::filesystem::path& folder, std::chrono::milliseconds timeout) {
  return std::make_shared<FileStore>(folder, timeout);
}

}  // namespace fast_llm::distributed
