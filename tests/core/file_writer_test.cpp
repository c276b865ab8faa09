// FileWriter: what readers see before and after commit, header patching, each mode, and every failure (a full disk
// through /dev/full and through a file size limit, an impossible folder) an Error naming the file, leaving no partial
// file behind.
#include "fast_llm/core/file_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/full_disk.h"
#include "fast_llm/core/error.h"

namespace fast_llm {
namespace {

class FileWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const char* test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    folder_ = std::filesystem::temp_directory_path() /
              fmt::format("fast_llm_file_writer_{}_{}_{}", test, ::getpid(), counter++);
    std::filesystem::remove_all(folder_);
    std::filesystem::create_directories(folder_);
  }
  void TearDown() override { std::filesystem::remove_all(folder_); }

  static std::string read(const std::filesystem::path& path) {
    std::ifstream stream(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
  }
  static void write_plainly(const std::filesystem::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  // The names in the folder, to see that no temporary file is left.
  std::vector<std::string> names() const {
    std::vector<std::string> result;
    for (const auto& entry : std::filesystem::directory_iterator(folder_)) result.push_back(entry.path().filename());
    std::sort(result.begin(), result.end());
    return result;
  }
  template <class Function>
  static std::string error_message(Function function) {
    try {
      function();
    } catch (const Error& error) {
      return error.what();
    }
    return "";
  }

  std::filesystem::path folder_;
};

TEST_F(FileWriterTest, ReplaceShowsTheOldFileUntilCommit) {
  const std::filesystem::path path = folder_ / "nested/out.bin";
  {
    FileWriter writer(path, {.component = "test"});
    writer.write("0000 body");
    EXPECT_FALSE(std::filesystem::exists(path));
    // A header patched once the body is written.
    writer.write_at(0, "9", 1);
    writer.write(std::string(3 << 20, 'x'));  // larger than the buffer: written directly, after what is buffered
    writer.write_at(3, "7", 1);
    EXPECT_EQ(writer.size(), 9u + (3u << 20));
    writer.commit();
  }
  EXPECT_EQ(read(path), "900" "7 body" + std::string(3 << 20, 'x'));

  write_plainly(folder_ / "kept.txt", "previous");
  {
    FileWriter writer(folder_ / "kept.txt", {.component = "test"});
    writer.write("replacement");
    writer.flush();
    EXPECT_EQ(read(folder_ / "kept.txt"), "previous");
    // Destroyed without commit (as by an exception): the previous file stays, the temporary one goes.
  }
  EXPECT_EQ(read(folder_ / "kept.txt"), "previous");
  EXPECT_EQ(names(), (std::vector<std::string>{"kept.txt", "nested"}));

  write_file(folder_ / "kept.txt", "whole", {.sync = true});
  EXPECT_EQ(read(folder_ / "kept.txt"), "whole");
}

TEST_F(FileWriterTest, AppendAndTruncate) {
  write_plainly(folder_ / "log.txt", "first\n");
  {
    FileWriter writer(folder_ / "log.txt", {.mode = FileWriter::Mode::append});
    writer.write("second\n");
    writer.flush();
    EXPECT_EQ(read(folder_ / "log.txt"), "first\nsecond\n");
    writer.write("third\n");
    writer.commit();
  }
  EXPECT_EQ(read(folder_ / "log.txt"), "first\nsecond\nthird\n");
  write_file(folder_ / "log.txt", "new", {.mode = FileWriter::Mode::truncate});
  EXPECT_EQ(read(folder_ / "log.txt"), "new");
  EXPECT_EQ(names(), (std::vector<std::string>{"log.txt"}));
}

TEST_F(FileWriterTest, AFullDeviceIsAnErrorNamingTheFile) {
  // Small writes are buffered: the failure surfaces at commit.
  std::string message = error_message([] { write_file("/dev/full", "abc", {.mode = FileWriter::Mode::truncate}); });
  EXPECT_NE(message.find("[file] /dev/full: write failed after 0 bytes (No space left on device)"), std::string::npos)
      << message;
  // A large write fails at once.
  message = error_message([] {
    FileWriter writer("/dev/full", {.component = "metrics", .mode = FileWriter::Mode::truncate});
    writer.write(std::string(2 << 20, 'x'));
    ADD_FAILURE() << "the write did not fail";
  });
  EXPECT_NE(message.find("[metrics] /dev/full: write failed after 0 bytes (No space left on device)"),
            std::string::npos)
      << message;
}

TEST_F(FileWriterTest, AFullDiskLeavesThePreviousFileAndNoTemporaryOne) {
  write_plainly(folder_ / "data.bin", "previous");
  std::string message;
  {
    testing::FileSizeLimit limit(4096);
    message = error_message([&] { write_file(folder_ / "data.bin", std::string(10000, 'x'), {.sync = true}); });
  }
  EXPECT_NE(message.find(fmt::format("{}: write failed after 4096 bytes (File too large)",
                                     (folder_ / "data.bin").string())),
            std::string::npos)
      << message;
  EXPECT_EQ(read(folder_ / "data.bin"), "previous");
  EXPECT_EQ(names(), (std::vector<std::string>{"data.bin"}));
}

TEST_F(FileWriterTest, AnImpossiblePathIsAnErrorNamingIt) {
  write_plainly(folder_ / "file", "");
  std::string message = error_message([&] { FileWriter(folder_ / "file/inside/out.bin", {.component = "test"}); });
  const std::string expected =
      fmt::format("[test] {}: cannot create the folder", (folder_ / "file/inside/out.bin").string());
  EXPECT_NE(message.find(expected), std::string::npos)
      << message;
  if (::geteuid() != 0) {  // root ignores folder permissions
    std::filesystem::create_directories(folder_ / "locked");
    std::filesystem::permissions(folder_ / "locked",
                                 std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    message = error_message([&] { write_file(folder_ / "locked/out.bin", "x", {}); });
    std::filesystem::permissions(folder_ / "locked", std::filesystem::perms::owner_all);
    EXPECT_NE(message.find(fmt::format("{}: cannot create {}", (folder_ / "locked/out.bin").string(),
                                       (folder_ / "locked/out.bin.tmp.").string())),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("(Permission denied)"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace fast_llm
