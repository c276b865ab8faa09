// Input files: formats by name (plain, gzip, zstd JSON Lines; text files), order, line numbers, blank lines, empty
// files, folders, patterns and the refused formats.
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <fstream>

#include "fast_llm/core/error.h"
#include "fast_llm/preparation/input_files.h"

namespace fast_llm::preparation {
namespace {

namespace fs = std::filesystem;

class InputFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() /
              ("fast_llm_input_files_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(folder_);
    fs::create_directories(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }

  fs::path write(const std::string& name, const std::string& bytes) {
    const fs::path path = folder_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  fs::path write_gzip(const std::string& name, const std::string& text) {
    const fs::path path = folder_ / name;
    gzFile file = gzopen(path.c_str(), "wb");
    gzwrite(file, text.data(), unsigned(text.size()));
    gzclose(file);
    return path;
  }
  fs::path write_zstd(const std::string& name, const std::string& text) {
    std::string compressed(ZSTD_compressBound(text.size()), '\0');
    compressed.resize(ZSTD_compress(compressed.data(), compressed.size(), text.data(), text.size(), 3));
    return write(name, compressed);
  }
  // "location=text" of every record.
  std::vector<std::string> read_all(const std::vector<InputFile>& files) {
    RecordReader reader(files);
    std::vector<std::string> out;
    Record record;
    while (reader.next(record)) out.push_back(record.location().substr(folder_.string().size() + 1) + "=" +
                                              record.text);
    empty_ = reader.empty_files();
    return out;
  }
  fs::path folder_;
  std::vector<fs::path> empty_;
};

TEST_F(InputFiles, EveryFormatInOrderWithLineNumbers) {
  write("a.jsonl", "{\"text\": \"a1\"}\n\n  \n{\"text\": \"a4\"}\r\n{\"text\": \"a5\"}");
  write_gzip("b.jsonl.gz", "{\"text\": \"b1\"}\n{\"text\": \"b2\"}\n");
  write_zstd("c.json.zst", "{\"text\": \"c1\"}\n");
  write("d.txt", "A whole\nfile.\n");
  write("e.jsonl", "");
  const std::vector<InputFile> files = resolve_input_files({folder_.string()});
  ASSERT_EQ(files.size(), 5u);
  EXPECT_EQ(files[3].format, RecordFormat::text_file);
  const std::vector<std::string> expected{
      "a.jsonl:1={\"text\": \"a1\"}",    "a.jsonl:4={\"text\": \"a4\"}",    "a.jsonl:5={\"text\": \"a5\"}",
      "b.jsonl.gz:1={\"text\": \"b1\"}", "b.jsonl.gz:2={\"text\": \"b2\"}", "c.json.zst:1={\"text\": \"c1\"}",
      "d.txt=A whole\nfile.\n"};
  EXPECT_EQ(read_all(files), expected);
  EXPECT_EQ(empty_, std::vector<fs::path>{folder_ / "e.jsonl"});
  EXPECT_EQ(count_records(files), (std::vector<int64_t>{3, 2, 1, 1, 0}));
}

TEST_F(InputFiles, FoldersPatternsListsAndDataFiles) {
  write("data/z.jsonl", "{}\n");
  write("data/sub/a.jsonl", "{}\n");
  write("data/croissant.json", "{\"@context\": {}}");
  write("data/README.md", "# not data");
  write("other/x.txt", "x");
  std::vector<InputFile> files = resolve_input_files({(folder_ / "data").string()});
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].path, folder_ / "data/sub/a.jsonl");
  EXPECT_EQ(files[1].path, folder_ / "data/z.jsonl");
  files = resolve_input_files({(folder_ / "*/*.jsonl").string(), (folder_ / "other/x.txt").string(),
                               (folder_ / "data/z.jsonl").string()});
  ASSERT_EQ(files.size(), 2u);  // z.jsonl once
  EXPECT_EQ(files[1].path, folder_ / "other/x.txt");
  files = resolve_input_files({(folder_ / "data").string()}, {"sub/*.jsonl"});
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].path, folder_ / "data/sub/a.jsonl");
}

TEST_F(InputFiles, RefusalsNameTheEntryAndTheReason) {
  write("t.parquet", "PAR1");
  write("only_parquet/p.parquet", "PAR1");
  write("notes.md", "hi");
  auto message = [](const std::function<void()>& function) -> std::string {
    try {
      function();
    } catch (const Error& error) {
      return error.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message([&] { resolve_input_files({(folder_ / "t.parquet").string()}); }).find("Apache Arrow"),
            std::string::npos);
  EXPECT_NE(message([&] { resolve_input_files({(folder_ / "only_parquet").string()}); }).find("Apache Arrow"),
            std::string::npos);
  EXPECT_NE(message([&] { resolve_input_files({(folder_ / "notes.md").string()}); }).find("unknown format"),
            std::string::npos);
  EXPECT_NE(message([&] { resolve_input_files({(folder_ / "missing.jsonl").string()}); }).find("missing.jsonl"),
            std::string::npos);
  EXPECT_NE(message([&] { resolve_input_files({(folder_ / "*.nothing").string()}); }).find("no file matches"),
            std::string::npos);
  EXPECT_NE(message([] { resolve_input_files({"stas/openwebtext-10k"}); }).find("hub datasets"), std::string::npos);
  // A corrupt compressed file is an error naming it, whether gzip or zstd.
  write("bad.jsonl.gz", std::string("\x1f\x8b\x08\x00garbage-garbage-garbage", 28));
  write("bad.jsonl.zst", "not zstd at all");
  for (const char* name : {"bad.jsonl.gz", "bad.jsonl.zst"}) {
    const std::vector<InputFile> files = resolve_input_files({(folder_ / name).string()});
    EXPECT_NE(message([&] { count_records(files); }).find(name), std::string::npos) << name;
  }
  // A zstd file cut inside its frame is truncated, not silently short.
  std::string text;
  for (int index = 0; index < 2000; ++index) text += "{\"text\": \"line " + std::to_string(index) + "\"}\n";
  const fs::path whole = write_zstd("whole.jsonl.zst", text);
  std::ifstream in(whole, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write("cut.jsonl.zst", bytes.substr(0, bytes.size() / 2));
  const std::vector<InputFile> cut = resolve_input_files({(folder_ / "cut.jsonl.zst").string()});
  EXPECT_NE(message([&] { count_records(cut); }).find("truncated"), std::string::npos);
}

}  // namespace
}  // namespace fast_llm::preparation
