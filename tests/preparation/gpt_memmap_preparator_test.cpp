// The whole preparation with the test tokenizer: shard sizes as Hugging Face's contiguous shards, the files read back
// with the dataset reader, the same bytes whatever the thread count, spans, and a bad line stopping the run.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "fast_llm/core/error.h"
#include "fast_llm/data/batch.h"
#include "fast_llm/data/memmap.h"
#include "fast_llm/preparation/gpt_memmap_preparator.h"
#include "preparation/test_tokenizer.h"

namespace fast_llm::preparation {
namespace {

namespace fs = std::filesystem;
using testing::ByteTestTokenizer;
using testing::bytes_of;

class Preparator : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() /
              ("fast_llm_preparator_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(folder_);
    fs::create_directories(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }
  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream(folder_ / name) << text;
    return folder_ / name;
  }
  // `dataset_fields`: more fields of `dataset`, as ", key: value".
  GPTMemmapPreparatorConfig config(const std::string& extra, const std::string& dataset_fields = "",
                                   const std::string& output = "out") {
    GPTMemmapPreparatorConfig result;
    result.load(YAML::Load("output_path: " + (folder_ / output).string() + "\ndataset: {path: " +
                           (folder_ / "in").string() + dataset_fields + "}\ntokenizer: {path: unused}\n" + extra));
    result.validate();
    return result;
  }
  static std::string read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  }
  fs::path folder_;
};

