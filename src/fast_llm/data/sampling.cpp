#include "fast_llm/data/sampling.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "fast_llm/core/error.h"
#include "fast_llm/core/file_writer.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/core/random.h"

namespace fast_llm::data {

namespace {

constexpr std::string_view kComponent = "sampling";
constexpr std::string_view kIndexFormat = "fast_llm_sampling_index_v1";
// Seed offsets between epochs (Fast-LLM's `seed + 571 * epoch`).
constexpr uint64_t kEpochSeedStride = 571;

// 64-bit random words from one Philox stream, two per call of the block function.
class PhiloxStream {
 public:
  explicit PhiloxStream(uint64_t seed) : seed_(seed) {}
  uint64_t next() {
    if (lane_ == 2) {
      block_ = philox4x32(seed_, counter_++);
      lane_ = 0;
    }
    uint64_t value = lane_ == 0 ? (uint64_t(block_.x) << 32 | block_.y) : (uint64_t(block_.z) << 32 | block_.w);
    ++lane_;
    return value;
  }
  // Uniform in [0, bound), exactly: Lemire's multiply-shift, rejecting the few products that would bias it.
  uint64_t below(uint64_t bound) {
    unsigned __int128 product = (unsigned __int128)next() * bound;
    uint64_t low = uint64_t(product);
    if (low < bound) {
      uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        product = (unsigned __int128)next() * bound;
        low = uint64_t(product);
      }
    }
    return uint64_t(product >> 64);
  }

 private:
  uint64_t seed_;
  uint64_t counter_ = 0;
  Philox4 block_{};
  int lane_ = 2;
};

uint64_t hash_words(const int64_t* data, size_t count, uint64_t hash = 0) {
  for (size_t index = 0; index < count; ++index) hash = mix_seed(hash ^ uint64_t(data[index]));
  return hash;
}

std::string hex(uint64_t value) { return fmt::format("{:#018x}", value); }

// "a.b" -> scalar text for every leaf of a YAML map, to compare two descriptors entry by entry.
void flatten(const YAML::Node& node, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& entry : node) {
      std::string key = entry.first.Scalar();
      flatten(entry.second, prefix.empty() ? key : prefix + "." + key, out);
    }
  } else if (node.IsScalar()) {
    out[prefix] = node.Scalar();
  } else {
    out[prefix] = "~";
  }
}

std::string sanitize(const std::string& name) {
  std::string result;
  for (char character : name) {
    if (character == '/')
      result += "__";
    else
      result += character;
  }
  return result;
}

int64_t ceil_div(int64_t numerator, int64_t denominator) { return (numerator + denominator - 1) / denominator; }

}  // namespace

SamplingParameters make_sampling_parameters(const GPTDataConfig& config,
                                            std::optional<std::filesystem::path> cache_directory, int64_t vocab_size,
                                            int64_t predicted_tokens) {
  SamplingParameters parameters;
  parameters.micro_batch_size = config.micro_batch_size;
  parameters.predicted_tokens = predicted_tokens;
  parameters.maximum_document_length = config.maximum_document_length;
  parameters.truncate_documents = config.truncate_documents;
  parameters.shuffle = config.shuffle;
  parameters.cache_directory = std::move(cache_directory);
  parameters.vocab_size = vocab_size;
  return parameters;
}

std::vector<int64_t> random_permutation(int64_t size, uint64_t seed) {
  std::vector<int64_t> permutation(static_cast<size_t>(size));
  std::iota(permutation.begin(), permutation.end(), int64_t(0));
  PhiloxStream stream(seed);
  for (int64_t index = size - 1; index > 0; --index)
    std::swap(permutation[size_t(index)], permutation[size_t(stream.below(uint64_t(index) + 1))]);
  return permutation;
}

// ---------------------------------------------------------------------------------------------------------------
// SampledIndexedDataset

