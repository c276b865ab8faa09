// The Store contract, on the TCP store and on the file store alike: set/get/add/wait between separate clients
// (threads with their own connections, and forked processes), blocking calls that wait for a later set, timeouts that
// end in an Error naming the missing keys and the store, prefix views that keep groups apart, and store_barrier
// across 4 processes.
#include "fast_llm/distributed/store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "distributed/distributed_test_util.h"
#include "distributed/processes.h"
#include "fast_llm/core/error.h"

namespace fast_llm::distributed {
namespace {

using std::chrono::milliseconds;
using testing::run_processes;

// Long enough never to expire in a passing test on a loaded machine.
constexpr milliseconds kPatient{60000};
// Short, for the tests whose point is a timeout.
constexpr milliseconds kShort{300};
// What "within the timeout" means when asserting a failure came in time: generous, the CI machine is slow.
constexpr auto kBound = std::chrono::seconds(30);

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& value) { return {value.begin(), value.end()}; }

using fast_llm::testing::error_of;

enum class Kind { tcp, file };

// Makes the stores of one test: `first()` is rank 0's (the TCP server lives in it), `client()` another participant's
// own store on the same rendezvous (a new connection, or a new file store on the same folder).
class StoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(test.begin(), test.end(), '/', '_');  // "Name/tcp"
    folder_ = std::filesystem::temp_directory_path() /
              fmt::format("fast_llm_store_test_{}_{}_{}", test, ::getpid(), counter++);
    std::filesystem::remove_all(folder_);
  }
  void TearDown() override {
    first_.reset();
    std::filesystem::remove_all(folder_);
  }

  std::shared_ptr<Store> first(milliseconds timeout = kPatient) {
    if (GetParam() == Kind::tcp) {
      first_ = tcp_store("127.0.0.1", 0, 0, timeout);
      port_ = tcp_store_port(*first_);
    } else {
      first_ = file_store(folder_, timeout);
    }
    return first_;
  }

  // Another participant's store; after first().
  std::shared_ptr<Store> client(milliseconds timeout = kPatient) const {
    if (GetParam() == Kind::tcp) return tcp_store("127.0.0.1", port_, 1, timeout);
    return file_store(folder_, timeout);
  }

  std::string kind_name() const { return GetParam() == Kind::tcp ? "tcp store" : "file store"; }

  std::filesystem::path folder_;
  std::shared_ptr<Store> first_;
  int port_ = 0;
};

TEST_P(StoreTest, SetThenGetFromAnotherClient) {
  const auto store = first();
  const auto other = client();
  const std::vector<uint8_t> binary = {0, 1, 255, 0, 7};
  store->set("binary", binary);
  store->set("empty", {});
  other->set("text", bytes("hello"));
  EXPECT_EQ(other->get("binary"), binary);
  EXPECT_TRUE(other->get("empty").empty());
  EXPECT_EQ(text(store->get("text")), "hello");
  // Keys with separators and dots are plain keys (the file store must not turn them into paths).
  store->set("group/../odd key.1", bytes("x"));
  EXPECT_EQ(text(other->get("group/../odd key.1")), "x");
  EXPECT_EQ(store->timeout(), kPatient);
  EXPECT_NE(store->describe().find(kind_name()), std::string::npos) << store->describe();
}

TEST_P(StoreTest, GetWaitsForALaterSet) {
  const auto store = first();
  std::vector<uint8_t> received;
  std::thread reader([&, other = client()] { received = other->get("late"); });
  std::this_thread::sleep_for(milliseconds(100));  // most likely the get is waiting by now; correct either way
  store->set("late", bytes("value"));
  reader.join();
  EXPECT_EQ(text(received), "value");
}

TEST_P(StoreTest, WaitForSeveralKeys) {
  const auto store = first();
  store->wait({});  // nothing to wait for
  std::thread writer([other = client()] {
    for (const char* key : {"a", "b", "c"}) {
      std::this_thread::sleep_for(milliseconds(20));
      other->set(key, bytes(key));
    }
  });
  store->wait({"a", "b", "c"});
  writer.join();
  EXPECT_EQ(text(store->get("c")), "c");
}

TEST_P(StoreTest, AddCountsFromZero) {
  const auto store = first();
  const auto other = client();
  EXPECT_EQ(store->add("counter", 1), 1);
  EXPECT_EQ(other->add("counter", 5), 6);
  EXPECT_EQ(store->add("counter", -10), -4);
  EXPECT_EQ(other->add("fresh", 0), 0);
  // A counter is a key like any other: it exists once added to, and reads as decimal text.
  other->wait({"counter", "fresh"});
  EXPECT_EQ(text(store->get("counter")), "-4");
}

TEST_P(StoreTest, AddToAValueThatIsNotACounter) {
  const auto store = first();
  store->set("name", bytes("not a number"));
  const std::string message = error_of([&] { store->add("name", 1); });
  EXPECT_NE(message.find("[distributed]"), std::string::npos) << message;
  EXPECT_NE(message.find("'name'"), std::string::npos) << message;
  EXPECT_NE(message.find("not a counter"), std::string::npos) << message;
  // The store is still usable.
  EXPECT_EQ(store->add("other", 2), 2);
}

TEST_P(StoreTest, ConcurrentAddsFromThreadsAreEachCountedOnce) {
  const auto store = first();
  constexpr int kThreads = 6;
  constexpr int kAdds = 50;
  std::vector<std::vector<int64_t>> results(kThreads);
  std::vector<std::thread> threads;
  for (int thread = 0; thread < kThreads; ++thread) {
    threads.emplace_back([&, thread, other = client()] {
      for (int add = 0; add < kAdds; ++add) results[thread].push_back(other->add("shared", 1));
    });
  }
  for (auto& thread : threads) thread.join();
  std::set<int64_t> all;
  for (const auto& values : results) {
    all.insert(values.begin(), values.end());
    EXPECT_TRUE(std::is_sorted(values.begin(), values.end()));
  }
  // Every add saw a different value: 1 .. kThreads * kAdds, none lost, none twice.
  EXPECT_EQ(all.size(), size_t{kThreads * kAdds});
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);
}