TEST_F(Preparator, ShardsAndConfigsReadBack) {
  fs::create_directories(folder_ / "in");
  std::string lines;
  for (int index = 0; index < 5; ++index) lines += "{\"text\": \"doc" + std::to_string(index) + "\"}\n";
  std::ofstream(folder_ / "in" / "a.jsonl") << lines;
  std::ofstream(folder_ / "in" / "b.txt") << "file";
  std::ofstream(folder_ / "in" / "croissant.json") << "{\"name\": \"mine\"}";
  const ByteTestTokenizer tokenizer;
  const PreparationSummary summary = prepare_gpt_memmap(config("documents_per_shard: 2\nnum_workers: 3"), tokenizer);
  EXPECT_EQ(summary.documents, 6);
  EXPECT_EQ(summary.tokens, 5 * 6 + 6);
  EXPECT_EQ(summary.shards, 3);
  EXPECT_EQ(summary.data_type, data::TokenDataType::uint16);
  // 6 documents in 3 shards of 2; the text file is last.
  const data::MemmapDataset last("last", folder_ / "out" / "shard_0_2.fast_llm_dataset");
  ASSERT_EQ(last.num_documents(), 2);
  std::vector<int64_t> expected{ByteTestTokenizer::kBos};
  for (int64_t id : bytes_of("file")) expected.push_back(id);
  expected.push_back(ByteTestTokenizer::kEos);
  EXPECT_EQ(last.get_document(1).tokens, expected);
  const std::string yaml = read(folder_ / "out" / "fast_llm_config.yaml");
  EXPECT_NE(yaml.find("type: blended"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("shard_0_2.fast_llm_dataset"), std::string::npos) << yaml;
  EXPECT_EQ(read(folder_ / "out" / "croissant.json"), "{\"name\": \"mine\"}");

  // The same files on one thread.
  const std::string first = read(folder_ / "out" / "shard_0_0.fast_llm_dataset");
  fs::remove_all(folder_ / "out");
  prepare_gpt_memmap(config("documents_per_shard: 2\nnum_workers: 1"), tokenizer);
  EXPECT_EQ(read(folder_ / "out" / "shard_0_0.fast_llm_dataset"), first);
}

// Several batches (a batch holds at least 256 records), read ahead while the previous one is tokenized: documents stay
// in input order across batches, shards and files, and the files are the same bytes on 1 and 4 threads.
TEST_F(Preparator, ManyBatchesKeepTheInputOrder) {
  fs::create_directories(folder_ / "in");
  for (int file = 0; file < 3; ++file) {
    std::ofstream out(folder_ / "in" / ("part-" + std::to_string(file) + ".jsonl"));
    for (int index = 0; index < 400; ++index) out << "{\"text\": \"" << file * 1000 + index << "\"}\n";
  }
  const ByteTestTokenizer tokenizer;
  prepare_gpt_memmap(config("documents_per_shard: 500\nnum_workers: 4"), tokenizer);
  int64_t expected_number = 0;
  std::vector<std::string> four_threads;
  for (int shard = 0; shard < 3; ++shard) {
    const fs::path path = folder_ / "out" / ("shard_0_" + std::to_string(shard) + ".fast_llm_dataset");
    four_threads.push_back(read(path));
    const data::MemmapDataset dataset("s", path);
    EXPECT_EQ(dataset.num_documents(), 400);  // 1200 documents in ceil(1200 / 500) = 3 shards
    for (int64_t index = 0; index < dataset.num_documents(); ++index, ++expected_number) {
      const std::vector<int64_t> tokens = dataset.get_document(index).tokens;
      const std::string text(tokens.begin() + 1, tokens.end() - 1);
      ASSERT_EQ(text, std::to_string(expected_number / 400 * 1000 + expected_number % 400)) << path << " " << index;
    }
  }
  fs::remove_all(folder_ / "out");
  prepare_gpt_memmap(config("documents_per_shard: 500\nnum_workers: 1"), tokenizer);
  for (int shard = 0; shard < 3; ++shard)
    EXPECT_EQ(read(folder_ / "out" / ("shard_0_" + std::to_string(shard) + ".fast_llm_dataset")),
              four_threads[size_t(shard)]);
}

TEST_F(Preparator, HuggingFaceShardSizesSplitsSpansAndDataType) {
  fs::create_directories(folder_ / "in");
  std::string lines;
  for (int index = 0; index < 7; ++index) lines += "{\"text\": \"abcd\", \"mask\": [[0, 1]]}\n";
  std::ofstream(folder_ / "in" / "a.jsonl") << lines;
  const PreparationSummary summary = prepare_gpt_memmap(
      config("documents_per_shard: 3\nsplits: {training: 0.5, test: 0.5}",
             ", data_type: uint32, source_schema: {loss_masking_spans: mask}"),
      ByteTestTokenizer());
  EXPECT_EQ(summary.shards, 3);
  // ceil(7 / 3) = 3 shards of 3, 2 and 2 documents (the first 7 % 3 shards take one more).
  const std::vector<int64_t> sizes{3, 2, 2};
  for (int index = 0; index < 3; ++index) {
    const data::MemmapDataset shard("s", folder_ / "out" / ("shard_0_" + std::to_string(index) + ".fast_llm_dataset"));
    EXPECT_EQ(shard.num_documents(), sizes[size_t(index)]);
    EXPECT_EQ(shard.token_data_type(), data::TokenDataType::uint32);
    ASSERT_TRUE(shard.has_loss_masking_spans());
    EXPECT_EQ(shard.get_document(0).loss_masking_spans, (std::vector<data::Range>{{1, 3}}));
  }
  EXPECT_TRUE(fs::exists(folder_ / "out" / "fast_llm_config_training.yaml"));
  const std::string test = read(folder_ / "out" / "fast_llm_config_test.yaml");
  EXPECT_NE(test.find("num_ranges"), std::string::npos) << test;
  EXPECT_FALSE(fs::exists(folder_ / "out" / "fast_llm_config.yaml"));
}

// Rollouts with Fast-LLM's `advantages` field (one number per document): every token gets it, old log-probs 0; the
// batch carries them aligned with the labels; the dataset config's metadata describes the sections.
TEST_F(Preparator, AdvantagesRoundTripToTheBatch) {
  fs::create_directories(folder_ / "in");
  std::ofstream(folder_ / "in" / "rollouts.jsonl") << "{\"text\": \"ab\", \"reward\": 0.5}\n"
                                                    << "{\"text\": \"cde\", \"reward\": -1.25}\n";
  prepare_gpt_memmap(config("", ", source_schema: {advantages: reward}"), ByteTestTokenizer());
  const data::MemmapDataset dataset("rollouts", folder_ / "out" / "shard_0_0.fast_llm_dataset");
  ASSERT_TRUE(dataset.has_token_data());
  std::vector<data::Document> documents{dataset.get_document(0), dataset.get_document(1)};
  EXPECT_EQ(documents[0].advantages, std::vector<float>(4, 0.5f));  // BOS a b EOS
  EXPECT_EQ(documents[1].advantages, std::vector<float>(5, -1.25f));
  EXPECT_EQ(documents[1].old_log_probabilities, std::vector<float>(5, 0.0f));
  const data::Batch batch = data::make_batch(documents, {.micro_batch_size = 8});
  const std::span<const int64_t> labels = batch.labels_at(1);
  for (int64_t position = 0; position < 8; ++position) {
    if (labels[size_t(position)] < 0) continue;
    // Label t is token t + 1: the first document's tokens are 0..3, the second's 4..8.
    const int32_t document = position + 1 < 4 ? 0 : 1;
    EXPECT_EQ(batch.label_documents[size_t(position)], document) << position;
    EXPECT_EQ(batch.advantages[size_t(position)], document == 0 ? 0.5f : -1.25f) << position;
    EXPECT_EQ(batch.old_log_probabilities[size_t(position)], 0.0f) << position;
  }
  EXPECT_EQ(batch.num_labels(), 3 + 4);
  const std::string yaml = read(folder_ / "out" / "fast_llm_config.yaml");
  EXPECT_NE(yaml.find("old_log_probabilities"), std::string::npos) << yaml;

  // A record whose advantage is not a number: an error naming the line.
  std::ofstream(folder_ / "in" / "rollouts.jsonl") << "{\"text\": \"ab\", \"reward\": \"high\"}\n";
  fs::remove_all(folder_ / "out");
  try {
    prepare_gpt_memmap(config("", ", source_schema: {advantages: reward}"), ByteTestTokenizer());
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("rollouts.jsonl:1"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("expected a number"), std::string::npos) << error.what();
  }
}

TEST_F(Preparator, ABadLineStopsTheRunNamingItAndWritesNoConfig) {
  fs::create_directories(folder_ / "in");
  std::ofstream(folder_ / "in" / "a.jsonl") << "{\"text\": \"fine\"}\n";
  std::ofstream(folder_ / "in" / "b.jsonl") << "{\"text\": \"fine\"}\n\n{\"text\": \"broken\"\n";
  try {
    prepare_gpt_memmap(config(""), ByteTestTokenizer());
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("b.jsonl:3"), std::string::npos) << error.what();
  }
  EXPECT_FALSE(fs::exists(folder_ / "out" / "fast_llm_config.yaml"));
  EXPECT_FALSE(fs::exists(folder_ / "out" / "shard_0_0.fast_llm_dataset"));
  // Only empty input is an error too, not an empty dataset.
  std::ofstream(folder_ / "in" / "a.jsonl", std::ios::trunc);
  std::ofstream(folder_ / "in" / "b.jsonl", std::ios::trunc) << "\n";
  EXPECT_THROW(prepare_gpt_memmap(config(""), ByteTestTokenizer()), Error);
  // Output path that is a file.
  std::ofstream(folder_ / "in" / "a.jsonl") << "{\"text\": \"x\"}\n";
  write("a_file", "a file");
  EXPECT_THROW(prepare_gpt_memmap(config("", "", "a_file"), ByteTestTokenizer()), Error);
}

}  // namespace
}  // namespace fast_llm::preparation
