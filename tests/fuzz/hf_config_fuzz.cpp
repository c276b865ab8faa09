// Fuzz target: a Hugging Face `config.json`, read into the base model config as `pretrained` and `convert` read it
// (models/gpt/conversion/huggingface.h), then loaded and validated as a run would.
#include "fuzz_target.h"

#include "fast_llm/models/gpt/conversion/huggingface.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fast_llm::fuzz::write_input("config.json", {data, size});
  fast_llm::fuzz::refusing_cleanly([&] {
    auto checkpoint = fast_llm::models::gpt::read_huggingface_checkpoint(path.parent_path(),
                                                                         fast_llm::engine::CheckpointFormat::auto_,
                                                                         /*open_weights=*/false);
    fast_llm::models::gpt::GPTBaseModelConfig config;
    config.load(checkpoint.base_model, "model.base_model");
    config.validate("model.base_model");
  });
  return 0;
}