TEST_P(StoreTest, ProcessesExchangeThroughTheStore) {
  const auto store = first();
  constexpr int kProcesses = 4;
  run_processes(kProcesses, [&](int index) {
    const auto own = client();
    const int64_t order = own->add("joined", 1);
    FLM_REQUIRE(order >= 1 && order <= kProcesses, "order {}", order);
    own->set(fmt::format("rank_{}", index), bytes(fmt::format("value of {}", index)));
    std::vector<std::string> keys;
    for (int other = 0; other < kProcesses; ++other) keys.push_back(fmt::format("rank_{}", other));
    own->wait(keys);
    for (int other = 0; other < kProcesses; ++other) {
      const std::string value = text(own->get(fmt::format("rank_{}", other)));
      FLM_REQUIRE(value == fmt::format("value of {}", other), "got '{}' for rank {}", value, other);
    }
  });
  EXPECT_EQ(store->add("joined", 0), kProcesses);
}

TEST_P(StoreTest, GetTimesOutNamingTheKeyAndTheStore) {
  const auto store = first(kShort);
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of([&] { store->get("never_set"); });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_NE(message.find("[distributed]"), std::string::npos) << message;
  EXPECT_NE(message.find("'never_set'"), std::string::npos) << message;
  EXPECT_NE(message.find(store->describe()), std::string::npos) << message;
  EXPECT_NE(message.find("timed out after 300 ms"), std::string::npos) << message;
  EXPECT_GE(elapsed, kShort);
  EXPECT_LT(elapsed, kBound);
  // A timeout leaves the store usable.
  store->set("after", bytes("ok"));
  EXPECT_EQ(text(store->get("after")), "ok");
}

TEST_P(StoreTest, WaitTimesOutNamingTheMissingKeys) {
  const auto store = first(kShort);
  store->set("present", bytes("1"));
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of([&] { store->wait({"present", "missing_1", "missing_2"}); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, kBound);
  EXPECT_NE(message.find("keys 'missing_1', 'missing_2' not set"), std::string::npos) << message;
  EXPECT_EQ(message.find("'present'"), std::string::npos) << message;
  EXPECT_NE(message.find(store->describe()), std::string::npos) << message;
}

TEST_P(StoreTest, PrefixViewsKeepGroupsApart) {
  const auto store = first(kShort);
  const auto data = prefix_store(store, "data");
  const auto pipeline = prefix_store(client(kShort), "pipeline");
  data->set("id", bytes("data id"));
  pipeline->set("id", bytes("pipeline id"));
  EXPECT_EQ(text(data->get("id")), "data id");
  EXPECT_EQ(text(pipeline->get("id")), "pipeline id");
  EXPECT_EQ(data->add("count", 3), 3);
  EXPECT_EQ(pipeline->add("count", 1), 1);
  // The underlying store holds `prefix/key`; the bare key belongs to no group.
  EXPECT_EQ(text(store->get("data/id")), "data id");
  EXPECT_EQ(text(store->get("pipeline/count")), "1");
  data->set("only_data", {});
  const std::string message = error_of([&] { pipeline->get("only_data"); });
  EXPECT_NE(message.find("'pipeline/only_data'"), std::string::npos) << message;
  EXPECT_NE(error_of([&] { store->wait({"id"}); }).find("'id'"), std::string::npos);
  // Nested views compose, and describe themselves.
  const auto nested = prefix_store(data, "tensor");
  nested->set("x", bytes("nested"));
  EXPECT_EQ(text(store->get("data/tensor/x")), "nested");
  EXPECT_EQ(nested->timeout(), kShort);
  EXPECT_NE(nested->describe().find("prefix 'tensor/'"), std::string::npos) << nested->describe();
}

TEST_P(StoreTest, BarrierAcrossFourProcesses) {
  const auto store = first();
  constexpr int kProcesses = 4;
  run_processes(kProcesses, [&](int index) {
    const auto own = client();
    for (int round = 0; round < 3; ++round) {
      // Nobody leaves a barrier before everyone has arrived at it: every arrival of this round is counted by then.
      own->add(fmt::format("arrived_{}", round), 1);
      store_barrier(*own, "step", kProcesses);
      const int64_t arrived = own->add(fmt::format("arrived_{}", round), 0);
      FLM_REQUIRE(arrived == kProcesses, "round {}: {} arrived before the barrier released process {}", round, arrived,
                  index);
    }
  });
}

TEST_P(StoreTest, BarrierWithAMissingParticipantTimesOut) {
  const auto store = first(kShort);
  const auto start = std::chrono::steady_clock::now();
  std::string messages[2];
  std::thread other([&, own = client(kShort)] { messages[1] = error_of([&] { store_barrier(*own, "sync", 3); }); });
  messages[0] = error_of([&] { store_barrier(*store, "sync", 3); });
  other.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, kBound);
  for (const std::string& message : messages) {
    EXPECT_NE(message.find("'sync/done/0'"), std::string::npos) << message;
    EXPECT_NE(message.find("timed out"), std::string::npos) << message;
  }
  EXPECT_NE(error_of([&] { store_barrier(*store, "bad", 0); }).find("world size 0"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values(Kind::tcp, Kind::file),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param == Kind::tcp ? "tcp" : "file";
                         });

}  // namespace
}  // namespace fast_llm::distributed
