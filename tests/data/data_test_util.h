// Shared helpers of the data tests: a temporary folder per test, raw byte builders (to write files by the spec rather
// than with the code under test), and small dataset writers.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/data/memmap.h"

namespace fast_llm::data::testing {

// A fresh folder under the system temporary folder, removed at the end of the test.
class TemporaryFolder {
 public:
  TemporaryFolder() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            fmt::format("fast_llm_data_{}_{}_{}_{}", info ? info->test_suite_name() : "x", info ? info->name() : "x",
                        ::getpid(), counter++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TemporaryFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream stream(path, std::ios::binary | std::ios::trunc);
  stream.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

// Little-endian bytes of a value.
template <class T>
std::string little(T value) {
  std::string bytes(sizeof(T), '\0');
  std::memcpy(bytes.data(), &value, sizeof(T));
  return bytes;
}

// Big-endian bytes of the low `size` bytes of a value (the memmap header integers).
inline std::string big(uint64_t value, int size) {
  std::string bytes;
  for (int index = size - 1; index >= 0; --index) bytes.push_back(char((value >> (8 * index)) & 0xFF));
  return bytes;
}

// The message of the fast_llm::Error `function` throws, or "" if it throws none.
template <class Function>
std::string error_message(Function function) {
  try {
    function();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// Writes `documents` with the writer under test.
inline void write_dataset(const std::filesystem::path& path, const std::vector<Document>& documents,
                          MemmapWriter::Options options = {.data_type = TokenDataType::int32}) {
  MemmapWriter writer(path, options);
  for (const Document& document : documents) writer.add_document(document);
  writer.finish();
}

// A preference document as `prepare` writes it with add_bos: BOS(1) + prompt + chosen + EOS(2), then BOS + prompt +
// rejected + EOS; the chosen span covers chosen + EOS, the rejected span rejected + EOS.
inline Document preference_document(const std::vector<int64_t>& prompt, const std::vector<int64_t>& chosen,
                                    const std::vector<int64_t>& rejected) {
  Document result{.tokens = {1}};
  const auto append = [&](const std::vector<int64_t>& tokens) {
    result.tokens.insert(result.tokens.end(), tokens.begin(), tokens.end());
  };
  append(prompt);
  const auto chosen_begin = int32_t(result.size());
  append(chosen);
  append({2});
  result.chosen_spans = {{chosen_begin, int32_t(result.size())}};
  append({1});
  append(prompt);
  const auto rejected_begin = int32_t(result.size());
  append(rejected);
  append({2});
  result.rejected_spans = {{rejected_begin, int32_t(result.size())}};
  return result;
}

// Documents whose tokens say where they come from: token = tag + 1000 * document + position.
inline std::vector<Document> tagged_documents(const std::vector<int64_t>& sizes, int64_t tag = 0) {
  std::vector<Document> documents;
  for (size_t document = 0; document < sizes.size(); ++document) {
    Document entry;
    for (int64_t position = 0; position < sizes[document]; ++position)
      entry.tokens.push_back(tag + 1000 * int64_t(document) + position);
    documents.push_back(entry);
  }
  return documents;
}

}  // namespace fast_llm::data::testing
