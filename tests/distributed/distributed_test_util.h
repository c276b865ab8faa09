// What the distributed tests share: the message of an expected Error, and a fresh folder per test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "fast_llm/core/error.h"

namespace fast_llm::testing {

// The message of the fast_llm::Error `function` throws, or "" when it throws none.
template <class Function>
std::string error_of(Function function) {
  try {
    function();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// `<temp>/<prefix>_<pid>_<test name>`, empty, for the running test.
inline std::filesystem::path fresh_test_folder(const std::string& prefix) {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / (prefix + "_" + std::to_string(getpid()) + "_" +
                                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  return folder;
}

}  // namespace fast_llm::testing