SampledIndexedDataset::SampledIndexedDataset(std::shared_ptr<IndexedDataset> dataset,
                                             const SamplingParameters& parameters, int64_t num_samples, uint64_t seed)
    : dataset_(std::move(dataset)), parameters_(parameters), num_samples_(num_samples), seed_(seed) {
  FLM_CHECK(num_samples_ > 0, kComponent, "{}: the number of samples must be positive, got {}", name(), num_samples_);
  FLM_CHECK(parameters_.micro_batch_size > 0 && parameters_.predicted_tokens >= 0, kComponent,
            "{}: invalid sample shape ({} tokens + {} predicted)", name(), parameters_.micro_batch_size,
            parameters_.predicted_tokens);
  const std::vector<int64_t> sizes = dataset_->document_sizes();
  FLM_CHECK(!sizes.empty(), kComponent, "dataset {} has no documents", name());
  if (!parameters_.truncate_documents) {
    const int64_t limit = parameters_.sampling_maximum_document_length();
    skipped_documents_ = std::count_if(sizes.begin(), sizes.end(), [&](int64_t size) { return size > limit; });
    if (skipped_documents_ > 0)
      log_warning("{}/{} documents of dataset {} are longer than {} tokens and will be skipped", skipped_documents_,
                  sizes.size(), name(), limit);
  }

  const std::string descriptor_text = descriptor(sizes);
  if (parameters_.cache_directory && load_cache(descriptor_text)) {
    loaded_from_cache_ = true;
    return;
  }
  build_index(sizes);
  if (parameters_.cache_directory) save_cache(descriptor_text);
}

std::filesystem::path SampledIndexedDataset::cache_base() const {
  if (!parameters_.cache_directory) return {};
  return *parameters_.cache_directory / fmt::format("{}_ns_{}_sl_{}_s_{}", sanitize(name()), num_samples_,
                                                    parameters_.micro_batch_size, seed_);
}

