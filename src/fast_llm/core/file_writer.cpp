#include "fast_llm/core/file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <system_error>

#include "fast_llm/core/error.h"

namespace fast_llm {

namespace {

// Writes smaller than this are gathered; larger ones go straight to the file.
constexpr size_t kBufferSize = size_t(1) << 20;
// Linux transfers at most about 2 GiB per write(2).
constexpr size_t kMaxWriteSize = size_t(1) << 30;

std::string reason(int error) { return std::generic_category().message(error); }

// A name next to `path` that no other writer uses: the process id tells processes apart, the counter writers within
// one (several threads may write the same file).
std::filesystem::path temporary_name(const std::filesystem::path& path) {
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path temporary = path;
  temporary += fmt::format(".tmp.{}.{}", ::getpid(), counter++);
  return temporary;
}

}  // namespace

FileWriter::FileWriter(std::filesystem::path path, Options options) : path_(std::move(path)), options_(options) {
  if (const std::filesystem::path folder = path_.parent_path(); !folder.empty()) {
    std::error_code error;
    std::filesystem::create_directories(folder, error);
    if (error)
      throw Error(options_.component, fmt::format("{}: cannot create the folder {} ({})", path_.string(),
                                                  folder.string(), error.message()));
  }
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC;
  const std::filesystem::path* target = &path_;
  switch (options_.mode) {
    case Mode::replace:
      temporary_path_ = temporary_name(path_);
      target = &temporary_path_;
      flags |= O_TRUNC;
      break;
    case Mode::truncate: flags |= O_TRUNC; break;
    case Mode::append: flags |= O_APPEND; break;
  }
  descriptor_ = ::open(target->c_str(), flags, 0666);
  if (descriptor_ < 0) {
    const int error = errno;
    fail(options_.mode == Mode::replace ? fmt::format("cannot create {}", target->string())
                                        : std::string("cannot open for writing"),
         error);
  }
}

FileWriter::~FileWriter() {
  if (descriptor_ >= 0) ::close(descriptor_);
  if (!committed_ && !temporary_path_.empty()) ::unlink(temporary_path_.c_str());
}

void FileWriter::fail(std::string_view what, int error) const {
  throw Error(options_.component, fmt::format("{}: {} ({})", path_.string(), what, reason(error)));
}

void FileWriter::write(const void* data, size_t size) {
  FLM_ASSERT(descriptor_ >= 0 && !committed_, "{}: write after commit", path_.string());
  const auto* bytes = static_cast<const std::byte*>(data);
  if (buffer_.size() + size > kBufferSize) flush();
  if (size >= kBufferSize) {
    write_to_file(bytes, size);
  } else {
    if (buffer_.capacity() == 0) buffer_.reserve(kBufferSize);
    buffer_.insert(buffer_.end(), bytes, bytes + size);
  }
  size_ += size;
}

void FileWriter::write_at(uint64_t offset, const void* data, size_t size) {
  FLM_ASSERT(descriptor_ >= 0 && !committed_ && options_.mode != Mode::append && offset <= size_ &&
                 size <= size_ - offset,
             "{}: write_at({}, {}) outside the {} bytes written", path_.string(), offset, size, size_);
  flush();
  const auto* bytes = static_cast<const std::byte*>(data);
  while (size > 0) {
    const ssize_t written = ::pwrite(descriptor_, bytes, std::min(size, kMaxWriteSize), off_t(offset));
    if (written < 0) {
      const int error = errno;
      if (error == EINTR) continue;
      fail(fmt::format("write failed at byte {}", offset), error);
    }
    bytes += written;
    offset += uint64_t(written);
    size -= size_t(written);
  }
}

void FileWriter::flush() {
  FLM_ASSERT(descriptor_ >= 0, "{}: flush after commit", path_.string());
  write_to_file(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void FileWriter::write_to_file(const std::byte* data, size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(descriptor_, data, std::min(size, kMaxWriteSize));
    if (written < 0) {
      const int error = errno;
      if (error == EINTR) continue;
      fail(fmt::format("write failed after {} bytes", flushed_), error);
    }
    data += written;
    size -= size_t(written);
    flushed_ += uint64_t(written);
  }
}

void FileWriter::commit() {
  FLM_ASSERT(descriptor_ >= 0 && !committed_, "{}: commit called twice", path_.string());
  flush();
  if (options_.sync && ::fsync(descriptor_) != 0) fail("cannot flush to disk", errno);
  // close(2) can report a write the system deferred (network file systems, quotas); the descriptor is gone either way.
  const int descriptor = descriptor_;
  descriptor_ = -1;
  if (::close(descriptor) != 0) fail("close failed", errno);
  if (options_.mode == Mode::replace && ::rename(temporary_path_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    fail(fmt::format("cannot move {} into place", temporary_path_.string()), error);
  }
  committed_ = true;
  if (options_.mode == Mode::replace && options_.sync) sync_folder();
}

void FileWriter::sync_folder() const {
  const std::filesystem::path folder = path_.has_parent_path() ? path_.parent_path() : std::filesystem::path(".");
  const int descriptor = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (descriptor < 0) {
    const int error = errno;
    fail(fmt::format("cannot open its folder {} to flush it", folder.string()), error);
  }
  const int result = ::fsync(descriptor);
  const int error = errno;
  ::close(descriptor);
  if (result != 0) fail(fmt::format("cannot flush its folder {} to disk", folder.string()), error);
}

void write_file(const std::filesystem::path& path, std::string_view bytes, FileWriter::Options options) {
  FileWriter writer(path, options);
  writer.write(bytes);
  writer.commit();
}

}  // namespace fast_llm
