// Fuzz target: a dataset config file (`fast_llm_config.yaml`, what a `type: file` dataset names), loaded as training
// loads it (data/config.h), then its datasets opened and read when it describes indexed ones. The only other file in
// its folder is `shard_0.fast_llm_dataset`, a small valid dataset, so paths can name a file that opens.
#include "fuzz_target.h"
#include "read_dataset.h"

#include "fast_llm/data/config.h"
#include "fast_llm/data/memmap.h"

namespace {

void write_dataset() {
  fast_llm::data::MemmapWriter writer(fast_llm::fuzz::scratch_folder() / "shard_0.fast_llm_dataset",
                                      {.loss_masking_spans = true});
  writer.add_document({.tokens = {1, 2, 3, 4}, .loss_masking_spans = {{1, 2}}});
  writer.add_document({.tokens = {5, 6}});
  writer.finish();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool written = (write_dataset(), true);
  (void)written;
  const auto path = fast_llm::fuzz::write_input("fast_llm_config.yaml", {data, size});
  fast_llm::fuzz::refusing_cleanly([&] {
    const auto config = fast_llm::data::load_dataset_config_file(path);
    if (const auto* indexed = config.as<fast_llm::data::IndexedDatasetConfig>())
      fast_llm::fuzz::read_every_document(*indexed->build());
  });
  return 0;
}
