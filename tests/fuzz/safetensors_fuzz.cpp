// Fuzz target: a safetensors file, opened and every tensor read, as stored and converted to fp32 where that is a
// conversion the reader offers (engine/checkpoint/safetensors.h).
#include "fuzz_target.h"

#include "fast_llm/engine/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fast_llm::fuzz::write_input("model.safetensors", {data, size});
  fast_llm::fuzz::refusing_cleanly([&] {
    fast_llm::engine::SafetensorsFile file(path);
    for (const auto& tensor : file.tensors()) {
      file.bytes(tensor.name);
      if (tensor.dtype.dtype) file.read(tensor.name);
      fast_llm::fuzz::refusing_cleanly([&] { file.read(tensor.name, fast_llm::DType::float32); });
    }
  });
  return 0;
}
