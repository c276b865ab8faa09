#include "fast_llm/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "fast_llm/core/error.h"

namespace fast_llm::data {

MappedFile::MappedFile(const std::filesystem::path& path, std::string_view component)
    : path_(path), component_(component) {
  int descriptor = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (descriptor < 0) fail(fmt::format("cannot open ({})", std::strerror(errno)));
  struct stat status {};
  if (::fstat(descriptor, &status) != 0 || !S_ISREG(status.st_mode)) {
    ::close(descriptor);
    fail("not a regular file");
  }
  size_ = size_t(status.st_size);
  if (size_ > 0) {
    void* mapping = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, descriptor, 0);
    int mmap_errno = errno;
    ::close(descriptor);
    if (mapping == MAP_FAILED) fail(fmt::format("cannot map into memory ({})", std::strerror(mmap_errno)));
    data_ = static_cast<const std::byte*>(mapping);
  } else {
    ::close(descriptor);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

bool MappedFile::matches(uint64_t offset, std::string_view expected) const {
  return offset <= size_ && expected.size() <= size_ - offset &&
         std::memcmp(data_ + offset, expected.data(), expected.size()) == 0;
}

void MappedFile::fail(std::string_view message) const {
  throw Error(component_, fmt::format("{}: {}", path_.string(), message));
}

}  // namespace fast_llm::data
