// `fast-llm prepare gpt_memmap`: local JSON Lines or text files tokenized into Fast-LLM's `.fast_llm_dataset` shards
// and the `fast_llm_config*.yaml` files that point at them, as Fast-LLM's GPTMemmapDatasetPreparator writes them:
//   - the records are cut into ceil(N / documents_per_shard) contiguous shards of near-equal document counts (Hugging
//     Face's Dataset.shard(contiguous=True), which Fast-LLM uses), written as shard_0_<i>.fast_llm_dataset;
//   - the token type is the smallest unsigned type holding the vocabulary, unless dataset.data_type says otherwise;
//   - fast_llm_config.yaml (one memmap, or a blend weighted by tokens), or with `splits` one
//     fast_llm_config_<split>.yaml per split (dataset_configs.h), so `{type: file, path: ...}` reads them;
//   - the input folder's croissant.json (dataset metadata), when it has one, is copied beside them.
// Records are read in order and tokenized in batches on `num_workers` threads (every core by default), the next batch
// being read on its own thread meanwhile; each batch is written in record order, so the output does not depend on the
// number of threads. A first pass counts the records
// (the shard sizes need the total). Every file is written under a temporary name and renamed when complete.
//
// Bad input stops the run with an error naming the file and line (not JSON, not UTF-8, a missing field, bad spans),
// as Fast-LLM's loader stops; files with no record (empty, or blank lines only) are skipped, counted and named in
// the summary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "fast_llm/data/token_data_type.h"
#include "fast_llm/preparation/gpt_memmap_config.h"
#include "fast_llm/tokenizer/tokenizer.h"

namespace fast_llm::preparation {

struct PreparationSummary {
  int64_t files = 0;
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t shards = 0;
  std::vector<std::filesystem::path> empty_files;  // skipped: no record in them
  std::vector<std::string> empty_splits;           // splits that got no document (no file written for them)
  std::vector<std::filesystem::path> config_files;
  data::TokenDataType data_type = data::TokenDataType::uint16;
  int threads = 1;
  double seconds = 0;
};

// With a tokenizer already loaded (tests give their own).
PreparationSummary prepare_gpt_memmap(const GPTMemmapPreparatorConfig& config, const tokenizer::Tokenizer& tokenizer);

// Loads `tokenizer.path` and prepares.
PreparationSummary prepare_gpt_memmap(const GPTMemmapPreparatorConfig& config);

}  // namespace fast_llm::preparation
