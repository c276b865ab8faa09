// The legacy Megatron `.bin` / `.idx` pair: files built byte by byte from the format description, every version and
// token type, the `memmap` config falling back to the pair, and malformed index files, each an error naming the file.
#include <gtest/gtest.h>

#include <functional>

#include "data_test_util.h"
#include "fast_llm/data/config.h"
#include "fast_llm/data/legacy_memmap.h"

namespace fast_llm::data {
namespace {

using testing::error_message;
using testing::little;
using testing::read_bytes;
using testing::TemporaryFolder;
using testing::write_file;

struct LegacySpec {
  uint64_t version = 3;
  uint8_t dtype_code = 8;  // uint16
  bool spans = true;
  bool preference = false;
};

// Documents {3 1 4} {1 5} {9 2 6 5}; spans (inclusive last) {(0, 0)} {} {(1, 2), (3, 3)}; chosen / rejected
// (0, 0) / (1, 1) for each document.
void write_legacy(const std::filesystem::path& prefix, const LegacySpec& spec) {
  const std::vector<std::vector<int64_t>> documents{{3, 1, 4}, {1, 5}, {9, 2, 6, 5}};
  std::string bin;
  std::vector<int64_t> pointers;
  for (const auto& document : documents) {
    pointers.push_back(int64_t(bin.size()));
    for (int64_t token : document) {
      switch (spec.dtype_code) {
        case 1: bin += little<uint8_t>(uint8_t(token)); break;
        case 4: bin += little<int32_t>(int32_t(token)); break;
        case 5: bin += little<int64_t>(token); break;
        default: bin += little<uint16_t>(uint16_t(token)); break;
      }
    }
  }
  std::string idx("MMIDIDX\0\0", 9);
  idx += little<uint64_t>(spec.version);
  if (spec.version >= 2) idx += little<uint8_t>(spec.spans);
  if (spec.version >= 3) idx += little<uint8_t>(spec.preference);
  idx += little<uint8_t>(spec.dtype_code);
  idx += little<uint64_t>(3);
  idx += little<uint64_t>(4);
  for (const auto& document : documents) idx += little<int32_t>(int32_t(document.size()));
  for (int64_t pointer : pointers) idx += little<int64_t>(pointer);
  if (spec.spans) {
    for (int32_t count : {1, 0, 2}) idx += little(count);
    for (int32_t bound : {0, 0, 1, 2, 3, 3}) idx += little(bound);
  }
  if (spec.preference) {
    for (int document = 0; document < 3; ++document) idx += little<int32_t>(0) + little<int32_t>(0);
    for (int document = 0; document < 3; ++document) idx += little<int32_t>(1) + little<int32_t>(1);
  }
  for (int64_t index = 0; index < 4; ++index) idx += little(index);
  write_file(legacy_memmap_path(prefix, ".bin"), bin);
  write_file(legacy_memmap_path(prefix, ".idx"), idx);
}

TEST(LegacyMemmap, ReadsEveryVersionAndConvertsInclusiveSpans) {
  TemporaryFolder folder;
  for (LegacySpec spec : {LegacySpec{.version = 1, .dtype_code = 1, .spans = false},
                          LegacySpec{.version = 2, .dtype_code = 4, .spans = true},
                          LegacySpec{.version = 3, .dtype_code = 8, .spans = true, .preference = true},
                          LegacySpec{.version = 3, .dtype_code = 5, .spans = false, .preference = true}}) {
    SCOPED_TRACE(fmt::format("version {} dtype {}", spec.version, spec.dtype_code));
    std::filesystem::path prefix = folder / fmt::format("legacy_{}_{}", spec.version, spec.dtype_code);
    write_legacy(prefix, spec);
    LegacyMemmapDataset dataset("legacy", prefix);
    EXPECT_EQ(dataset.num_documents(), 3);
    EXPECT_EQ(dataset.num_tokens(), 9);
    EXPECT_EQ(dataset.document_sizes(), (std::vector<int64_t>{3, 2, 4}));
    EXPECT_EQ(dataset.get_document(2).tokens, (std::vector<int64_t>{9, 2, 6, 5}));
    EXPECT_EQ(dataset.get_document(1, 1, 2).tokens, (std::vector<int64_t>{5}));
    EXPECT_EQ(dataset.has_loss_masking_spans(), spec.spans);
    if (spec.spans) {
      EXPECT_EQ(dataset.get_document(0).loss_masking_spans, (std::vector<Range>{{0, 1}}));
      EXPECT_TRUE(dataset.get_document(1).loss_masking_spans.empty());
      EXPECT_EQ(dataset.get_document(2).loss_masking_spans, (std::vector<Range>{{1, 3}, {3, 4}}));
      EXPECT_EQ(dataset.get_document(2, 2, 4).loss_masking_spans, (std::vector<Range>{{0, 1}, {1, 2}}));
    }
    if (spec.preference) {
      EXPECT_EQ(dataset.get_document(1).chosen_spans, (std::vector<Range>{{0, 1}}));
      EXPECT_EQ(dataset.get_document(1).rejected_spans, (std::vector<Range>{{1, 2}}));
    }
  }
}

TEST(LegacyMemmap, MemmapConfigPicksTheLegacyPairForAPathWithoutExtension) {
  TemporaryFolder folder;
  write_legacy(folder / "megatron", {});
  MemmapDatasetConfig config;
  config.path = folder / "megatron";
  auto dataset = config.build();
  EXPECT_NE(dynamic_cast<LegacyMemmapDataset*>(dataset.get()), nullptr);
  EXPECT_EQ(dataset->get_document(0).tokens, (std::vector<int64_t>{3, 1, 4}));
  config.path = folder / "absent";
  EXPECT_NE(error_message([&] { config.build(); }).find("no such dataset file"), std::string::npos);
}

TEST(LegacyMemmap, MalformedIndexFilesAreErrorsNamingTheFile) {
  TemporaryFolder folder;
  auto error_for = [&](const std::string& name, const std::function<void(std::string&, std::string&)>& corrupt) {
    std::filesystem::path prefix = folder / name;
    write_legacy(prefix, {});
    std::string idx = read_bytes(legacy_memmap_path(prefix, ".idx"));
    std::string bin = read_bytes(legacy_memmap_path(prefix, ".bin"));
    corrupt(idx, bin);
    write_file(legacy_memmap_path(prefix, ".idx"), idx);
    write_file(legacy_memmap_path(prefix, ".bin"), bin);
    std::string message = error_message([&] { LegacyMemmapDataset("bad", prefix); });
    EXPECT_NE(message.find(folder.path().string()), std::string::npos) << message;
    return message;
  };
  // Header 9, version 8, two flags, dtype 1, counts 16 => sizes at 36, pointers at 48, span counts at 72, spans at 84.
  EXPECT_NE(error_for("header", [](std::string& idx, std::string&) { idx[0] = 'X'; }).find("not a Megatron index"),
            std::string::npos);
  EXPECT_NE(error_for("version", [](std::string& idx, std::string&) { idx.replace(9, 8, little<uint64_t>(4)); })
                .find("unsupported version 4"),
            std::string::npos);
  EXPECT_NE(error_for("float", [](std::string& idx, std::string&) { idx[19] = 6; }).find("floating-point"),
            std::string::npos);
  EXPECT_NE(error_for("truncated", [](std::string& idx, std::string&) { idx.resize(80); }).find("file ends at byte 80"),
            std::string::npos);
  EXPECT_NE(error_for("count", [](std::string& idx, std::string&) { idx.replace(20, 8, little<uint64_t>(1u << 30)); })
                .find("does not fit"),
            std::string::npos);
  EXPECT_NE(error_for("pointer", [](std::string& idx, std::string&) { idx.replace(64, 8, little<int64_t>(12)); })
                .find("runs past the end"),
            std::string::npos);
  EXPECT_NE(error_for("bin", [](std::string&, std::string& bin) { bin.resize(bin.size() - 1); })
                .find("not a whole number"),
            std::string::npos);
  // Last index 3 of document 2 -> 4: past its 4 tokens.
  EXPECT_NE(error_for("span", [](std::string& idx, std::string&) { idx.replace(84 + 20, 4, little<int32_t>(4)); })
                .find("out of range"),
            std::string::npos);
  EXPECT_NE(error_for("span_count", [](std::string& idx, std::string&) { idx.replace(72, 4, little<int32_t>(-1)); })
                .find("negative span count"),
            std::string::npos);
}

}  // namespace
}  // namespace fast_llm::data
