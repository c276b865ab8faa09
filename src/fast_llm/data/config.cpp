#include "fast_llm/data/config.h"

#include <cmath>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/data/legacy_memmap.h"
#include "fast_llm/data/memmap.h"
#include "fast_llm/data/sampling.h"

namespace fast_llm::data {

using config::check::gt;
using config::check::in_range;
using config::check::le;
using config::Hint;

FLM_REGISTER_CONFIG(DatasetConfig, RandomDatasetConfig, "random");
FLM_REGISTER_CONFIG(DatasetConfig, MemmapDatasetConfig, "memmap");
FLM_REGISTER_CONFIG(DatasetConfig, DatasetFromFileConfig, "file");
FLM_REGISTER_CONFIG(DatasetConfig, ConcatenatedDatasetConfig, "concatenated");
FLM_REGISTER_CONFIG(DatasetConfig, DatasetSliceConfig, "slice");
FLM_REGISTER_CONFIG(DatasetConfig, BlendedDatasetConfig, "blended");
FLM_REGISTER_CONFIG(DatasetConfig, FimDatasetConfig, "fim");

namespace {

std::optional<std::string> required_path(const std::filesystem::path& path) {
  if (path.empty()) return std::string("a path is required");
  return std::nullopt;
}

// Whether a dataset config can be used where documents are needed (concatenated, slice).
bool is_indexed(const config::Dynamic<DatasetConfig>& dataset) {
  return !dataset.has_value() || dataset.is<IndexedDatasetConfig>();
}

// A blending weight: inf or nan would make every normalised weight nan.
std::optional<std::string> finite_non_negative(const double& value) {
  if (std::isfinite(value) && value >= 0) return std::nullopt;
  return fmt::format("must be at least 0 and finite, got {}", value);
}

// Python's round(): halves go to the even neighbour (how Fast-LLM turns slice fractions into document indices).
int64_t round_half_even(double value) { return int64_t(std::nearbyint(value)); }

const IndexedDatasetConfig& as_indexed(const config::Dynamic<DatasetConfig>& dataset, std::string_view where) {
  const auto* indexed = dataset.as<IndexedDatasetConfig>();
  FLM_CHECK(indexed != nullptr, "data", "{}: a `{}` dataset cannot be used here, it needs documents (memmap, file, "
            "concatenated or slice)", where, dataset.type());
  return *indexed;
}

// Calls `function(child_path, child)` for each dataset config held directly by `parent`, whose path is `parent_path`.
// (Paths are passed along because configs learn theirs only when validated.)
template <class Function>
void for_each_child_dataset(config::Config& parent, const std::string& parent_path, const Function& function) {
  struct Fields final : config::Visitor {
    const std::string& parent_path;
    const Function& function;
    Fields(const std::string& path, const Function& body) : parent_path(path), function(body) {}
    void on_field(const config::FieldInfo& info, config::FieldHandle& field) override {
      const std::string path =
          parent_path.empty() ? std::string(info.name) : fmt::format("{}.{}", parent_path, info.name);
      field.for_each_config(path, [&](const std::string& child_path, config::Config& child) {
        if (auto* dataset = dynamic_cast<DatasetConfig*>(&child)) function(child_path, *dataset);
      });
    }
  } fields(parent_path, function);
  fields.owner = &parent;
  parent.visit(fields);
}

// Places `dataset` (at `path`) at `depth` among nested datasets, read through `files`: refuses it past
// kMaxDatasetNesting, gives a `file` dataset its nesting, and places the datasets inside any other. `file` datasets are
// not followed: their files are read when they are built, and place their own datasets then.
void place_dataset(DatasetConfig& dataset, const std::string& path, const std::vector<std::filesystem::path>& files,
                   int depth) {
  if (depth > kMaxDatasetNesting) {
    std::vector<std::string> names;
    for (const auto& file : files) names.push_back(file.string());
    const std::string through = names.empty() ? "" : fmt::format(" (read through {})", fmt::join(names, " -> "));
    throw ConfigError(path, fmt::format("datasets nest more than {} deep{}", kMaxDatasetNesting, through));
  }
  if (auto* file = dynamic_cast<DatasetFromFileConfig*>(&dataset)) {
    file->nesting = {.files = files, .depth = depth};
    return;
  }
  for_each_child_dataset(dataset, path, [&](const std::string& child_path, DatasetConfig& child) {
    place_dataset(child, child_path, files, depth + 1);
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Field lists

void RandomDatasetConfig::visit(config::Visitor& v) {
  v(name, "name", "The name of the dataset.", Hint::core);
}

void MemmapDatasetConfig::visit(config::Visitor& v) {
  v(path, "path",
    "The dataset file (`.fast_llm_dataset`), or the legacy Megatron pair's path without the `.bin` / `.idx` suffix.",
    Hint::core, required_path);
}

void DatasetFromFileConfig::visit(config::Visitor& v) {
  v(path, "path", "The path to a dataset config file (`fast_llm_config*.yaml` as written by `prepare`).", Hint::core,
    required_path);
}

void ConcatenatedDatasetConfig::visit(config::Visitor& v) {
  v(name, "name", "The name of the dataset.", Hint::core);
  v(datasets, "datasets", "The datasets to concatenate.", Hint::core,
    [](const std::vector<config::Dynamic<DatasetConfig>>& value) -> std::optional<std::string> {
      if (value.empty()) return std::string("at least one dataset is required");
      return std::nullopt;
    });
}

void ConcatenatedDatasetConfig::check() const {
  for (size_t index = 0; index < datasets.size(); ++index)
    if (!is_indexed(datasets[index]))
      fail(fmt::format("datasets[{}]", index),
           fmt::format("a `{}` dataset cannot be concatenated (only memmap, file, concatenated and slice)",
                       datasets[index].type()));
}

void DatasetSliceConfig::visit(config::Visitor& v) {
  v(dataset, "dataset", "The dataset to split.", Hint::core);
  v(begin, "begin", "The beginning of the dataset split, as a fraction of the documents.", Hint::core,
    in_range(0.0, 1.0));
  v(end, "end", "The end of the dataset split, as a fraction of the documents.", Hint::core, in_range(0.0, 1.0));
}

void DatasetSliceConfig::check() const {
  if (!dataset.has_value()) fail("dataset", "a dataset is required");
  if (!is_indexed(dataset))
    fail("dataset", fmt::format("a `{}` dataset cannot be sliced (only memmap, file, concatenated and slice)",
                                dataset.type()));
  if (end < begin) fail("end", fmt::format("must be at least begin ({}), got {}", begin, end));
}

void BlendedDatasetConfig::visit(config::Visitor& v) {
  v(name, "name", "The name of the dataset.", Hint::core);
  v(datasets, "datasets", "The datasets to blend.", Hint::core);
  v(weights, "weights", "The blending weight of each dataset (normalised to sum to 1).", Hint::core,
    config::check::each<double>(finite_non_negative));
}

void BlendedDatasetConfig::derive() {
  // Normalised here, as Fast-LLM does, so the resolved config shows the proportions. Weights the checks refuse (not
  // finite, negative, or summing to zero or past the largest double) are left as given, so the error shows them.
  double total = 0;
  for (double weight : weights) {
    if (!(std::isfinite(weight) && weight >= 0)) return;
    total += weight;
  }
  if (total > 0 && std::isfinite(total))
    for (double& weight : weights) weight /= total;
}

void BlendedDatasetConfig::check() const {
  if (datasets.size() < 2) fail("datasets", fmt::format("at least two datasets are required, got {}", datasets.size()));
  if (weights.size() != datasets.size())
    fail("weights", fmt::format("one weight per dataset is required: {} weights for {} datasets", weights.size(),
                                datasets.size()));
  double total = 0;
  for (double weight : weights) total += weight;
  if (!std::isfinite(total))
    fail("weights", fmt::format("the weights must have a finite sum, got {} for [{}]; scale them down", total,
                                fmt::join(weights, ", ")));
  if (!(total > 0))
    fail("weights", fmt::format("the weights must not all be zero, got [{}]", fmt::join(weights, ", ")));
}

void TokenizerConfig::visit(config::Visitor& v) {
  v(path, "path", "Path to the tokenizer file.", Hint::core);
  v(bos_token, "bos_token", "BOS token to use if the tokenizer doesn't define one; must be an existing token.",
    Hint::core);
  v(max_vocab_size, "max_vocab_size", "Constrain output tokens to a specific range. Used for testing.", Hint::testing,
    gt<int64_t>(0));
  v(trust_remote_code, "trust_remote_code", "Allow this tokenizer to load custom code shipped with its repository.",
    Hint::feature);
}

void FimDatasetConfig::visit(config::Visitor& v) {
  v(dataset, "dataset", "The dataset to wrap with fim.", Hint::core);
  v(tokenizer, "tokenizer", "Configuration for the tokenizer.", Hint::feature);
  v(rate, "rate", "FIM rate for each sample.", Hint::core, in_range(0.0, 1.0));
  v(max_middle_len, "max_middle_len", "Maximum length of the middle segment in FIM.", Hint::feature, gt<int64_t>(0));
  v(split_sample, "split_sample", "Split samples on this token and permute each fragment separately.", Hint::feature);
  v(fragment_rate, "fragment_rate", "FIM rate for each fragment when using split_sample.", Hint::feature,
    in_range(0.0, 1.0));
  v(ignore_prefix, "ignore_prefix", "Do not apply FIM to fragments that start with this prefix.", Hint::feature);
  v(spm_rate, "spm_rate", "Rate of the suffix-prefix-middle ordering among FIM samples.", Hint::feature,
    in_range(0.0, 1.0));
  v(truncate_or_pad, "truncate_or_pad", "Keep FIM samples at their original length.", Hint::feature);
  v(prefix_token, "prefix_token", "The FIM prefix token.", Hint::feature);
  v(middle_token, "middle_token", "The FIM middle token.", Hint::feature);
  v(pad_token, "pad_token", "The FIM padding token.", Hint::feature);
  v(suffix_token, "suffix_token", "The FIM suffix token.", Hint::feature);
}

void FimDatasetConfig::check() const {
  if (!dataset.has_value()) fail("dataset", "a dataset is required");
  // Fast-LLM finds out when it builds the dataset; the config can say so before anything runs.
  if (!tokenizer.path)
    fail("tokenizer.path", "fill-in-the-middle needs a tokenizer: its token names are looked up in it and the "
                           "documents are decoded and encoded again with it");
}

void GPTDataConfig::visit(config::Visitor& v) {
  v(datasets, "datasets",
    "Configuration for the dataset(s): `training` is the train set, other names are evaluator datasets.", Hint::core);
  v(micro_batch_size, "micro_batch_size", "Tokens in each micro-batch sample (documents packed together).",
    Hint::core, gt<int64_t>(0), le(kMaxMicroBatchSize));
  v(maximum_document_length, "maximum_document_length",
    "Maximum number of tokens in a document. Longer documents are split (truncate_documents) or skipped.", Hint::core,
    gt<int64_t>(0));
  v(truncate_documents, "truncate_documents",
    "Cut documents at sample boundaries. Otherwise samples are padded so every document lies entirely within one, and "
    "documents longer than a sample are skipped.",
    Hint::feature);
  v(shuffle, "shuffle", "Shuffling strategy: epoch, full, skip_first_epoch or disabled.", Hint::feature);
  v(gpu, "gpu",
    "Fast-LLM samples on the GPU when set. Sampling here runs on the CPU and gives the same samples either way.",
    Hint::feature);
  v(data_sample_warn_time_ms, "data_sample_warn_time_ms", "Warn if a sample takes longer than this to load.",
    Hint::feature, gt(0.0));
  v(multiprocessing_context, "multiprocessing_context",
    "Fast-LLM's data-loader process start method. Loading here uses threads, so it has no effect.", Hint::expert);
  v(seed, "seed", "Seed for random sampling.", Hint::feature);
}

void GPTDataConfig::derive() {
  // Before the datasets are validated, so a pathologically deep tree is refused before it is walked any further.
  for_each_child_dataset(*this, path(), [](const std::string& child_path, DatasetConfig& dataset) {
    place_dataset(dataset, child_path, {}, 1);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Building

std::shared_ptr<SampledDataset> IndexedDatasetConfig::build_and_sample(const SamplingParameters& parameters,
                                                                       int64_t num_samples, uint64_t seed) const {
  return std::make_shared<SampledIndexedDataset>(build(), parameters, num_samples, seed);
}

std::shared_ptr<SampledDataset> RandomDatasetConfig::build_and_sample(const SamplingParameters& parameters,
                                                                      int64_t num_samples, uint64_t seed) const {
  return std::make_shared<RandomSampledDataset>(name, parameters.vocab_size, parameters.sample_size(), num_samples,
                                                seed, parameters.sampling_maximum_document_length());
}

std::shared_ptr<IndexedDataset> MemmapDatasetConfig::build() const {
  // Fast-LLM names a memmap dataset after its path, with `/` made `__` (the name keys the sampling cache).
  std::string name;
  for (char character : path.string()) {
    if (character == '/')
      name += "__";
    else
      name += character;
  }
  // The error_code forms: a path the system refuses (too long, ...) is "no such file", not a filesystem_error.
  std::error_code error;
  if (std::filesystem::is_regular_file(path, error)) return std::make_shared<MemmapDataset>(name, path);
  if (std::filesystem::exists(legacy_memmap_path(path, ".idx"), error)) {
    if (log_once_key("legacy_memmap_format"))
      log_warning("Using the legacy Megatron memmap format (.bin / .idx); it is deprecated in Fast-LLM, prefer "
                  "`.fast_llm_dataset` files");
    return std::make_shared<LegacyMemmapDataset>(name, path);
  }
  throw Error("data", fmt::format("{}: no such dataset file (nor a legacy {} / {} pair)", path.string(),
                                  legacy_memmap_path(path, ".bin").string(),
                                  legacy_memmap_path(path, ".idx").string()));
}

config::Dynamic<DatasetConfig> DatasetFromFileConfig::load() const {
  for (size_t index = 0; index < nesting.files.size(); ++index) {
    std::error_code error;
    if (!std::filesystem::equivalent(nesting.files[index], path, error)) continue;
    std::vector<std::string> chain;
    for (size_t link = index; link < nesting.files.size(); ++link) chain.push_back(nesting.files[link].string());
    chain.push_back(path.string());
    fail("path", fmt::format("dataset config files include each other: {}", fmt::join(chain, " -> ")));
  }
  return load_dataset_config_file(path, nesting);
}

std::shared_ptr<IndexedDataset> DatasetFromFileConfig::build() const {
  config::Dynamic<DatasetConfig> loaded = load();
  return as_indexed(loaded, path.string()).build();
}

std::shared_ptr<SampledDataset> DatasetFromFileConfig::build_and_sample(const SamplingParameters& parameters,
                                                                        int64_t num_samples, uint64_t seed) const {
  return load()->build_and_sample(parameters, num_samples, seed);
}

std::shared_ptr<IndexedDataset> ConcatenatedDatasetConfig::build() const {
  std::vector<std::shared_ptr<IndexedDataset>> built;
  for (size_t index = 0; index < datasets.size(); ++index)
    built.push_back(as_indexed(datasets[index], fmt::format("{}.datasets[{}]", path(), index)).build());
  return std::make_shared<ConcatenatedDataset>(name, std::move(built));
}

std::shared_ptr<IndexedDataset> DatasetSliceConfig::build() const {
  std::shared_ptr<IndexedDataset> inner = as_indexed(dataset, field_path("dataset")).build();
  const double size = double(inner->num_documents());
  const int64_t first = round_half_even(begin * size), last = round_half_even(end * size);
  // Which documents the fractions select is only known once the dataset is read.
  if (last <= first)
    throw ConfigError(path(), fmt::format("[begin, end) = [{}, {}) selects no document of the {} in dataset {}", begin,
                                          end, inner->num_documents(), inner->name()));
  return std::make_shared<DatasetSlice>(fmt::format("{}_{}_{}", inner->name(), begin, end), inner, first, last);
}

std::shared_ptr<SampledDataset> BlendedDatasetConfig::build_and_sample(const SamplingParameters& parameters,
                                                                       int64_t num_samples, uint64_t seed) const {
  std::vector<std::shared_ptr<SampledDataset>> sampled;
  for (size_t index = 0; index < datasets.size(); ++index) {
    // One more than the proportional share: blending never drifts more than one sample from the weights.
    int64_t share = int64_t(std::ceil(weights[index] * double(num_samples))) + 1;
    sampled.push_back(datasets[index]->build_and_sample(parameters, share, seed + 697 * uint64_t(index)));
  }
  return std::make_shared<BlendedDataset>(name, std::move(sampled), weights, num_samples);
}

// FimDatasetConfig::build_and_sample is in fim.cpp, with the tokenizer it loads.

// ---------------------------------------------------------------------------------------------------------------
// Dataset config files

namespace {

// Entries of `metadata:` that Fast-LLM's prepare writes (reader statistics); they describe the data and are ignored.
constexpr std::array<std::string_view, 8> kKnownMetadataKeys{
    "num_tokens", "tokens", "loss_masking_spans", "chosen_spans", "rejected_spans", "image_patches", "advantages",
    "old_log_probabilities"};

// Makes every `path:` in the tree relative to `folder`, refusing absolute paths and `..`.
void resolve_paths(YAML::Node node, const std::filesystem::path& folder, const std::filesystem::path& file) {
  if (node.IsSequence()) {
    for (YAML::Node child : node) resolve_paths(child, folder, file);
    return;
  }
  if (!node.IsMap()) return;
  for (auto entry : node) {
    if (entry.first.Scalar() == "path") {
      FLM_CHECK(entry.second.IsScalar(), "data", "{}: `path` must be a string", file.string());
      std::filesystem::path inner(entry.second.Scalar());
      bool escapes = inner.is_absolute();
      for (const auto& part : inner)
        if (part == "..") escapes = true;
      FLM_CHECK(!escapes, "data", "{}: dataset path '{}' must be relative and stay within {}", file.string(),
                inner.string(), folder.empty() ? std::string(".") : folder.string());
      entry.second = (folder / inner).string();
    } else {
      resolve_paths(entry.second, folder, file);
    }
  }
}

}  // namespace

config::Dynamic<DatasetConfig> load_dataset_config_file(const std::filesystem::path& path,
                                                        const DatasetNesting& reader) {
  std::error_code error;
  FLM_CHECK(std::filesystem::is_regular_file(path, error), "data", "{}: dataset config file does not exist",
            path.string());
  YAML::Node root = config::load_yaml_file(path);  // a mapping, or an error naming the file
  YAML::Node dataset = root;
  std::string label = fmt::format("{}: dataset", path.string());
  if (root["config"]) {
    // The current format: {config: <dataset>, metadata: {...}}.
    for (const auto& entry : root) {
      const std::string& key = entry.first.Scalar();
      FLM_CHECK(key == "config" || key == "metadata", "data",
                "{}: unknown top-level entry '{}' (expected `config` and `metadata`)", path.string(), key);
    }
    if (YAML::Node metadata = root["metadata"]; metadata && !metadata.IsNull()) {
      FLM_CHECK(metadata.IsMap(), "data", "{}: `metadata` must be a mapping", path.string());
      for (const auto& entry : metadata) {
        const std::string& key = entry.first.Scalar();
        FLM_CHECK(std::find(kKnownMetadataKeys.begin(), kKnownMetadataKeys.end(), key) != kKnownMetadataKeys.end(),
                  "data", "{}: unknown metadata entry '{}' (known: {})", path.string(), key,
                  fmt::join(kKnownMetadataKeys, ", "));
      }
    }
    dataset = YAML::Clone(root["config"]);
    label = fmt::format("{}: config", path.string());
  } else {
    dataset = YAML::Clone(root);
  }
  resolve_paths(dataset, path.parent_path(), path);
  config::Dynamic<DatasetConfig> result;
  config::Codec<config::Dynamic<DatasetConfig>>::read(result, dataset, label);
  if (!result.has_value()) throw ConfigError(label, "a dataset config is required");
  std::vector<std::filesystem::path> files = reader.files;
  files.push_back(path);
  place_dataset(*result, label, files, reader.depth + 1);
  result->validate(label);
  return result;
}

}  // namespace fast_llm::data
