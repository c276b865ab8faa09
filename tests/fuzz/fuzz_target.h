// What every fuzz target shares. A target feeds libFuzzer's input to one of the project's own parsers, through the
// same entry point the program uses (written to a file first where that entry point takes a path). A parser may refuse
// an input only with a fast_llm::Error; anything else is a bug libFuzzer reports: a crash, a sanitizer report, a hang,
// an InternalError (a broken invariant), or any other exception escaping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "fast_llm/core/error.h"

namespace fast_llm::fuzz {

// A folder of this process for the files inputs are written to (removed when the process exits normally).
const std::filesystem::path& scratch_folder();

// Writes `bytes` to `scratch_folder() / name`, replacing the previous input, and returns its path.
std::filesystem::path write_input(std::string_view name, std::span<const uint8_t> bytes);

// Runs `parse`, accepting a fast_llm::Error as a clean refusal; an InternalError goes on to libFuzzer.
template <class Function>
void refusing_cleanly(Function&& parse) {
  try {
    parse();
  } catch (const InternalError&) {
    throw;
  } catch (const Error&) {
  }
}

}  // namespace fast_llm::fuzz
