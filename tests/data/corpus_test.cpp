// The byte tokenizer and the offline corpus builder: text detection, deterministic file collection, and a dataset
// that reads back (through a `file` dataset config, as a trainer would) to the files' bytes.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "core/full_disk.h"
#include "data_test_util.h"
#include "fast_llm/data/config.h"
#include "fast_llm/data/corpus.h"
#include "fast_llm/data/memmap.h"

namespace fast_llm::data {
namespace {

using testing::TemporaryFolder;
using testing::write_file;

TEST(ByteTokenizer, EncodesBytesWithDocumentMarkers) {
  ByteTokenizer tokenizer;
  EXPECT_EQ(tokenizer.encode("A\xff\n"), (std::vector<int64_t>{256, 65, 255, 10, 257}));
  EXPECT_EQ(tokenizer.encode("ab", false, false), (std::vector<int64_t>{97, 98}));
  std::vector<int64_t> tokens = tokenizer.encode("héllo");
  EXPECT_EQ(tokenizer.decode(tokens), "héllo");
  EXPECT_THROW(tokenizer.decode(std::vector<int64_t>{300}), Error);
}

TEST(Corpus, TextDetection) {
  EXPECT_TRUE(looks_like_text("plain text\twith tabs\r\n"));
  EXPECT_TRUE(looks_like_text("UTF-8: \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(looks_like_text(std::string("with a \0 byte", 13)));
  EXPECT_FALSE(looks_like_text("Latin-1 caf\xe9 here"));
  EXPECT_FALSE(looks_like_text("overlong \xc0\xaf slash"));
  EXPECT_FALSE(looks_like_text("surrogate \xed\xa0\x80"));
  EXPECT_FALSE(looks_like_text("cut \xe2\x82"));
  EXPECT_FALSE(looks_like_text("\x01\x02\x03\x04 mostly control"));
}

TEST(Corpus, BuildsADatasetThatReadsBackThroughItsConfigFile) {
  TemporaryFolder folder;
  std::filesystem::create_directories(folder / "source/b");
  std::filesystem::create_directories(folder / "source/a");
  write_file(folder / "source/b/copyright", "Copyright (c) someone.\nPermission is granted.\n");
  write_file(folder / "source/a/copyright", "Another license text.\n");
  write_file(folder / "source/a/notes.txt", "Notes\f page two\n");
  write_file(folder / "source/a/image.bin", std::string("\x89PNG\0\0\0\x0d", 8));
  write_file(folder / "source/a/empty.txt", "");
  std::filesystem::create_symlink(folder / "source/a/notes.txt", folder / "source/b/notes_link.txt");

  CorpusOptions options;
  options.sources = {(folder / "source").string(), (folder / "missing").string()};
  // Sorted by path: a/copyright, a/empty.txt, a/image.bin, a/notes.txt, b/copyright (the link repeats a/notes.txt).
  std::vector<std::filesystem::path> files = collect_corpus_files(options.sources);
  std::vector<std::filesystem::path> expected{folder / "source/a/copyright", folder / "source/a/empty.txt",
                                              folder / "source/a/image.bin", folder / "source/a/notes.txt",
                                              folder / "source/b/copyright"};
  EXPECT_EQ(files, expected);

  CorpusStats stats = build_byte_corpus(folder / "out", options);
  EXPECT_EQ(stats.documents, 3);
  EXPECT_EQ(stats.skipped_binary, 1);
  EXPECT_EQ(stats.skipped_size, 1);
  const std::vector<std::string> texts{"Another license text.\n", "Notes\f page two\n",
                                       "Copyright (c) someone.\nPermission is granted.\n"};
  int64_t tokens = 0;
  for (const auto& text : texts) tokens += int64_t(text.size()) + 2;
  EXPECT_EQ(stats.tokens, tokens);

  // Read it as training would: a `file` dataset pointing at the written config.
  DatasetFromFileConfig file;
  file.path = folder / "out" / "fast_llm_config.yaml";
  auto dataset = file.build();
  ASSERT_EQ(dataset->num_documents(), 3);
  EXPECT_EQ(dataset->num_tokens(), tokens);
  ByteTokenizer tokenizer;
  for (int64_t index = 0; index < 3; ++index) {
    Document document = dataset->get_document(index);
    EXPECT_EQ(document.tokens.front(), ByteTokenizer::kBos);
    EXPECT_EQ(document.tokens.back(), ByteTokenizer::kEos);
    EXPECT_EQ(tokenizer.decode(document.tokens), texts[size_t(index)]);
  }
  // Stored as uint16, the smallest type holding 258 ids, as prepare would choose.
  EXPECT_EQ(MemmapDataset("x", stats.dataset_path).token_data_type(), TokenDataType::uint16);
  YAML::Node written = YAML::LoadFile(stats.config_path.string());
  EXPECT_EQ(written["config"]["type"].as<std::string>(), "memmap");
  EXPECT_EQ(written["config"]["path"].as<std::string>(), "shard_0_0.fast_llm_dataset");
  EXPECT_EQ(written["metadata"]["num_tokens"].as<int64_t>(), tokens);
  EXPECT_EQ(written["metadata"]["tokens"]["num_documents"].as<int64_t>(), 3);
  EXPECT_EQ(written["metadata"]["tokens"]["data_type"].as<std::string>(), "uint16");
}

TEST(Corpus, AFullDiskIsAnErrorNamingTheFileAndLeavesNoOutput) {
  TemporaryFolder folder;
  std::filesystem::create_directories(folder / "source");
  write_file(folder / "source/text.txt", std::string(3000, 'a'));
  CorpusOptions options;
  options.sources = {(folder / "source").string()};
  std::string message;
  {
    fast_llm::testing::FileSizeLimit limit(1000);  // the shard takes about 6 kB
    message = testing::error_message([&] { build_byte_corpus(folder / "out", options); });
  }
  EXPECT_NE(message.find(fmt::format("[memmap] {}: write failed after 1000 bytes (File too large)",
                                     (folder / "out" / "shard_0_0.fast_llm_dataset").string())),
            std::string::npos)
      << message;
  EXPECT_TRUE(std::filesystem::is_empty(folder / "out"));
}

TEST(Corpus, WildcardSourcesAndLimits) {
  TemporaryFolder folder;
  for (const char* package : {"zlib", "bash", "acl"}) {
    std::filesystem::create_directories(folder / "doc" / package);
    write_file(folder / "doc" / package / "copyright", std::string("license of ") + package + "\n");
    write_file(folder / "doc" / package / "changelog", "not matched\n");
  }
  std::vector<std::filesystem::path> files = collect_corpus_files({(folder / "doc/*/copyright").string()});
  std::vector<std::filesystem::path> expected{folder / "doc/acl/copyright", folder / "doc/bash/copyright",
                                              folder / "doc/zlib/copyright"};
  EXPECT_EQ(files, expected);

  // max_bytes stops after the file that reaches it.
  CorpusOptions options;
  options.sources = {(folder / "doc/*/copyright").string()};
  options.max_bytes = 10;
  EXPECT_EQ(build_byte_corpus(folder / "limited", options).documents, 1);
  options.sources = {(folder / "nothing_here").string()};
  EXPECT_THROW(build_byte_corpus(folder / "none", options), Error);
}

// Identical files (Debian's Boost packages each ship one 2 MB copyright file) are taken once; the JSON Lines corpus
// holds every taken text once, escaped, in a fixed shuffled order.
TEST(Corpus, DuplicateTextsAreTakenOnceAndTheTextCorpusIsJsonLines) {
  TemporaryFolder folder;
  for (const char* package : {"boost-a", "boost-b", "boost-c", "zlib"}) {
    std::filesystem::create_directories(folder / "doc" / package);
    write_file(folder / "doc" / package / "copyright",
               std::string(package).starts_with("boost") ? "Boost \"license\"\n\ttext\n" : "zlib license\n");
  }
  CorpusOptions options;
  options.sources = {(folder / "doc/*/copyright").string()};
  const CorpusStats bytes = build_byte_corpus(folder / "bytes", options);
  EXPECT_EQ(bytes.documents, 2);
  EXPECT_EQ(bytes.skipped_duplicate, 2);

  const CorpusStats text = write_text_corpus(folder / "corpus.jsonl", options);
  EXPECT_EQ(text.documents, 2);
  std::ifstream file(folder / "corpus.jsonl");
  std::multiset<std::string> lines;
  for (std::string line; std::getline(file, line);) lines.insert(line);
  EXPECT_EQ(lines, (std::multiset<std::string>{R"({"text":"Boost \"license\"\n\ttext\n"})",
                                                R"({"text":"zlib license\n"})"}));
}

TEST(Corpus, DefaultSourcesOnThisMachine) {
  // A fresh Debian machine has licenses and C++ headers; the builder must find text there without any network.
  std::vector<std::filesystem::path> files = collect_corpus_files(default_corpus_sources());
  if (files.empty()) GTEST_SKIP() << "none of the default corpus folders exist here";
  TemporaryFolder folder;
  CorpusOptions options;
  options.max_bytes = 200000;
  CorpusStats stats = build_byte_corpus(folder / "corpus", options);
  EXPECT_GT(stats.documents, 0);
  EXPECT_GE(stats.tokens, 200000);
  EXPECT_EQ(collect_corpus_files(default_corpus_sources()), files);  // same order every time
}

}  // namespace
}  // namespace fast_llm::data
