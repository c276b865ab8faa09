// Fuzz target: a `train gpt` config file and `a.b=value` overrides, loaded and validated as the command line does
// (cli/config_loading.h). The input is the file, then, after a line `#overrides`, one override per line. A config that
// validates is written out in full and must read back and validate again: that is the resolved `config.yaml` a run
// leaves in its experiment folder.
#include "fuzz_target.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/cli/config_loading.h"
#include "fast_llm/models/gpt/trainer_config.h"

namespace {

constexpr std::string_view kOverridesMarker = "\n#overrides\n";

void check_reads_back(const fast_llm::models::gpt::GPTTrainerConfig& config) {
  const std::string written = config.to_yaml_string();
  try {
    fast_llm::models::gpt::GPTTrainerConfig reread;
    reread.load(fast_llm::config::parse_yaml(written, "written config"));
    reread.validate();
  } catch (const fast_llm::Error& error) {
    fmt::print(stderr, "fuzz: a validated config, written out, does not read back: {}\n{}", error.what(), written);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t marker = input.find(kOverridesMarker);
  const std::string_view file_text = input.substr(0, marker);
  std::vector<std::string> overrides;
  if (marker != std::string_view::npos) {
    std::string_view rest = input.substr(marker + kOverridesMarker.size());
    while (!rest.empty()) {
      const size_t end = rest.find('\n');
      overrides.emplace_back(rest.substr(0, end));
      rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    }
  }
  const auto path = fast_llm::fuzz::write_input(
      "config.yaml", {reinterpret_cast<const uint8_t*>(file_text.data()), file_text.size()});
  fast_llm::fuzz::refusing_cleanly([&] {
    fast_llm::models::gpt::GPTTrainerConfig config;
    fast_llm::cli::load_config(config, path, overrides);
    check_reads_back(config);
  });
  return 0;
}
