// Sampling: every document once per epoch, determinism and seeds, each shuffling mode, packing without truncation,
// maximum document length, blending proportions, slices and concatenations, the random dataset, and the index cache.
//
// Documents are tagged (token = tag + 1000 * document + position), so a sample's tokens say which document and which
// position they come from, and checks need no knowledge of the sampler's internals.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "core/full_disk.h"
#include "data_test_util.h"
#include "fast_llm/data/config.h"
#include "fast_llm/data/data.h"
#include "fast_llm/data/memmap.h"
#include "fast_llm/data/sampling.h"

namespace fast_llm::data {
namespace {

using testing::error_message;
using testing::tagged_documents;
using testing::TemporaryFolder;

// Sizes 1..29 in a scrambled order, plus a long one: 30 documents, 487 tokens.
std::vector<int64_t> document_sizes() {
  std::vector<int64_t> sizes;
  for (int64_t index = 0; index < 29; ++index) sizes.push_back(1 + (index * 11) % 29);
  sizes.push_back(52);
  return sizes;
}

std::shared_ptr<IndexedDataset> tagged_dataset(const TemporaryFolder& folder, const std::vector<int64_t>& sizes,
                                               const std::string& name = "tagged", int64_t tag = 0) {
  std::filesystem::path path = folder / (name + ".fast_llm_dataset");
  testing::write_dataset(path, tagged_documents(sizes, tag));
  return std::make_shared<MemmapDataset>(name, path);
}

SamplingParameters parameters(int64_t micro_batch_size, bool truncate = true,
                              ShufflingType shuffle = ShufflingType::epoch) {
  SamplingParameters result;
  result.micro_batch_size = micro_batch_size;
  result.truncate_documents = truncate;
  result.shuffle = shuffle;
  return result;
}

// The token stream of truncated samples: each sample's first micro_batch_size tokens, then the last sample's tail.
std::vector<int64_t> token_stream(const SampledDataset& dataset, int64_t micro_batch_size) {
  std::vector<int64_t> stream;
  for (int64_t sample = 0; sample < dataset.num_samples(); ++sample) {
    std::vector<int64_t> tokens;
    for (const Document& document : dataset.get_sample(sample))
      tokens.insert(tokens.end(), document.tokens.begin(), document.tokens.end());
    size_t keep = sample + 1 == dataset.num_samples() ? tokens.size() : size_t(micro_batch_size);
    stream.insert(stream.end(), tokens.begin(), tokens.begin() + keep);
  }
  return stream;
}

// Splits a tagged token stream into (document, length) runs, checking positions count up from 0 within each run.
std::vector<std::pair<int64_t, int64_t>> document_runs(const std::vector<int64_t>& stream) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t token : stream) {
    int64_t document = token / 1000, position = token % 1000;
    if (position == 0 || runs.empty() || runs.back().first != document) {
      EXPECT_EQ(position, 0) << "document " << document << " does not start at its first token";
      runs.emplace_back(document, 0);
    }
    EXPECT_EQ(runs.back().second, position) << "document " << document << " skips a token";
    ++runs.back().second;
  }
  return runs;
}

std::vector<int64_t> documents_of(const std::vector<std::pair<int64_t, int64_t>>& runs) {
  std::vector<int64_t> documents;
  for (const auto& run : runs) documents.push_back(run.first);
  return documents;
}

