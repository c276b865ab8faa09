// The file store beyond the Store contract: its files stay inside the folder whatever the key, the folder is created,
// an impossible folder or an over-long key is an Error, and counters stay exact when processes add at once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "distributed/processes.h"
#include "distributed/distributed_test_util.h"
#include "fast_llm/core/error.h"
#include "fast_llm/distributed/store.h"

namespace fast_llm::distributed {
namespace {

using std::chrono::milliseconds;
using testing::run_processes;

constexpr milliseconds kPatient{60000};

using fast_llm::testing::error_of;

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fast_llm::testing::fresh_test_folder("fast_llm_file_store_test");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::filesystem::path root_;
};

TEST_F(FileStoreTest, CreatesItsFolderAndKeepsEveryKeyInside) {
  const std::filesystem::path folder = root_ / "nested" / "store";
  const auto store = file_store(folder, kPatient);
  EXPECT_TRUE(std::filesystem::is_directory(folder));
  EXPECT_EQ(store->describe(), "file store " + folder.string());
  for (const std::string key : {"../escape", "/absolute", "a/b", ".hidden", "", "k_plain.lock"}) {
    store->set(key, {1, 2, 3});
    EXPECT_EQ(store->get(key), (std::vector<uint8_t>{1, 2, 3})) << key;
  }
  EXPECT_EQ(store->add("../counter", 2), 2);
  // Nothing outside the folder, and one plain file per key (plus the counter's lock) inside it.
  EXPECT_FALSE(std::filesystem::exists(root_ / "nested" / "escape"));
  EXPECT_FALSE(std::filesystem::exists(root_ / "nested" / "counter"));
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    EXPECT_TRUE(entry.is_regular_file()) << entry.path();
    EXPECT_EQ(entry.path().parent_path(), folder);
    ++files;
  }
  EXPECT_EQ(files, 6 + 2);
}

TEST_F(FileStoreTest, ImpossibleFolderIsAnError) {
  std::ofstream(root_ / "file") << "not a folder";
  const std::string message = error_of([&] { file_store(root_ / "file" / "store", kPatient); });
  EXPECT_NE(message.find("[distributed]"), std::string::npos) << message;
  EXPECT_NE(message.find((root_ / "file" / "store").string()), std::string::npos) << message;
  EXPECT_NE(message.find("cannot create the folder"), std::string::npos) << message;
}

TEST_F(FileStoreTest, OverlongKeyIsAnError) {
  const auto store = file_store(root_, kPatient);
  const std::string key(300, 'x');
  EXPECT_NE(error_of([&] { store->set(key, {}); }).find("too long for a file name"), std::string::npos);
}

TEST_F(FileStoreTest, ProcessesAddingAtOnceGetDistinctValues) {
  constexpr int kProcesses = 4;
  constexpr int kAdds = 40;
  run_processes(kProcesses, [&](int index) {
    const auto store = file_store(root_, kPatient);
    std::string seen;
    int64_t previous = 0;
    for (int add = 0; add < kAdds; ++add) {
      const int64_t value = store->add("counter", 1);
      FLM_REQUIRE(value > previous, "{} after {}", value, previous);
      previous = value;
      seen += fmt::format("{} ", value);
    }
    store->set(fmt::format("seen_{}", index), {seen.begin(), seen.end()});
  });
  const auto store = file_store(root_, kPatient);
  std::set<int64_t> all;
  for (int index = 0; index < kProcesses; ++index) {
    const std::vector<uint8_t> seen = store->get(fmt::format("seen_{}", index));
    std::istringstream stream(std::string(seen.begin(), seen.end()));
    int64_t value = 0;
    while (stream >> value) EXPECT_TRUE(all.insert(value).second) << value << " was returned twice";
  }
  EXPECT_EQ(all.size(), size_t{kProcesses * kAdds});
  EXPECT_EQ(store->add("counter", 0), kProcesses * kAdds);
}

}  // namespace
}  // namespace fast_llm::distributed
