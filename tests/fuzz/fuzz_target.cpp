#include "fuzz_target.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "fast_llm/core/logging.h"

namespace fast_llm::fuzz {

const std::filesystem::path& scratch_folder() {
  static const std::filesystem::path folder = [] {
    std::filesystem::path path = std::filesystem::temp_directory_path() / fmt::format("fast_llm_fuzz_{}", ::getpid());
    std::filesystem::create_directories(path);
    return path;
  }();
  // Registered once `folder` is built, so that at exit it runs before `folder` is destroyed.
  static const int removed_at_exit = std::atexit([] {
    std::error_code ignored;
    std::filesystem::remove_all(folder, ignored);
  });
  (void)removed_at_exit;
  return folder;
}

std::filesystem::path write_input(std::string_view name, std::span<const uint8_t> bytes) {
  std::filesystem::path path = scratch_folder() / name;
  std::ofstream stream(path, std::ios::binary | std::ios::trunc);
  stream.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  stream.close();
  if (!stream) {
    fmt::print(stderr, "fuzz: cannot write {}\n", path.string());
    std::abort();
  }
  return path;
}

}  // namespace fast_llm::fuzz

// Warnings about the input (a repeated key, a deprecated format) would flood the fuzzer's output.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fast_llm::set_log_level(fast_llm::LogLevel::error);
  return 0;
}
