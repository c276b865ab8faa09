// Fuzz target: a native checkpoint's `metadata.yaml`, read as resuming and `pretrained` read it
// (engine/checkpoint/metadata.h), then its model config loaded and validated as `load_config: fast_llm` would.
#include "fuzz_target.h"

#include "fast_llm/engine/checkpoint/metadata.h"
#include "fast_llm/models/gpt/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fast_llm::fuzz::write_input("metadata.yaml", {data, size});
  fast_llm::fuzz::refusing_cleanly([&] {
    const auto metadata = fast_llm::engine::read_checkpoint_metadata(path.parent_path());
    fast_llm::models::gpt::GPTModelConfig config;
    config.load(metadata.config, "model");
    config.validate("model");
  });
  return 0;
}
