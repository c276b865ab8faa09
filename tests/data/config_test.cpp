// The `data:` section: Fast-LLM's names and defaults, dataset types, validation errors with full paths, the `fim`
// fields, and dataset config files as `prepare` writes them.
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "fast_llm/data/config.h"
#include "fast_llm/data/dataset.h"
#include "fast_llm/data/sampling.h"

namespace fast_llm::data {
namespace {

using testing::error_message;
using testing::TemporaryFolder;
using testing::write_file;

GPTDataConfig load(const std::string& text) {
  GPTDataConfig config;
  config.load(YAML::Load(text), "data");
  config.validate("data");
  return config;
}

std::string load_error(const std::string& text) {
  return error_message([&] { load(text); });
}

TEST(DataConfig, DefaultsAreFastLLMs) {
  GPTDataConfig config = load("{}");
  EXPECT_TRUE(config.datasets.empty());
  EXPECT_EQ(config.micro_batch_size, 2048);
  EXPECT_FALSE(config.maximum_document_length.has_value());
  EXPECT_TRUE(config.truncate_documents);
  EXPECT_EQ(config.shuffle, ShufflingType::epoch);
  EXPECT_TRUE(config.gpu);
  EXPECT_EQ(config.seed, 784569);
  EXPECT_DOUBLE_EQ(config.data_sample_warn_time_ms, 1000.0);
  EXPECT_EQ(config.multiprocessing_context, MultiprocessingContext::spawn);
}

TEST(DataConfig, ReadsEveryDatasetType) {
  GPTDataConfig config = load(R"(
datasets:
  training:
    type: blended
    datasets:
      - {type: memmap, path: /data/a.fast_llm_dataset}
      - {type: file, path: /data/fast_llm_config.yaml}
      - {type: concatenated, datasets: [{type: memmap, path: x}, {type: slice, dataset: {type: memmap, path: y}, end: 0.5}]}
      - {type: random}
    weights: [4, 2, 1, 1]
  validation: {type: slice, dataset: {type: memmap, path: /data/b}, begin: 0.9, end: 1}
micro_batch_size: 4096
maximum_document_length: 1024
truncate_documents: false
shuffle: skip_first_epoch
seed: 12
)");
  EXPECT_EQ(config.micro_batch_size, 4096);
  EXPECT_EQ(config.maximum_document_length, 1024);
  EXPECT_FALSE(config.truncate_documents);
  EXPECT_EQ(config.shuffle, ShufflingType::skip_first_epoch);
  EXPECT_EQ(config.seed, 12);
  const auto* blended = config.datasets.at("training").as<BlendedDatasetConfig>();
  ASSERT_NE(blended, nullptr);
  ASSERT_EQ(blended->datasets.size(), 4u);
  EXPECT_TRUE(blended->datasets[0].is<MemmapDatasetConfig>());
  EXPECT_TRUE(blended->datasets[1].is<DatasetFromFileConfig>());
  EXPECT_TRUE(blended->datasets[2].is<ConcatenatedDatasetConfig>());
  EXPECT_TRUE(blended->datasets[3].is<RandomDatasetConfig>());
  EXPECT_EQ(blended->datasets[3].as<RandomDatasetConfig>()->name, "dummy");
  // Weights are normalised at validation.
  EXPECT_EQ(blended->weights, (std::vector<double>{0.5, 0.25, 0.125, 0.125}));
  const auto* slice = config.datasets.at("validation").as<DatasetSliceConfig>();
  ASSERT_NE(slice, nullptr);
  EXPECT_DOUBLE_EQ(slice->begin, 0.9);
  EXPECT_EQ(slice->dataset.as<MemmapDatasetConfig>()->path, "/data/b");
  EXPECT_TRUE(config.unsupported_fields().empty());

  // What is written reads back the same.
  std::string written = config.to_yaml_string();
  GPTDataConfig reread = load(written);
  EXPECT_EQ(reread.to_yaml_string(), written);
}

TEST(DataConfig, ErrorsNameTheFullPath) {
  EXPECT_NE(load_error("{datasets: {training: {type: nope}}}").find("data.datasets.training.type: unknown type 'nope'"),
            std::string::npos);
  EXPECT_NE(load_error("{datasets: {training: {path: x}}}").find("data.datasets.training.type: a type is required"),
            std::string::npos);
  EXPECT_NE(load_error("{datasets: {training: {type: memmap}}}").find("data.datasets.training.path: a path is required"),
            std::string::npos);
  EXPECT_NE(load_error("{micro_batch_size: 0}").find("data.micro_batch_size: must be greater than 0"),
            std::string::npos);
  EXPECT_NE(load_error("{shuffle: sometimes}").find("data.shuffle: unknown value 'sometimes'"), std::string::npos);
  EXPECT_NE(load_error("{maximum_document_length: -3}").find("data.maximum_document_length"), std::string::npos);
  EXPECT_NE(load_error("{datasets: {training: {type: blended, datasets: [{type: random}], weights: [1]}}}")
                .find("data.datasets.training.datasets: at least two datasets"),
            std::string::npos);
  EXPECT_NE(load_error("{datasets: {training: {type: blended, datasets: [{type: random}, {type: random}], "
                       "weights: [1]}}}")
                .find("data.datasets.training.weights: one weight per dataset"),
            std::string::npos);
  EXPECT_NE(load_error("{datasets: {training: {type: blended, datasets: [{type: random}, {type: random}], "
                       "weights: [1, -1]}}}")
                .find("data.datasets.training.weights: element 1: must be at least 0"),
            std::string::npos);
  EXPECT_NE(load_error("{datasets: {training: {type: concatenated, datasets: [{type: random}]}}}")
                .find("data.datasets.training.datasets[0]: a `random` dataset cannot be concatenated"),
            std::string::npos);
  EXPECT_NE(load_error("{datasets: {training: {type: concatenated}}}")
                .find("data.datasets.training.datasets: at least one dataset"),
            std::string::npos);
  EXPECT_NE(load_error("{datasets: {v: {type: slice, dataset: {type: random}}}}")
                .find("data.datasets.v.dataset: a `random` dataset cannot be sliced"),
            std::string::npos);
  EXPECT_NE(load_error("{datasets: {v: {type: slice, dataset: {type: memmap, path: x}, begin: 0.6, end: 0.5}}}")
                .find("data.datasets.v.end: must be at least begin"),
            std::string::npos);
  EXPECT_NE(load_error("{datasets: {v: {type: slice, dataset: {type: memmap, path: x}, end: 1.5}}}")
                .find("data.datasets.v.end: must be in [0, 1]"),
            std::string::npos);
  EXPECT_NE(load_error("{datasets: {training: {type: memmap, path: x, bogus: 1}}}")
                .find("data.datasets.training.bogus: unknown field"),
            std::string::npos);
}

TEST(DataConfig, NumericErrorsSayWhatIsWrongWithTheValue) {
  auto blended_error = [](const std::string& weights) {
    return load_error(fmt::format(
        "{{datasets: {{training: {{type: blended, datasets: [{{type: random}}, {{type: random}}], weights: {}}}}}}}",
        weights));
  };
  std::string message = blended_error("[.inf, 1]");
  EXPECT_NE(message.find("data.datasets.training.weights: element 0: must be at least 0 and finite, got inf"),
            std::string::npos)
      << message;
  message = blended_error("[1, .nan]");
  EXPECT_NE(message.find("data.datasets.training.weights: element 1: must be at least 0 and finite, got nan"),
            std::string::npos)
      << message;
  message = blended_error("[1e308, 1e308]");
  EXPECT_NE(message.find("data.datasets.training.weights: the weights must have a finite sum, got inf for "
                         "[1e+308, 1e+308]"),
            std::string::npos)
      << message;
  message = blended_error("[0, 0]");
  EXPECT_NE(message.find("data.datasets.training.weights: the weights must not all be zero, got [0, 0]"),
            std::string::npos)
      << message;
  // Huge weights whose sum is finite are proportions like any others.
  GPTDataConfig config = load(
      "{datasets: {training: {type: blended, datasets: [{type: random}, {type: random}], weights: [1e307, 3e307]}}}");
  const auto* blended = config.datasets.at("training").as<BlendedDatasetConfig>();
  EXPECT_NEAR(blended->weights[0], 0.25, 1e-15);
  EXPECT_NEAR(blended->weights[1], 0.75, 1e-15);

  // Cumulative sequence lengths and span bounds within a sample are 32-bit.
  message = load_error("{micro_batch_size: 3000000000}");
  EXPECT_NE(message.find("data.micro_batch_size: must be at most 1073741824, got 3000000000"), std::string::npos)
      << message;
  // Slice fractions and fim rates refuse what is not a fraction, nan and inf included.
  message = load_error("{datasets: {v: {type: slice, dataset: {type: memmap, path: x}, begin: .nan}}}");
  EXPECT_NE(message.find("data.datasets.v.begin: must be in [0, 1], got nan"), std::string::npos) << message;
  message = load_error("{datasets: {v: {type: fim, dataset: {type: memmap, path: x}, spm_rate: .inf}}}");
  EXPECT_NE(message.find("data.datasets.v.spm_rate: must be in [0, 1], got inf"), std::string::npos) << message;
}

TEST(DataConfig, SliceSelectingNoDocumentNamesTheConfig) {
  TemporaryFolder folder;
  testing::write_dataset(folder / "data.fast_llm_dataset", testing::tagged_documents({3, 4}));
  // 0.5 and 0.6 of 2 documents both round to document 1.
  GPTDataConfig config = load(fmt::format(
      "{{datasets: {{v: {{type: slice, dataset: {{type: memmap, path: {}}}, begin: 0.5, end: 0.6}}}}}}",
      (folder / "data.fast_llm_dataset").string()));
  std::string message = error_message([&] { config.datasets.at("v").as<DatasetSliceConfig>()->build(); });
  EXPECT_NE(message.find("data.datasets.v: [begin, end) = [0.5, 0.6) selects no document of the 2"),
            std::string::npos)
      << message;
}

TEST(DataConfig, FimReadsFastLLMsFields) {
  GPTDataConfig config = load(R"(
datasets:
  training:
    type: fim
    dataset: {type: memmap, path: x}
    rate: 0.5
    tokenizer: {path: /tokenizer}
)");
  const auto* fim = config.datasets.at("training").as<FimDatasetConfig>();
  ASSERT_NE(fim, nullptr);
  EXPECT_DOUBLE_EQ(fim->rate, 0.5);
  EXPECT_DOUBLE_EQ(fim->spm_rate, 0.5);
  EXPECT_DOUBLE_EQ(fim->fragment_rate, 0.0);
  EXPECT_FALSE(fim->max_middle_len.has_value());
  EXPECT_FALSE(fim->split_sample.has_value());
  EXPECT_FALSE(fim->ignore_prefix.has_value());
  EXPECT_FALSE(fim->truncate_or_pad);
  EXPECT_EQ(fim->prefix_token, "<fim_prefix>");
  EXPECT_EQ(fim->middle_token, "<fim_middle>");
  EXPECT_EQ(fim->pad_token, "<fim_pad>");
  EXPECT_EQ(fim->suffix_token, "<fim_suffix>");
  EXPECT_EQ(fim->tokenizer.path, std::filesystem::path("/tokenizer"));
  EXPECT_TRUE(config.unsupported_fields().empty());

  std::string message = load_error("{datasets: {training: {type: fim, dataset: {type: random}, rate: 0.5}}}");
  EXPECT_NE(message.find("data.datasets.training.tokenizer.path: fill-in-the-middle needs a tokenizer"),
            std::string::npos)
      << message;
  message = load_error("{datasets: {training: {type: fim, tokenizer: {path: t}}}}");
  EXPECT_NE(message.find("data.datasets.training.dataset: a dataset is required"), std::string::npos) << message;
  message = load_error("{datasets: {training: {type: fim, dataset: {type: random}, tokenizer: {path: t}, "
                       "max_middle_len: 0}}}");
  EXPECT_NE(message.find("data.datasets.training.max_middle_len"), std::string::npos) << message;
}

// ---------------------------------------------------------------------------------------------------------------
// `file` datasets

TEST(DatasetFile, ResolvesPathsAgainstTheFilesFolder) {
  TemporaryFolder folder;
  std::filesystem::create_directories(folder / "prepared");
  testing::write_dataset(folder / "prepared/shard_0_0.fast_llm_dataset", testing::tagged_documents({3, 4}));
  testing::write_dataset(folder / "prepared/shard_0_1.fast_llm_dataset", testing::tagged_documents({5}, 100));
  // The current `prepare` output: a blended tree of shards, weighted by tokens, with reader metadata.
  write_file(folder / "prepared/fast_llm_config.yaml", R"(
config:
  type: blended
  datasets:
  - {type: memmap, path: shard_0_0.fast_llm_dataset}
  - {type: slice, dataset: {type: memmap, path: shard_0_1.fast_llm_dataset}, begin: 0, end: 1}
  weights: [7, 5]
metadata:
  num_tokens: 12
  tokens: {num_tokens: 12, num_documents: 3, data_type: int32}
  loss_masking_spans: {num_documents: 3, num_ranges: 0}
)");
  config::Dynamic<DatasetConfig> loaded = load_dataset_config_file(folder / "prepared/fast_llm_config.yaml");
  const auto* blended = loaded.as<BlendedDatasetConfig>();
  ASSERT_NE(blended, nullptr);
  EXPECT_EQ(blended->datasets[0].as<MemmapDatasetConfig>()->path,
            folder / "prepared" / "shard_0_0.fast_llm_dataset");
  EXPECT_EQ(blended->datasets[1].as<DatasetSliceConfig>()->dataset.as<MemmapDatasetConfig>()->path,
            folder / "prepared" / "shard_0_1.fast_llm_dataset");
  EXPECT_NEAR(blended->weights[0], 7.0 / 12.0, 1e-15);

  // A bare dataset config (older prepare) works too, and a single memmap builds as an indexed dataset.
  write_file(folder / "prepared/single.yaml", "{type: memmap, path: shard_0_0.fast_llm_dataset}\n");
  DatasetFromFileConfig file;
  file.path = folder / "prepared/single.yaml";
  auto dataset = file.build();
  EXPECT_EQ(dataset->num_documents(), 2);
  EXPECT_EQ(dataset->get_document(1).tokens, (std::vector<int64_t>{1000, 1001, 1002, 1003}));

  // A blended file where documents are needed is an error naming the file.
  file.path = folder / "prepared/fast_llm_config.yaml";
  std::string message = error_message([&] { file.build(); });
  EXPECT_NE(message.find("fast_llm_config.yaml"), std::string::npos) << message;
  EXPECT_NE(message.find("a `blended` dataset cannot be used here"), std::string::npos) << message;
}

TEST(DatasetFile, RefusesEscapingPathsAndUnknownEntries) {
  TemporaryFolder folder;
  auto error_for = [&](const std::string& content) {
    write_file(folder / "config.yaml", content);
    std::string message = error_message([&] { load_dataset_config_file(folder / "config.yaml"); });
    EXPECT_NE(message.find((folder / "config.yaml").string()), std::string::npos) << message;
    return message;
  };
  EXPECT_NE(error_for("{type: memmap, path: ../outside.fast_llm_dataset}").find("must be relative and stay within"),
            std::string::npos);
  EXPECT_NE(error_for("{type: memmap, path: a/../../b}").find("must be relative"), std::string::npos);
  EXPECT_NE(error_for("{type: memmap, path: /etc/passwd}").find("must be relative"), std::string::npos);
  EXPECT_NE(error_for("{config: {type: memmap, path: a}, metadata: {num_tokens: 3, surprise: 1}}")
                .find("unknown metadata entry 'surprise'"),
            std::string::npos);
  EXPECT_NE(error_for("{config: {type: memmap, path: a}, extra: 1}").find("unknown top-level entry 'extra'"),
            std::string::npos);
  EXPECT_NE(error_for("{config: {type: memmap, path: a, wrong: 2}}").find("config.wrong: unknown field"),
            std::string::npos);
  std::string list_error = error_for("[1, 2]");
  EXPECT_NE(list_error.find("must be a mapping"), std::string::npos) << list_error;
  EXPECT_NE(error_message([&] { load_dataset_config_file(folder / "absent.yaml"); }).find("does not exist"),
            std::string::npos);
}

TEST(DatasetFile, IncludeCyclesAreErrorsNamingTheChain) {
  TemporaryFolder folder;
  auto build_error = [&](const std::string& file) {
    DatasetFromFileConfig config;
    config.path = folder / file;
    return error_message([&] { config.build(); });
  };
  // A file that includes itself.
  write_file(folder / "self.yaml", "{type: file, path: self.yaml}\n");
  std::string message = build_error("self.yaml");
  EXPECT_NE(message.find(fmt::format("{0} -> {0}", (folder / "self.yaml").string())), std::string::npos) << message;
  EXPECT_NE(message.find("include each other"), std::string::npos) << message;

  // Two files that include each other, the second through a concatenation.
  write_file(folder / "a.yaml", "{config: {type: file, path: b.yaml}}\n");
  write_file(folder / "b.yaml", "{type: concatenated, datasets: [{type: file, path: a.yaml}]}\n");
  message = build_error("a.yaml");
  EXPECT_NE(message.find(fmt::format("{0} -> {1} -> {0}", (folder / "a.yaml").string(), (folder / "b.yaml").string())),
            std::string::npos)
      << message;
  // The error names where the repeated include sits in the file that makes it.
  EXPECT_NE(message.find("b.yaml: dataset.datasets[0].path"), std::string::npos) << message;

  // A blended dataset listing itself (through its file), as the trainer samples it.
  write_file(folder / "blend.yaml",
             "{type: blended, datasets: [{type: random}, {type: file, path: blend.yaml}], weights: [1, 1]}\n");
  GPTDataConfig data = load(fmt::format("{{datasets: {{training: {{type: file, path: {}}}}}}}",
                                        (folder / "blend.yaml").string()));
  SamplingParameters parameters;
  parameters.vocab_size = 100;
  message = error_message([&] { data.datasets.at("training")->build_and_sample(parameters, 10, 0); });
  EXPECT_NE(message.find(fmt::format("{0} -> {0}", (folder / "blend.yaml").string())), std::string::npos) << message;

  // The same file twice side by side is no cycle.
  testing::write_dataset(folder / "data.fast_llm_dataset", testing::tagged_documents({3, 4}));
  write_file(folder / "leaf.yaml", "{type: memmap, path: data.fast_llm_dataset}\n");
  write_file(folder / "twice.yaml",
             "{type: concatenated, datasets: [{type: file, path: leaf.yaml}, {type: file, path: ./leaf.yaml}]}\n");
  DatasetFromFileConfig twice;
  twice.path = folder / "twice.yaml";
  EXPECT_EQ(twice.build()->num_documents(), 4);
}

TEST(DatasetFile, NestingIsBounded) {
  TemporaryFolder folder;
  testing::write_dataset(folder / "data.fast_llm_dataset", testing::tagged_documents({3, 4}));
  // A chain of files, each a slice of the next: acyclic, legitimate while short, refused when absurdly deep.
  auto write_chain = [&](int length) {
    for (int index = 0; index < length; ++index)
      write_file(folder / fmt::format("chain_{}.yaml", index),
                 index + 1 < length
                     ? fmt::format("{{type: slice, dataset: {{type: file, path: chain_{}.yaml}}}}\n", index + 1)
                     : std::string("{type: memmap, path: data.fast_llm_dataset}\n"));
    DatasetFromFileConfig config;
    config.path = folder / "chain_0.yaml";
    return config;
  };
  EXPECT_EQ(write_chain(10).build()->num_documents(), 2);
  std::string message = error_message([&] { write_chain(1000).build(); });
  EXPECT_NE(message.find("datasets nest more than 64 deep"), std::string::npos) << message;
  EXPECT_NE(message.find("chain_31.yaml: dataset.dataset"), std::string::npos) << message;

  // Nesting written inline in the trainer's config counts the same.
  std::string nested = "{type: memmap, path: x}";
  for (int level = 0; level < 70; ++level) nested = fmt::format("{{type: slice, dataset: {}}}", nested);
  message = load_error(fmt::format("{{datasets: {{training: {}}}}}", nested));
  EXPECT_NE(message.find("datasets nest more than 64 deep"), std::string::npos) << message;
  EXPECT_NE(message.find("data.datasets.training.dataset.dataset"), std::string::npos) << message;
}

TEST(DatasetFile, PathsTheSystemRefusesAreCleanErrors) {
  // A file name longer than the system allows: std::filesystem throws for it where it would say "no such file".
  TemporaryFolder folder;
  const std::string long_name(300, 'x');
  write_file(folder / "config.yaml", fmt::format("{{type: memmap, path: {}}}", long_name));
  const config::Dynamic<DatasetConfig> loaded = load_dataset_config_file(folder / "config.yaml");
  std::string message = error_message([&] { loaded.as<IndexedDatasetConfig>()->build(); });
  EXPECT_NE(message.find("no such dataset file"), std::string::npos) << message;
  message = error_message([&] { load_dataset_config_file(folder / long_name); });
  EXPECT_NE(message.find("dataset config file does not exist"), std::string::npos) << message;
}

}  // namespace
}  // namespace fast_llm::data
