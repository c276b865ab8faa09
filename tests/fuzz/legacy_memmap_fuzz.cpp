// Fuzz target: a legacy Megatron `.idx` / `.bin` pair, opened and read whole (data/legacy_memmap.h). The input is the
// `.idx` then the `.bin`, its first two bytes (little endian) giving the `.idx`'s length.
#include "fuzz_target.h"
#include "read_dataset.h"

#include "fast_llm/data/legacy_memmap.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t index_size = std::min(size - 2, size_t(data[0]) | size_t(data[1]) << 8);
  const std::span<const uint8_t> input(data + 2, size - 2);
  fast_llm::fuzz::write_input("shard.idx", input.first(index_size));
  const auto bin = fast_llm::fuzz::write_input("shard.bin", input.subspan(index_size));
  fast_llm::fuzz::refusing_cleanly([&] {
    fast_llm::data::LegacyMemmapDataset dataset("fuzz", bin.parent_path() / "shard");
    fast_llm::fuzz::read_every_document(dataset, fast_llm::fuzz::TokenCount::file);
  });
  return 0;
}