std::string SampledIndexedDataset::descriptor(const std::vector<int64_t>& sizes) const {
  int64_t tokens = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "format" << YAML::Value << std::string(kIndexFormat);
  out << YAML::Key << "dataset" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << name();
  out << YAML::Key << "documents_per_epoch" << YAML::Value << sizes.size();
  out << YAML::Key << "tokens_per_epoch" << YAML::Value << tokens;
  out << YAML::Key << "document_sizes_hash" << YAML::Value << hex(hash_words(sizes.data(), sizes.size()));
  out << YAML::EndMap;
  out << YAML::Key << "num_samples" << YAML::Value << num_samples_;
  out << YAML::Key << "micro_batch_size" << YAML::Value << parameters_.micro_batch_size;
  out << YAML::Key << "predicted_tokens" << YAML::Value << parameters_.predicted_tokens;
  out << YAML::Key << "maximum_document_length" << YAML::Value;
  if (parameters_.maximum_document_length)
    out << *parameters_.maximum_document_length;
  else
    out << YAML::Null;
  out << YAML::Key << "truncate_documents" << YAML::Value << parameters_.truncate_documents;
  out << YAML::Key << "shuffle" << YAML::Value << std::string(config::enum_name(parameters_.shuffle));
  out << YAML::Key << "seed" << YAML::Value << seed_;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

void SampledIndexedDataset::build_index(const std::vector<int64_t>& sizes) {
  const int64_t limit = parameters_.sampling_maximum_document_length();
  int64_t tokens_per_epoch = 0;
  for (int64_t size : sizes)
    if (parameters_.truncate_documents || size <= limit) tokens_per_epoch += size;
  if (parameters_.truncate_documents)
    FLM_CHECK(tokens_per_epoch > 0, kComponent, "dataset {} has no tokens", name());
  else
    FLM_CHECK(tokens_per_epoch > 0, kComponent, "dataset {} has no document of at most {} tokens", name(), limit);
  log_main("Sampling {} samples of {} tokens from dataset {} ({} documents, {} tokens per epoch)", num_samples_,
           parameters_.sample_size(), name(), sizes.size(), tokens_per_epoch);

  if (parameters_.shuffle != ShufflingType::full) {
    bool built = build_index_with_epochs(sizes, -1);  // unlimited epochs: always completes
    FLM_ASSERT(built);
    return;
  }
  // One permutation spans all epochs, so their number is fixed first: enough tokens for every sample, plus more
  // when padding (truncate false) wastes some.
  int64_t epochs = parameters_.truncate_documents
                       ? ceil_div(num_samples_ * parameters_.micro_batch_size + parameters_.predicted_tokens,
                                  tokens_per_epoch)
                       : ceil_div(num_samples_ * parameters_.sample_size(), tokens_per_epoch);
  while (!build_index_with_epochs(sizes, epochs)) ++epochs;
}

bool SampledIndexedDataset::build_index_with_epochs(const std::vector<int64_t>& sizes, int64_t epochs) {
  const int64_t documents = int64_t(sizes.size());
  order_.clear();
  // The sampling order, extended one epoch at a time as the walk reaches it; false past `epochs` (when >= 0).
  auto document_at = [&](int64_t position, int64_t& document) -> bool {
    while (position >= int64_t(order_.size())) {
      const int64_t epoch = int64_t(order_.size()) / documents;
      if (epochs >= 0 && epoch >= epochs) return false;
      std::vector<int64_t> next;
      switch (parameters_.shuffle) {
        case ShufflingType::disabled:
          next.resize(size_t(documents));
          std::iota(next.begin(), next.end(), int64_t(0));
          break;
        case ShufflingType::skip_first_epoch:
          if (epoch == 0) {
            next.resize(size_t(documents));
            std::iota(next.begin(), next.end(), int64_t(0));
          } else {
            next = random_permutation(documents, seed_ + kEpochSeedStride * uint64_t(epoch - 1));
          }
          break;
        case ShufflingType::epoch: next = random_permutation(documents, seed_ + kEpochSeedStride * uint64_t(epoch)); break;
        case ShufflingType::full:
          // Equivalent to shuffling `epochs` copies of the documents together.
          next = random_permutation(documents * epochs, seed_);
          for (int64_t& value : next) value %= documents;
          break;
      }
      order_.insert(order_.end(), next.begin(), next.end());
    }
    document = order_[size_t(position)];
    return true;
  };

  const int64_t sample_size = parameters_.sample_size();
  sample_positions_.assign(size_t(num_samples_ + 1), 0);
  sample_offsets_.assign(size_t(num_samples_), 0);
  int64_t position = 0, document = 0;
  if (parameters_.truncate_documents) {
    // `count` = tokens before `position` in the stream; sample i starts at token i * micro_batch_size.
    int64_t count = 0;
    for (int64_t sample = 0; sample < num_samples_; ++sample) {
      const int64_t start = sample * parameters_.micro_batch_size;
      while (true) {
        if (!document_at(position, document)) return false;
        if (count + sizes[size_t(document)] > start) break;
        count += sizes[size_t(document)];
        ++position;
      }
      sample_positions_[size_t(sample)] = position;
      sample_offsets_[size_t(sample)] = start - count;
    }
    const int64_t total = num_samples_ * parameters_.micro_batch_size + parameters_.predicted_tokens;
    while (count < total) {
      if (!document_at(position, document)) return false;
      count += sizes[size_t(document)];
      ++position;
    }
  } else {
    // Greedy packing: a document that does not fit closes the sample (padded) and opens the next one.
    const int64_t limit = parameters_.sampling_maximum_document_length();
    int64_t sample = 0, fill = 0;
    while (true) {
      if (!document_at(position, document)) return false;
      const int64_t size = sizes[size_t(document)];
      if (size == 0 || size > limit) {
        ++position;
        continue;
      }
      if (fill + size > sample_size) {
        if (++sample == num_samples_) break;
        sample_positions_[size_t(sample)] = position;
        fill = 0;
      }
      fill += size;
      ++position;
      if (fill == sample_size) {
        if (++sample == num_samples_) break;
        sample_positions_[size_t(sample)] = position;
        fill = 0;
      }
    }
  }
  sample_positions_[size_t(num_samples_)] = position;
  order_.resize(size_t(position));
  order_.shrink_to_fit();
  return true;
}

std::vector<Document> SampledIndexedDataset::get_sample(int64_t index) const {
  FLM_CHECK(index >= 0 && index < num_samples_, kComponent, "sample {} requested from dataset {} with {} samples",
            index, name(), num_samples_);
  const int64_t limit = parameters_.sampling_maximum_document_length();
  std::vector<Document> documents;
  int64_t position = sample_positions_[size_t(index)];
  if (parameters_.truncate_documents) {
    int64_t remaining = parameters_.sample_size();
    int64_t offset = sample_offsets_[size_t(index)];
    while (remaining > 0) {
      FLM_ASSERT(position < int64_t(order_.size()), "sample {} of {} runs past the sampling order", index, name());
      const int64_t document = order_[size_t(position)];
      const int64_t end = std::min(dataset_->document_size(document), offset + remaining);
      for (int64_t begin = offset; begin < end; begin += limit)
        documents.push_back(dataset_->get_document(document, begin, std::min(begin + limit, end)));
      if (end > offset) remaining -= end - offset;
      offset = 0;
      ++position;
    }
  } else {
    for (; position < sample_positions_[size_t(index) + 1]; ++position) {
      const int64_t document = order_[size_t(position)];
      const int64_t size = dataset_->document_size(document);
      if (size > 0 && size <= limit) documents.push_back(dataset_->get_document(document));
    }
  }
  return documents;
}

bool SampledIndexedDataset::load_cache(const std::string& descriptor_text) {
  const std::filesystem::path base = cache_base();
  std::filesystem::path yaml_path = base, bin_path = base;
  yaml_path += "_index.yaml";
  bin_path += "_index.bin";
  if (!std::filesystem::exists(yaml_path)) return false;
  auto rebuild = [&](const std::string& reason) {
    log_main("Sampling cache {} {}; rebuilding it", yaml_path.string(), reason);
    return false;
  };

  YAML::Node cached;
  try {
    cached = YAML::LoadFile(yaml_path.string());
  } catch (const YAML::Exception& error) {
    return rebuild(fmt::format("is not valid YAML ({})", error.what()));
  }
  if (!cached.IsMap()) return rebuild("is not a YAML mapping");
  std::map<std::string, std::string> expected_entries, cached_entries;
  flatten(YAML::Load(descriptor_text), "", expected_entries);
  flatten(cached, "", cached_entries);
  for (const auto& [key, value] : expected_entries) {
    auto found = cached_entries.find(key);
    if (found == cached_entries.end()) return rebuild(fmt::format("has no {}", key));
    if (found->second != value) return rebuild(fmt::format("has {}: {}, expected {}", key, found->second, value));
  }

  int64_t positions = 0;
  uint64_t bytes = 0;
  std::string checksum;
  try {
    positions = cached["index"]["positions"].as<int64_t>();
    bytes = cached["index"]["bytes"].as<uint64_t>();
    checksum = cached["index"]["checksum"].as<std::string>();
  } catch (const YAML::Exception&) {
    return rebuild("has no valid index entry");
  }
  if (positions < 0 || bytes != uint64_t(positions + 2 * num_samples_ + 1) * sizeof(int64_t))
    return rebuild(fmt::format("describes an index of {} bytes for {} positions, which is inconsistent", bytes,
                               positions));
  std::error_code error;
  uint64_t file_size = std::filesystem::file_size(bin_path, error);
  if (error) return rebuild(fmt::format("has no index file {}", bin_path.string()));
  if (file_size != bytes) return rebuild(fmt::format("has an index file of {} bytes, expected {}", file_size, bytes));
  std::vector<int64_t> words(bytes / sizeof(int64_t));
  {
    std::ifstream stream(bin_path, std::ios::binary);
    stream.read(reinterpret_cast<char*>(words.data()), std::streamsize(bytes));
    if (!stream) return rebuild(fmt::format("index file {} cannot be read", bin_path.string()));
  }
  if (hex(hash_words(words.data(), words.size())) != checksum)
    return rebuild(fmt::format("index file {} does not match its checksum (corrupt)", bin_path.string()));

  order_.assign(words.begin(), words.begin() + positions);
  sample_positions_.assign(words.begin() + positions, words.begin() + positions + num_samples_ + 1);
  sample_offsets_.assign(words.begin() + positions + num_samples_ + 1, words.end());
  // The checksum guards against corruption, not against a cache written by a different build: check the index is
  // usable before trusting it.
  const int64_t documents = dataset_->num_documents();
  bool consistent = sample_positions_.back() == positions;
  for (size_t sample = 0; consistent && sample + 1 < sample_positions_.size(); ++sample)
    consistent = sample_positions_[sample] <= sample_positions_[sample + 1] && sample_offsets_[sample] >= 0;
  for (size_t position = 0; consistent && position < order_.size(); ++position)
    consistent = order_[position] >= 0 && order_[position] < documents;
  if (!consistent) {
    order_.clear();
    sample_positions_.clear();
    sample_offsets_.clear();
    return rebuild("holds an inconsistent index");
  }
  log_main("Using the cached sampling index {}", yaml_path.string());
  return true;
}

void SampledIndexedDataset::save_cache(const std::string& descriptor_text) const {
  const std::filesystem::path base = cache_base();
  std::filesystem::path yaml_path = base, bin_path = base;
  yaml_path += "_index.yaml";
  bin_path += "_index.bin";
  std::vector<int64_t> words;
  words.reserve(order_.size() + sample_positions_.size() + sample_offsets_.size());
  words.insert(words.end(), order_.begin(), order_.end());
  words.insert(words.end(), sample_positions_.begin(), sample_positions_.end());
  words.insert(words.end(), sample_offsets_.begin(), sample_offsets_.end());
  // Each file replaced atomically, the binary one first: a descriptor never points to an index that is not there yet.
  // No fsync: a cache lost in a crash is rebuilt, and one damaged is caught by its checksum.
  write_file(bin_path,
             std::string_view(reinterpret_cast<const char*>(words.data()), words.size() * sizeof(int64_t)),
             {.component = kComponent});
  std::string text = descriptor_text + fmt::format("index:\n  positions: {}\n  bytes: {}\n  checksum: \"{}\"\n",
                                                   order_.size(), words.size() * sizeof(int64_t),
                                                   hex(hash_words(words.data(), words.size())));
  write_file(yaml_path, text, {.component = kComponent});
}

// ---------------------------------------------------------------------------------------------------------------
// BlendedDataset

BlendedDataset::BlendedDataset(std::string name, std::vector<std::shared_ptr<SampledDataset>> datasets,
                               std::vector<double> weights, int64_t num_samples)
    : name_(std::move(name)), datasets_(std::move(datasets)), num_samples_(num_samples) {
  FLM_CHECK(!datasets_.empty() && datasets_.size() == weights.size(), kComponent,
            "{}: {} datasets and {} weights", name_, datasets_.size(), weights.size());
  double total = 0;
  for (double weight : weights) {
    FLM_CHECK(std::isfinite(weight) && weight >= 0, kComponent, "{}: blending weight {} is negative or not finite",
              name_, weight);
    total += weight;
  }
  FLM_CHECK(total > 0 && std::isfinite(total), kComponent, "{}: blending weights sum to {}, not a positive number",
            name_, total);
  for (double& weight : weights) weight /= total;

  dataset_index_.resize(size_t(num_samples_));
  sample_index_.resize(size_t(num_samples_));
  std::vector<int64_t> taken(datasets_.size(), 0);
  for (int64_t sample = 0; sample < num_samples_; ++sample) {
    size_t best = 0;
    double best_error = weights[0] * double(sample + 1) - double(taken[0]);
    for (size_t dataset = 1; dataset < datasets_.size(); ++dataset) {
      double error = weights[dataset] * double(sample + 1) - double(taken[dataset]);
      if (error > best_error) {
        best_error = error;
        best = dataset;
      }
    }
    dataset_index_[size_t(sample)] = int32_t(best);
    sample_index_[size_t(sample)] = taken[best]++;
  }
  for (size_t dataset = 0; dataset < datasets_.size(); ++dataset)
    FLM_CHECK(taken[dataset] <= datasets_[dataset]->num_samples(), kComponent,
              "{}: blending takes {} samples from {}, which has {}", name_, taken[dataset],
              datasets_[dataset]->name(), datasets_[dataset]->num_samples());
}

std::vector<Document> BlendedDataset::get_sample(int64_t index) const {
  FLM_CHECK(index >= 0 && index < num_samples_, kComponent, "sample {} requested from dataset {} with {} samples",
            index, name_, num_samples_);
  return datasets_[size_t(dataset_index_[size_t(index)])]->get_sample(sample_index_[size_t(index)]);
}

// ---------------------------------------------------------------------------------------------------------------
// RandomSampledDataset

RandomSampledDataset::RandomSampledDataset(std::string name, int64_t vocab_size, int64_t sample_size,
                                           int64_t num_samples, uint64_t seed, std::optional<int64_t> document_length)
    : name_(std::move(name)), vocab_size_(vocab_size), sample_size_(sample_size), num_samples_(num_samples),
      seed_(seed), document_length_(document_length.value_or(sample_size)) {
  FLM_CHECK(vocab_size_ > 0 && vocab_size_ <= (int64_t(1) << 32), kComponent,
            "{}: the random dataset needs a vocabulary size in [1, 2^32], got {}", name_, vocab_size_);
  FLM_CHECK(document_length_ > 0, kComponent, "{}: the random dataset needs a positive document length, got {}",
            name_, document_length_);
}

std::vector<Document> RandomSampledDataset::get_sample(int64_t index) const {
  FLM_CHECK(index >= 0 && index < num_samples_, kComponent, "sample {} requested from dataset {} with {} samples",
            index, name_, num_samples_);
  const uint64_t key = derive_seed(seed_, uint64_t(index));
  std::vector<Document> documents;
  for (int64_t begin = 0; begin < sample_size_; begin += document_length_) {
    Document& document = documents.emplace_back();
    document.tokens.resize(size_t(std::min(document_length_, sample_size_ - begin)));
    for (int64_t position = begin; position < begin + document.size(); ++position) {
      Philox4 block = philox4x32(key, uint64_t(position) >> 2);
      uint32_t lane = uint32_t(position & 3);
      uint32_t bits = lane == 0 ? block.x : lane == 1 ? block.y : lane == 2 ? block.z : block.w;
      // Multiply-shift maps 32 random bits onto [0, vocab_size) without a division.
      document.tokens[size_t(position - begin)] = int64_t((uint64_t(bits) * uint64_t(vocab_size_)) >> 32);
    }
  }
  return documents;
}

}  // namespace fast_llm::data