TEST(Sampling, TruncatedSamplesVisitEveryDocumentOncePerEpoch) {
  TemporaryFolder folder;
  const std::vector<int64_t> sizes = document_sizes();
  const int64_t tokens_per_epoch = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  auto dataset = tagged_dataset(folder, sizes);
  // 3 epochs of tokens, less the extra label token of the last sample.
  const int64_t micro_batch_size = 16;
  const int64_t num_samples = (3 * tokens_per_epoch - 1) / micro_batch_size;
  SampledIndexedDataset sampled(dataset, parameters(micro_batch_size), num_samples, 1234);

  // Each sample holds exactly micro_batch_size + 1 tokens, and shares its last token with the next sample's first.
  for (int64_t sample = 0; sample < num_samples; ++sample) {
    int64_t size = 0;
    for (const Document& document : sampled.get_sample(sample)) size += document.size();
    ASSERT_EQ(size, micro_batch_size + 1) << sample;
    if (sample + 1 < num_samples) {
      ASSERT_EQ(sampled.get_sample(sample).back().tokens.back(), sampled.get_sample(sample + 1).front().tokens.front());
    }
  }

  std::vector<int64_t> stream = token_stream(sampled, micro_batch_size);
  ASSERT_EQ(int64_t(stream.size()), num_samples * micro_batch_size + 1);
  auto runs = document_runs(stream);
  // Two complete epochs: each a permutation of all documents, complete, and the two orders differ.
  std::vector<std::vector<int64_t>> epochs(2);
  int64_t consumed = 0;
  for (const auto& [document, length] : runs) {
    if (consumed >= 2 * tokens_per_epoch) break;
    EXPECT_EQ(length, sizes[size_t(document)]) << "document " << document << " is cut inside an epoch";
    epochs[size_t(consumed / tokens_per_epoch)].push_back(document);
    consumed += length;
  }
  for (const auto& epoch : epochs) {
    std::vector<int64_t> sorted = epoch;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(sizes.size());
    std::iota(all.begin(), all.end(), int64_t(0));
    EXPECT_EQ(sorted, all);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  std::vector<int64_t> file_order(sizes.size());
  std::iota(file_order.begin(), file_order.end(), int64_t(0));
  EXPECT_NE(epochs[0], file_order);
}

TEST(Sampling, DeterministicAndSeedDependent) {
  TemporaryFolder folder;
  auto dataset = tagged_dataset(folder, document_sizes());
  auto all_tokens = [&](uint64_t seed, ShufflingType shuffle) {
    SampledIndexedDataset sampled(dataset, parameters(8, true, shuffle), 100, seed);
    return token_stream(sampled, 8);
  };
  for (ShufflingType shuffle : {ShufflingType::epoch, ShufflingType::full, ShufflingType::skip_first_epoch}) {
    SCOPED_TRACE(std::string(config::enum_name(shuffle)));
    EXPECT_EQ(all_tokens(5, shuffle), all_tokens(5, shuffle));
    EXPECT_NE(all_tokens(5, shuffle), all_tokens(6, shuffle));
  }
  EXPECT_EQ(all_tokens(5, ShufflingType::disabled), all_tokens(6, ShufflingType::disabled));
}

TEST(Sampling, ShufflingModes) {
  TemporaryFolder folder;
  const std::vector<int64_t> sizes = document_sizes();
  const int64_t tokens_per_epoch = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  auto dataset = tagged_dataset(folder, sizes);
  std::vector<int64_t> file_order(sizes.size());
  std::iota(file_order.begin(), file_order.end(), int64_t(0));
  // 177 samples of 11 tokens (+1 label token) are exactly 4 epochs of 487 tokens.
  ASSERT_EQ(tokens_per_epoch, 487);
  const int64_t micro_batch_size = 11, num_samples = 177;
  auto epoch_orders = [&](ShufflingType shuffle) {
    SampledIndexedDataset sampled(dataset, parameters(micro_batch_size, true, shuffle), num_samples, 77);
    std::vector<int64_t> stream = token_stream(sampled, micro_batch_size);
    EXPECT_EQ(int64_t(stream.size()), 4 * tokens_per_epoch);
    std::vector<int64_t> documents = documents_of(document_runs(stream));
    std::vector<std::vector<int64_t>> epochs;
    for (size_t begin = 0; begin + sizes.size() <= documents.size(); begin += sizes.size())
      epochs.emplace_back(documents.begin() + long(begin), documents.begin() + long(begin + sizes.size()));
    return epochs;
  };
  auto disabled = epoch_orders(ShufflingType::disabled);
  ASSERT_EQ(disabled.size(), 4u);
  for (const auto& epoch : disabled) EXPECT_EQ(epoch, file_order);

  auto skip_first = epoch_orders(ShufflingType::skip_first_epoch);
  ASSERT_EQ(skip_first.size(), 4u);
  EXPECT_EQ(skip_first[0], file_order);
  EXPECT_NE(skip_first[1], file_order);
  // Later epochs are shuffled like `epoch`'s, one epoch later.
  auto epoch = epoch_orders(ShufflingType::epoch);
  ASSERT_EQ(epoch.size(), 4u);
  EXPECT_EQ(skip_first[1], epoch[0]);
  EXPECT_EQ(skip_first[2], epoch[1]);

  // `full` shuffles the 4 epochs together: each document appears 4 times, complete, but an epoch-sized window need
  // not hold every document.
  SampledIndexedDataset full(dataset, parameters(micro_batch_size, true, ShufflingType::full), num_samples, 77);
  std::map<int64_t, int64_t> appearances;
  for (const auto& [document, length] : document_runs(token_stream(full, micro_batch_size))) {
    EXPECT_EQ(length, sizes[size_t(document)]);
    ++appearances[document];
  }
  ASSERT_EQ(appearances.size(), sizes.size());
  for (const auto& [document, count] : appearances) EXPECT_EQ(count, 4) << document;
  bool every_window_is_a_permutation = true;
  for (const auto& window : epoch_orders(ShufflingType::full))
    every_window_is_a_permutation &= std::set<int64_t>(window.begin(), window.end()).size() == sizes.size();
  EXPECT_FALSE(every_window_is_a_permutation);
}

TEST(Sampling, UntruncatedSamplesNeverSplitDocuments) {
  TemporaryFolder folder;
  const std::vector<int64_t> sizes = document_sizes();
  auto dataset = tagged_dataset(folder, sizes);
  const int64_t micro_batch_size = 40;  // sample size 41: the 52-token document never fits
  SampledIndexedDataset sampled(dataset, parameters(micro_batch_size, false), 60, 3);
  EXPECT_EQ(sampled.skipped_documents_per_epoch(), 1);
  std::vector<int64_t> visited;
  int64_t padded = 0;
  for (int64_t sample = 0; sample < sampled.num_samples(); ++sample) {
    int64_t size = 0;
    for (const Document& document : sampled.get_sample(sample)) {
      ASSERT_FALSE(document.tokens.empty());
      int64_t index = document.tokens[0] / 1000;
      // Complete: positions 0 .. size - 1 of the one document.
      ASSERT_EQ(document.size(), sizes[size_t(index)]);
      for (int64_t position = 0; position < document.size(); ++position)
        ASSERT_EQ(document.tokens[size_t(position)], 1000 * index + position);
      visited.push_back(index);
      size += document.size();
    }
    ASSERT_LE(size, micro_batch_size + 1);
    padded += micro_batch_size + 1 - size;
  }
  EXPECT_GT(padded, 0);
  EXPECT_EQ(std::count(visited.begin(), visited.end(), 29), 0);  // the 52-token document
  // Documents are taken in sampling order: each run of 29 is one epoch of the 29 short documents.
  ASSERT_GE(visited.size(), 58u);
  for (size_t begin = 0; begin + 29 <= visited.size(); begin += 29) {
    std::set<int64_t> epoch(visited.begin() + long(begin), visited.begin() + long(begin + 29));
    EXPECT_EQ(epoch.size(), 29u);
  }
  // Greedy packing: a sample is closed only when the next document would not fit.
  for (int64_t sample = 0; sample + 1 < sampled.num_samples(); ++sample) {
    int64_t size = 0;
    for (const Document& document : sampled.get_sample(sample)) size += document.size();
    int64_t next = sampled.get_sample(sample + 1).front().size();
    EXPECT_GT(size + next, micro_batch_size + 1) << sample;
  }
}

TEST(Sampling, MaximumDocumentLength) {
  TemporaryFolder folder;
  const std::vector<int64_t> sizes = document_sizes();
  auto dataset = tagged_dataset(folder, sizes);
  SamplingParameters truncated = parameters(32);
  truncated.maximum_document_length = 10;
  SampledIndexedDataset split(dataset, truncated, 40, 9);
  int64_t pieces = 0;
  for (int64_t sample = 0; sample < split.num_samples(); ++sample) {
    int64_t size = 0;
    for (const Document& document : split.get_sample(sample)) {
      EXPECT_LE(document.size(), 10);
      size += document.size();
      ++pieces;
    }
    EXPECT_EQ(size, 33);
  }
  EXPECT_GT(pieces, 40 * 33 / 10);
  // Pieces keep their tokens in order: the stream is unchanged by the split.
  SampledIndexedDataset whole(dataset, parameters(32), 40, 9);
  EXPECT_EQ(token_stream(split, 32), token_stream(whole, 32));

  SamplingParameters untruncated = parameters(32, false);
  untruncated.maximum_document_length = 10;
  SampledIndexedDataset skipped(dataset, untruncated, 20, 9);
  EXPECT_EQ(skipped.skipped_documents_per_epoch(),
            std::count_if(sizes.begin(), sizes.end(), [](int64_t size) { return size > 10; }));
  for (int64_t sample = 0; sample < skipped.num_samples(); ++sample)
    for (const Document& document : skipped.get_sample(sample)) EXPECT_LE(document.size(), 10);
}

TEST(Sampling, ImpossibleSamplingIsAnError) {
  TemporaryFolder folder;
  auto long_only = tagged_dataset(folder, {50, 60}, "long");
  std::string message = error_message([&] { SampledIndexedDataset(long_only, parameters(16, false), 4, 0); });
  EXPECT_NE(message.find("no document of at most 17 tokens"), std::string::npos) << message;
  auto empty = tagged_dataset(folder, {0, 0}, "empty");
  EXPECT_NE(error_message([&] { SampledIndexedDataset(empty, parameters(16), 4, 0); }).find("has no tokens"),
            std::string::npos);
  EXPECT_NE(error_message([&] { SampledIndexedDataset(long_only, parameters(16), 0, 0); }).find("must be positive"),
            std::string::npos);
}

TEST(Sampling, SliceAndConcatenate) {
  TemporaryFolder folder;
  auto first = tagged_dataset(folder, {3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, "first");
  auto second = tagged_dataset(folder, {2, 2}, "second", 100000);
  // Python rounding: 0.25 * 10 = 2.5 -> 2, 0.75 * 10 = 7.5 -> 8.
  DatasetSliceConfig slice_config;
  slice_config.dataset.set_type("memmap");
  slice_config.dataset.as<MemmapDatasetConfig>()->path = folder / "first.fast_llm_dataset";
  slice_config.begin = 0.25;
  slice_config.end = 0.75;
  auto slice = slice_config.build();
  ASSERT_EQ(slice->num_documents(), 6);
  EXPECT_EQ(slice->document_sizes(), (std::vector<int64_t>{5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(slice->num_tokens(), 45);
  EXPECT_EQ(slice->get_document(0).tokens.front(), 2000);

  ConcatenatedDataset concatenated("both", {second, first, second});
  EXPECT_EQ(concatenated.num_documents(), 14);
  EXPECT_EQ(concatenated.num_tokens(), 4 + 75 + 4);
  EXPECT_EQ(concatenated.document_size(2), 3);
  EXPECT_EQ(concatenated.get_document(1).tokens, (std::vector<int64_t>{101000, 101001}));
  EXPECT_EQ(concatenated.get_document(11).tokens.front(), 9000);
  EXPECT_EQ(concatenated.get_document(13, 1, 2).tokens, (std::vector<int64_t>{101001}));
  std::vector<int64_t> expected{2, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 2, 2};
  EXPECT_EQ(concatenated.document_sizes(), expected);

  // Sampling a slice only ever yields its documents.
  SampledIndexedDataset sampled(slice, parameters(8), 30, 1);
  for (int64_t sample = 0; sample < sampled.num_samples(); ++sample)
    for (const Document& document : sampled.get_sample(sample))
      for (int64_t token : document.tokens) EXPECT_TRUE(token / 1000 >= 2 && token / 1000 < 8) << token;
}

TEST(Sampling, BlendingFollowsTheWeights) {
  TemporaryFolder folder;
  auto first = tagged_dataset(folder, document_sizes(), "first");
  auto second = tagged_dataset(folder, document_sizes(), "second", 100000);
  const int64_t num_samples = 1000;
  std::vector<double> weights{0.7, 0.3};
  std::vector<std::shared_ptr<SampledDataset>> parts{
      std::make_shared<SampledIndexedDataset>(first, parameters(8), 701, 10),
      std::make_shared<SampledIndexedDataset>(second, parameters(8), 301, 707)};
  BlendedDataset blended("blended", parts, weights, num_samples);
  int64_t from_first = 0;
  std::vector<int64_t> next_index(2, 0);
  for (int64_t sample = 0; sample < num_samples; ++sample) {
    auto [dataset, index] = blended.source(sample);
    // Each dataset's samples are used in order, and every prefix stays within one sample of the weights.
    EXPECT_EQ(index, next_index[size_t(dataset)]++);
    from_first += dataset == 0;
    EXPECT_LE(std::abs(double(from_first) - 0.7 * double(sample + 1)), 1.0) << sample;
    // The sample's tokens come from the dataset the blend names.
    int64_t token = blended.get_sample(sample).front().tokens.front();
    EXPECT_EQ(token >= 100000, dataset == 1);
  }
  EXPECT_EQ(from_first, 700);

  // A part with too few samples for its share is an error, not a read past its end.
  std::vector<std::shared_ptr<SampledDataset>> short_parts{
      std::make_shared<SampledIndexedDataset>(first, parameters(8), 600, 10), parts[1]};
  EXPECT_NE(error_message([&] { BlendedDataset("short", short_parts, weights, num_samples); }).find("which has 600"),
            std::string::npos);
  // Weights that cannot be normalised are refused by name, not turned into nan proportions.
  const double infinity = std::numeric_limits<double>::infinity();
  EXPECT_NE(error_message([&] { BlendedDataset("inf", parts, {infinity, 1.0}, num_samples); })
                .find("inf: blending weight inf is negative or not finite"),
            std::string::npos);
  EXPECT_NE(error_message([&] { BlendedDataset("huge", parts, {1e308, 1e308}, num_samples); })
                .find("huge: blending weights sum to inf, not a positive number"),
            std::string::npos);
}

TEST(Sampling, RandomDataset) {
  RandomSampledDataset dataset("dummy", 50, 33, 20, 7);
  std::set<int64_t> seen;
  for (int64_t sample = 0; sample < 20; ++sample) {
    std::vector<Document> documents = dataset.get_sample(sample);
    ASSERT_EQ(documents.size(), 1u);
    ASSERT_EQ(documents[0].size(), 33);
    for (int64_t token : documents[0].tokens) {
      EXPECT_GE(token, 0);
      EXPECT_LT(token, 50);
      seen.insert(token);
    }
  }
  EXPECT_GT(seen.size(), 45u);  // 660 draws cover nearly all of 50 values
  EXPECT_EQ(dataset.get_sample(3)[0].tokens, RandomSampledDataset("x", 50, 33, 20, 7).get_sample(3)[0].tokens);
  EXPECT_NE(dataset.get_sample(3)[0].tokens, dataset.get_sample(4)[0].tokens);
  EXPECT_NE(dataset.get_sample(3)[0].tokens, RandomSampledDataset("x", 50, 33, 20, 8).get_sample(3)[0].tokens);
  EXPECT_THROW(RandomSampledDataset("x", 0, 33, 20, 7), Error);
}

TEST(Sampling, RandomDatasetCutsSamplesIntoDocumentsOfTheMaximumLength) {
  const RandomSampledDataset whole("x", 50, 33, 20, 7);
  const RandomSampledDataset cut("x", 50, 33, 20, 7, 10);
  std::vector<Document> documents = cut.get_sample(5);
  ASSERT_EQ(documents.size(), 4u);  // 10 + 10 + 10 + 3
  EXPECT_EQ(documents[0].size(), 10);
  EXPECT_EQ(documents[3].size(), 3);
  // The same token stream, only cut: documents are independent sequences of the same random sample.
  std::vector<int64_t> joined;
  for (const Document& document : documents) joined.insert(joined.end(), document.tokens.begin(), document.tokens.end());
  EXPECT_EQ(joined, whole.get_sample(5)[0].tokens);
  EXPECT_THROW(RandomSampledDataset("x", 50, 33, 20, 7, 0), Error);
}

TEST(Sampling, PermutationsAreUniformEnough) {
  // Each value lands in each slot about equally often over many seeds (a biased shuffle fails this).
  const int64_t size = 5, trials = 20000;
  std::vector<std::vector<int64_t>> counts(size, std::vector<int64_t>(size, 0));
  for (int64_t seed = 0; seed < trials; ++seed) {
    std::vector<int64_t> permutation = random_permutation(size, uint64_t(seed));
    for (int64_t slot = 0; slot < size; ++slot) ++counts[size_t(slot)][size_t(permutation[size_t(slot)])];
  }
  for (const auto& row : counts)
    for (int64_t count : row) EXPECT_NEAR(double(count), double(trials) / size, 5 * std::sqrt(double(trials) / size));
}

// ---------------------------------------------------------------------------------------------------------------
// Cache

TEST(SamplingCache, ReusedWhenValidRebuiltOtherwise) {
  TemporaryFolder folder;
  auto dataset = tagged_dataset(folder, document_sizes());
  SamplingParameters cached = parameters(8);
  cached.cache_directory = folder / "dataset_cache";
  const std::vector<int64_t> expected = token_stream(SampledIndexedDataset(dataset, parameters(8), 50, 42), 8);

  SampledIndexedDataset first(dataset, cached, 50, 42);
  EXPECT_FALSE(first.loaded_from_cache());
  const std::filesystem::path base = folder / "dataset_cache" / "tagged_ns_50_sl_8_s_42";
  EXPECT_EQ(first.cache_base(), base);
  std::filesystem::path yaml = base, bin = base;
  yaml += "_index.yaml";
  bin += "_index.bin";
  ASSERT_TRUE(std::filesystem::exists(yaml));
  ASSERT_TRUE(std::filesystem::exists(bin));
  EXPECT_EQ(token_stream(first, 8), expected);

  SampledIndexedDataset second(dataset, cached, 50, 42);
  EXPECT_TRUE(second.loaded_from_cache());
  EXPECT_EQ(token_stream(second, 8), expected);

  // A corrupt index file (one flipped byte) is detected and rebuilt, with the same result.
  std::string bytes = testing::read_bytes(bin);
  bytes[bytes.size() / 2] ^= 0x10;
  testing::write_file(bin, bytes);
  SampledIndexedDataset after_corruption(dataset, cached, 50, 42);
  EXPECT_FALSE(after_corruption.loaded_from_cache());
  EXPECT_EQ(token_stream(after_corruption, 8), expected);
  EXPECT_TRUE(SampledIndexedDataset(dataset, cached, 50, 42).loaded_from_cache());

  // A truncated index file, and an unreadable descriptor.
  testing::write_file(bin, testing::read_bytes(bin).substr(0, 40));
  EXPECT_FALSE(SampledIndexedDataset(dataset, cached, 50, 42).loaded_from_cache());
  testing::write_file(yaml, "{{{ not yaml");
  EXPECT_FALSE(SampledIndexedDataset(dataset, cached, 50, 42).loaded_from_cache());
  EXPECT_TRUE(SampledIndexedDataset(dataset, cached, 50, 42).loaded_from_cache());

  // Different sampling parameters under the same file name: the descriptor differs, so it is rebuilt.
  SamplingParameters other = cached;
  other.shuffle = ShufflingType::disabled;
  SampledIndexedDataset reshuffled(dataset, other, 50, 42);
  EXPECT_FALSE(reshuffled.loaded_from_cache());
  EXPECT_NE(token_stream(reshuffled, 8), expected);
  EXPECT_FALSE(SampledIndexedDataset(dataset, cached, 50, 42).loaded_from_cache());

  // The dataset changed under the same name (same document count, different sizes): rebuilt.
  std::vector<int64_t> changed = document_sizes();
  std::swap(changed[0], changed[1]);
  auto rewritten = tagged_dataset(folder, changed);
  SampledIndexedDataset after_change(rewritten, cached, 50, 42);
  EXPECT_FALSE(after_change.loaded_from_cache());
  EXPECT_EQ(token_stream(after_change, 8), token_stream(SampledIndexedDataset(rewritten, parameters(8), 50, 42), 8));
}

TEST(SamplingCache, AFullDiskIsAnErrorNamingTheFileAndLeavesNoPartialCache) {
  TemporaryFolder folder;
  auto dataset = tagged_dataset(folder, document_sizes());
  SamplingParameters cached = parameters(8);
  cached.cache_directory = folder / "dataset_cache";
  std::string message;
  {
    fast_llm::testing::FileSizeLimit limit(256);  // the index takes about 1.5 kB
    message = error_message([&] { SampledIndexedDataset(dataset, cached, 50, 42); });
  }
  EXPECT_NE(message.find(fmt::format("[sampling] {}: write failed after 256 bytes (File too large)",
                                     (folder / "dataset_cache" / "tagged_ns_50_sl_8_s_42_index.bin").string())),
            std::string::npos)
      << message;
  EXPECT_TRUE(std::filesystem::is_empty(folder / "dataset_cache"));
  // With room again, the cache is written, then used.
  EXPECT_FALSE(SampledIndexedDataset(dataset, cached, 50, 42).loaded_from_cache());
  EXPECT_TRUE(SampledIndexedDataset(dataset, cached, 50, 42).loaded_from_cache());
}

// ---------------------------------------------------------------------------------------------------------------
// GPTData: from the `data:` section to sampled datasets.

TEST(GPTData, SamplesConfiguredDatasetsWithTheCacheInTheExperimentDirectory) {
  TemporaryFolder folder;
  testing::write_dataset(folder / "a.fast_llm_dataset", tagged_documents(document_sizes()));
  testing::write_dataset(folder / "b.fast_llm_dataset", tagged_documents(document_sizes(), 100000));
  GPTDataConfig config;
  config.load(YAML::Load(fmt::format(R"(
datasets:
  training:
    type: blended
    datasets: [{{type: memmap, path: {0}/a.fast_llm_dataset}}, {{type: memmap, path: {0}/b.fast_llm_dataset}}]
    weights: [3, 1]
  validation: {{type: slice, dataset: {{type: memmap, path: {0}/a.fast_llm_dataset}}, begin: 0.5, end: 1}}
  synthetic: {{type: random}}
micro_batch_size: 8
)",
                                     folder.path().string())),
              "data");
  config.validate("data");
  GPTData data(config, {.experiment_directory = folder / "experiment", .vocab_size = 300});
  auto training = data.sample_dataset("training", 100);
  EXPECT_EQ(training->num_samples(), 100);
  int64_t from_b = 0;
  for (int64_t sample = 0; sample < 100; ++sample) from_b += training->get_sample(sample).front().tokens[0] >= 100000;
  EXPECT_EQ(from_b, 25);
  auto validation = data.sample_dataset("validation", 10);
  auto synthetic = data.sample_dataset("synthetic", 4);
  std::vector<Document> synthetic_sample = synthetic->get_sample(0);
  ASSERT_EQ(synthetic_sample.size(), 1u);
  EXPECT_EQ(synthetic_sample[0].size(), 9);
  for (int64_t token : synthetic_sample[0].tokens) EXPECT_LT(token, 300);

  // Blended parts get ceil(w * n) + 1 samples and seeds data.seed + 697 * i; the slice uses data.seed.
  std::set<std::string> cached;
  for (const auto& entry : std::filesystem::directory_iterator(folder / "experiment" / "dataset_cache"))
    cached.insert(entry.path().filename().string());
  std::string a = (folder / "a.fast_llm_dataset").string(), b = (folder / "b.fast_llm_dataset").string();
  auto name = [](std::string path) {
    std::string result;
    for (char character : path) result += character == '/' ? std::string("__") : std::string(1, character);
    return result;
  };
  EXPECT_TRUE(cached.contains(name(a) + "_ns_76_sl_8_s_784569_index.yaml")) << fmt::format("{}", fmt::join(cached, " "));
  EXPECT_TRUE(cached.contains(name(b) + "_ns_26_sl_8_s_785266_index.yaml"));
  EXPECT_TRUE(cached.contains(name(a) + "_0.5_1_ns_10_sl_8_s_784569_index.yaml"));

  EXPECT_NE(error_message([&] { data.sample_dataset("training", 5); }).find("already sampled"), std::string::npos);
  EXPECT_NE(error_message([&] { data.sample_dataset("testing", 5); }).find("no dataset 'testing'"),
            std::string::npos);
}

}  // namespace
}  // namespace fast_llm::data
