// The `fast_llm` checkpoint format: layout independent, one set of safetensors files keyed by parameter name.
//
//   <directory>/
//     metadata.yaml           format fast_llm, the model config, the shards, the training state when it holds the
//                             optimizer state, and `layout: {files: [model_0.safetensors, ...]}`
//     model_<i>.safetensors   tensors `<parameter>/<shard>` (state.h), split by parameters_per_file
//     ok                      written last
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "fast_llm/engine/checkpoint/metadata.h"
#include "fast_llm/engine/checkpoint/state.h"

namespace fast_llm::engine {

// Writes the tensors of `state` whose shard is in `metadata.shards` (and all of them must be there) with
// `metadata` (format fast_llm) into `directory`, which must exist and is filled as is (no atomic rename, no `ok`).
void write_fast_llm_checkpoint(const std::filesystem::path& directory, const TensorSource& state,
                               CheckpointMetadata metadata, int64_t parameters_per_file, bool sync = false);

struct FastLLMCheckpoint {
  CheckpointMetadata metadata;
  std::shared_ptr<SafetensorsSet> state;
};

// Opens and checks a fast_llm checkpoint: its metadata, its files, and that every tensor is `<parameter>/<shard>`
// with a listed shard and that each parameter has all of them.
FastLLMCheckpoint open_fast_llm_checkpoint(const std::filesystem::path& directory);

}  // namespace fast_llm::engine
