// Fuzz target: a `.fast_llm_dataset` file, opened and read whole as training reads it (data/memmap.h).
#include "fuzz_target.h"
#include "read_dataset.h"

#include "fast_llm/data/memmap.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fast_llm::fuzz::write_input("shard_0.fast_llm_dataset", {data, size});
  fast_llm::fuzz::refusing_cleanly([&] {
    fast_llm::data::MemmapDataset dataset("fuzz", path);
    fast_llm::fuzz::read_every_document(dataset);
  });
  return 0;
}
