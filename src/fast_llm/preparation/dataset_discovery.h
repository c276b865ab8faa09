// `fast-llm prepare dataset_discovery`: finds the `.fast_llm_dataset` files under a folder and writes one dataset
// config blending them by token count, as Fast-LLM's DatasetDiscoveryPreparator does: each folder becomes a `blended`
// of its files (named after the folder, `<name>_local` when it also has sub-folders) and of its sub-folders' blends,
// a folder with a single dataset is that dataset, weights are token counts, paths are absolute. Files that cannot be
// read or hold no token are skipped with a warning naming them; `ignore_paths` (absolute or relative to the folder)
// are left out. The YAML file starts with Fast-LLM's comment header and is written atomically.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "fast_llm/preparation/gpt_memmap_config.h"

namespace fast_llm::preparation {

struct DiscoveryResult {
  nlohmann::ordered_json config;  // the blended (or single) dataset config
  int64_t tokens = 0;
  int64_t files = 0;
};

// The config for `directory` (nullopt when no readable, non-empty dataset is found).
std::optional<DiscoveryResult> discover_datasets(const std::filesystem::path& directory,
                                                 const std::vector<std::filesystem::path>& ignore_paths);

// Runs the command: discovers, writes `config.output`; an Error when nothing is found.
DiscoveryResult run_dataset_discovery(const DatasetDiscoveryConfig& config);

}  // namespace fast_llm::preparation
