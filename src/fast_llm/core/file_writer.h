// Writing files so that a failure is never silent and a reader never sees a partial file.
//
//   FileWriter writer(path, {.component = "memmap", .sync = true});
//   writer.write(header); writer.write(payload);
//   writer.commit();  // flush, fsync, close, rename into place: each step checked
//
// Every write(2), fsync(2), close(2) and rename(2) is checked; a failure throws an Error naming the file and the
// system's reason: `[memmap] /out/shard_0_0.fast_llm_dataset: write failed after 1048576 bytes (No space left on
// device)`. Small writes are gathered in a buffer, so a failure may surface at a later write or at commit(); large
// ones go straight to the file.
//
// Modes: `replace` (the default) writes `<path>.tmp.<pid>` and commit() renames it over `path`, so readers see the
// previous file or the complete new one; a writer destroyed before commit() (an exception on the way) removes its
// temporary file. `truncate` writes `path` itself (devices, pipes, files nobody reads concurrently); `append` adds to
// it (logs, metrics: flush() after each record). With `sync`, commit() also fsyncs the file before it is renamed and
// the folder after, so the file outlives a crash of the machine, not only of the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

namespace fast_llm {

class FileWriter {
 public:
  enum class Mode { replace, truncate, append };
  struct Options {
    std::string_view component = "file";  // the component errors are reported under
    Mode mode = Mode::replace;
    bool sync = false;
  };

  // Opens the file (its folders are created as needed).
  FileWriter(std::filesystem::path path, Options options);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Overwrites `size` bytes at `offset`, within what was already written (a header patched once the sizes are known).
  void write_at(uint64_t offset, const void* data, size_t size);
  // Hands the buffered bytes to the system (they reach the disk with `sync` at commit).
  void flush();
  // Finishes the file: flush, fsync (`sync`), close, then rename into place (`replace`). Nothing may be written after.
  void commit();

  // The file being written (its final name in `replace` mode).
  const std::filesystem::path& path() const { return path_; }
  // Bytes written so far (by this writer, in `append` mode).
  uint64_t size() const { return size_; }

 private:
  [[noreturn]] void fail(std::string_view what, int error) const;
  void write_to_file(const std::byte* data, size_t size);
  void sync_folder() const;

  std::filesystem::path path_;
  std::filesystem::path temporary_path_;  // `replace` mode: where the bytes go until commit()
  Options options_;
  int descriptor_ = -1;
  std::vector<std::byte> buffer_;
  uint64_t size_ = 0;     // bytes written, buffered ones included
  uint64_t flushed_ = 0;  // bytes handed to the system
  bool committed_ = false;
};

// Writes `bytes` as the whole content of `path` with a FileWriter (atomically in the default `replace` mode).
void write_file(const std::filesystem::path& path, std::string_view bytes, FileWriter::Options options);

}  // namespace fast_llm
