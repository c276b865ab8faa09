// The input of `prepare gpt_memmap`: local files named by `dataset.path` (and `dataset.data_files`), read record by
// record in a deterministic order, each record knowing its file and line for error messages.
//
// Formats, chosen by the file name:
//   .jsonl / .json            JSON Lines: one JSON object per line (blank lines are skipped, as Hugging Face's json
//                             loader skips them)
//   .txt                      plain text: the whole file is one document
//   + .gz / .zst              the same, compressed (zlib / libzstd), decompressed while streaming
//   .parquet / .arrow         refused: reading them needs Apache Arrow, which Debian does not package
// A folder contributes its files of these formats (recursively, sorted by path); Hugging Face's metadata files
// (croissant.json, dataset_info.json, state.json, dataset_dict.json) are not data and are left out. A pattern with
// `*`, `?` or `[` expands to the matching files, sorted.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace fast_llm::preparation {

enum class RecordFormat { json_lines, text_file };

struct InputFile {
  std::filesystem::path path;
  RecordFormat format = RecordFormat::json_lines;
};

// The files to read, in order: entries in the order given, each expanded and sorted; a file reached twice is read
// once. `data_files` (patterns or files) are taken relative to `paths[0]` when it is a folder, as Hugging Face's
// load_dataset(path, data_files=...) does. Errors name the entry: nothing matching, an unsupported format (with the
// reason), a folder without data files.
std::vector<InputFile> resolve_input_files(const std::vector<std::string>& paths,
                                           const std::vector<std::string>& data_files = {});

// One record: a JSON line (JSON Lines) or a whole file (text), with where it came from.
struct Record {
  std::string text;
  const InputFile* file = nullptr;
  int64_t line = 0;  // 1-based line of a JSON line; 0 for a whole text file
  // "file:line" (or "file" for a text file) for messages.
  std::string location() const;
};

// Reads the records of several files one after the other. Decompression and I/O errors are an Error naming the file.
class RecordReader {
 public:
  explicit RecordReader(const std::vector<InputFile>& files);
  ~RecordReader();
  // The next record, or false at the end of the last file.
  bool next(Record& record);
  // Files that held no record at all (empty, or only blank lines), in order: skipped and reported.
  const std::vector<std::filesystem::path>& empty_files() const { return empty_files_; }

 private:
  class Stream;
  bool open_next_file();

  const std::vector<InputFile>& files_;
  size_t next_file_ = 0;
  const InputFile* current_ = nullptr;
  std::unique_ptr<Stream> stream_;
  int64_t line_ = 0;
  int64_t records_in_file_ = 0;
  std::vector<std::filesystem::path> empty_files_;
};

// The number of records in each file (a first pass: `prepare` needs the total to cut shards as Fast-LLM does).
std::vector<int64_t> count_records(const std::vector<InputFile>& files);

}  // namespace fast_llm::preparation
