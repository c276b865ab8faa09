#include "fast_llm/preparation/dataset_discovery.h"

#include <fmt/format.h>

#include <algorithm>

#include "fast_llm/core/error.h"
#include "fast_llm/core/file_writer.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/data/memmap.h"
#include "fast_llm/preparation/dataset_configs.h"

namespace fast_llm::preparation {

namespace fs = std::filesystem;

namespace {
constexpr std::string_view kComponent = "dataset_discovery";

bool is_within(const fs::path& path, const fs::path& ancestor) {
  auto a = path.begin();
  for (auto b = ancestor.begin(); b != ancestor.end(); ++b, ++a)
    if (a == path.end() || *a != *b) return false;
  return true;
}

// Fast-LLM's name of a folder: its path below the root with '/' as '_', and '.' (the root itself) as the root's name.
std::string folder_name(const fs::path& folder, const fs::path& root) {
  std::string name = folder.lexically_relative(root).string();
  std::string out;
  for (char character : name) {
    if (character == '/')
      out += '_';
    else if (character == '.')
      out += root.filename().string();
    else
      out += character;
  }
  return out;
}

struct Walker {
  fs::path root;
  std::vector<fs::path> ignored;
  int64_t files = 0;

  std::optional<DiscoveryResult> folder(const fs::path& directory) {
    std::vector<fs::path> entries;
    std::error_code error;
    for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error))
      entries.push_back(it->path());
    if (error) log_warning("cannot list {}: {}", directory.string(), error.message());
    std::sort(entries.begin(), entries.end());

    std::vector<nlohmann::ordered_json> all_datasets, local_datasets;
    std::vector<int64_t> all_tokens, local_tokens;
    for (const fs::path& entry : entries) {
      if (std::any_of(ignored.begin(), ignored.end(), [&](const fs::path& path) { return is_within(entry, path); }))
        continue;
      std::error_code status_error;
      if (fs::is_directory(entry, status_error)) {
        if (auto sub = folder(entry)) {
          all_datasets.push_back(sub->config);
          all_tokens.push_back(sub->tokens);
        }
      } else if (fs::is_regular_file(entry, status_error)) {
        if (entry.extension() != ".fast_llm_dataset") continue;
        try {
          const int64_t tokens = data::MemmapDataset(entry.filename().string(), entry).num_tokens();
          FLM_CHECK(tokens > 0, kComponent, "dataset is empty");
          log_main("{}: {} tokens", entry.lexically_relative(root).string(), tokens);
          local_datasets.push_back({{"type", "memmap"}, {"path", entry.string()}});
          local_tokens.push_back(tokens);
          ++files;
        } catch (const Error& failure) {
          log_warning("skipped {}: {}", entry.string(), failure.what());
        }
      } else {
        log_warning("skipped {}: not a file or folder", entry.string());
      }
    }
    const std::string name = folder_name(directory, root);
    auto sum = [](const std::vector<int64_t>& values) {
      int64_t total = 0;
      for (int64_t value : values) total += value;
      return total;
    };
    if (!local_datasets.empty()) {
      all_tokens.push_back(sum(local_tokens));
      if (local_datasets.size() == 1)
        all_datasets.push_back(local_datasets.front());
      else
        all_datasets.push_back({{"type", "blended"},
                                {"name", all_datasets.empty() ? name : name + "_local"},
                                {"datasets", local_datasets},
                                {"weights", local_tokens}});
    }
    if (all_datasets.empty()) return std::nullopt;
    if (all_datasets.size() == 1) return DiscoveryResult{all_datasets.front(), all_tokens.front(), 0};
    return DiscoveryResult{
        {{"type", "blended"}, {"name", name}, {"datasets", all_datasets}, {"weights", all_tokens}}, sum(all_tokens),
        0};
  }
};

}  // namespace

std::optional<DiscoveryResult> discover_datasets(const fs::path& directory, const std::vector<fs::path>& ignore_paths) {
  std::error_code error;
  const fs::path root = fs::weakly_canonical(fs::absolute(directory), error);
  FLM_CHECK(!error && fs::is_directory(root), kComponent, "directory {}: not a folder", directory.string());
  Walker walker{root, {}, 0};
  for (const fs::path& path : ignore_paths) walker.ignored.push_back(fs::weakly_canonical(root / path, error));
  std::optional<DiscoveryResult> result = walker.folder(root);
  if (result) result->files = walker.files;
  return result;
}

DiscoveryResult run_dataset_discovery(const DatasetDiscoveryConfig& config) {
  std::optional<DiscoveryResult> result = discover_datasets(config.directory, config.ignore_paths);
  FLM_CHECK(result.has_value(), kComponent, "directory {}: no readable, non-empty .fast_llm_dataset file found",
            config.directory.string());
  std::error_code error;
  const fs::path root = fs::weakly_canonical(fs::absolute(config.directory), error);
  std::string text = fmt::format("# Written by `fast-llm prepare dataset_discovery`: every .fast_llm_dataset file "
                                 "found, blended with weights equal to their token counts.\n# directory: {}\n",
                                 root.string());
  if (!config.ignore_paths.empty()) {
    text += "# ignore_paths:\n";
    for (const fs::path& path : config.ignore_paths) text += fmt::format("#   - {}\n", path.string());
  }
  text += '\n';
  text += json_to_yaml(result->config);
  write_file(config.output, text, {.component = kComponent, .sync = true});
  log_main("Found {} dataset file{}, {} tokens in all; config written to {}", result->files,
           result->files == 1 ? "" : "s", result->tokens, config.output.string());
  return *result;
}

}  // namespace fast_llm::preparation
